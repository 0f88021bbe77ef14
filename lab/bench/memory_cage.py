"""A memory cgroup for one rank: the diagnosis bench's out-of-memory fault.

The rank is moved into a cgroup of its own with a small limit, then asked to allocate
(lab.health.injected_error, SIGRTMIN+1); what it allocates from then on is charged to the
cgroup, and the kernel's OOM killer ends it there, as it ends a leaking rank on a full
machine, without touching anything else. The cgroup is the bench's own (named after its pid)
and is removed once the rank is gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from lab.errors import LabError

V1 = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory hierarchy
V2 = Path("/sys/fs/cgroup")
LIMIT_MIB = 256


def where(name: str) -> tuple[Path, str]:
    """(the cgroup's folder, its limit file) on this machine's memory controller."""
    if (V1 / "memory.limit_in_bytes").exists():
        return V1 / name, "memory.limit_in_bytes"
    controllers = V2 / "cgroup.subtree_control"
    if controllers.exists() and "memory" in controllers.read_text().split():
        return V2 / name, "memory.max"
    raise LabError("the oom fault needs a memory cgroup controller to limit a rank with; leave it out: --classes")


@contextlib.contextmanager
def memory_cgroup(label: str, limit_mib: int = LIMIT_MIB) -> Iterator[Path]:
    """A memory cgroup of this process's own (named after it and its pid) with a limit; removed
    once what was put in it is gone (a killed process leaves as the kernel reaps it)."""
    path, limit = where(f"tlab-{label}-{os.getpid()}")
    try:
        path.mkdir()
        (path / limit).write_text(str(limit_mib << 20))
    except OSError as e:
        with contextlib.suppress(OSError):
            path.rmdir()
        raise LabError(f"cannot make a memory cgroup at {path}: {e.strerror or e}") from None
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.2)


@contextlib.contextmanager
def memory_cage(pid: int, label: str) -> Iterator[Path]:
    """pid moved into a memory cgroup of its own: what it allocates from then on counts there."""
    with memory_cgroup(f"diagnosis-{label}") as path:
        try:
            (path / "cgroup.procs").write_text(str(pid))
        except OSError as e:
            raise LabError(f"cannot move rank pid {pid} into {path}: {e.strerror or e}") from None
        yield path
