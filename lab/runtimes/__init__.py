"""Where the lab's nodes run. Each runtime hands out the same `Node` handle."""

from __future__ import annotations

from lab.errors import LabError

RUNTIME_NAMES = ("auto", "local")


def create(name: str, run_dir, *, hosts: str = "auto", log=print, **options):
    """The runtime called `name`; "auto" picks Docker when a daemon answers, else local."""
    if name not in RUNTIME_NAMES:
        raise LabError(f"unknown runtime {name!r}; choose one of: {', '.join(RUNTIME_NAMES)}")
    from lab.runtimes.local import LocalRuntime  # the only runtime so far

    return LocalRuntime(run_dir, hosts=hosts, log=log, **options)
