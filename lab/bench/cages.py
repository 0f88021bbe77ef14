"""A cgroup of its own for one rank: the benches' out-of-memory fault and CPU-starved straggler.

The rank is moved into a cgroup the bench makes (named after the bench's pid) with one limit:
- memory (`lab bench diagnosis`'s oom cell): then the rank is asked to allocate
  (lab.health.injected_error, SIGRTMIN+1); what it allocates from then on is charged to the
  cgroup, and the kernel's OOM killer ends it there, as it ends a leaking rank on a full
  machine, without touching anything else;
- CPU time (`lab bench stragglers`' cpu-quota cell): a quota of a few percent of one core,
  as a node whose container or pod got too small a CPU limit.
The cgroup is removed once what was put in it is gone.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from lab.errors import LabError

CGROUPS = Path("/sys/fs/cgroup")  # cgroup v1: a hierarchy per controller under it; v2: one
LIMIT_MIB = 256
CFS_PERIOD_US = 100_000


def where(controller: str, name: str) -> tuple[Path, bool]:
    """(the cgroup's folder, whether it is cgroup v1's) for a controller on this machine."""
    if (CGROUPS / controller / "cgroup.procs").exists():
        return CGROUPS / controller / name, True
    controllers = CGROUPS / "cgroup.subtree_control"
    if controllers.exists() and controller in controllers.read_text().split():
        return CGROUPS / name, False
    raise LabError(f"this machine has no {controller} cgroup controller to limit a rank with")


@contextlib.contextmanager
def made_cgroup(path: Path, limits: dict[str, str]) -> Iterator[Path]:
    """A cgroup at path with limits (file -> value); removed once what was put in it is gone (a
    killed process leaves as the kernel reaps it)."""
    try:
        path.mkdir()
        for name, value in limits.items():
            (path / name).write_text(value)
    except OSError as e:
        with contextlib.suppress(OSError):
            path.rmdir()
        raise LabError(f"cannot make a cgroup at {path}: {e.strerror or e}") from None
    try:
        yield path
    finally:
        for _ in range(50):
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.2)


def memory_cgroup(label: str, limit_mib: int = LIMIT_MIB) -> contextlib.AbstractContextManager[Path]:
    path, v1 = where("memory", f"tlab-{label}-{os.getpid()}")
    return made_cgroup(path, {"memory.limit_in_bytes" if v1 else "memory.max": str(limit_mib << 20)})


def cpu_cgroup(label: str, percent: float) -> contextlib.AbstractContextManager[Path]:
    path, v1 = where("cpu", f"tlab-{label}-{os.getpid()}")
    quota = str(max(1000, int(CFS_PERIOD_US * percent / 100)))
    if v1:
        return made_cgroup(path, {"cpu.cfs_period_us": str(CFS_PERIOD_US), "cpu.cfs_quota_us": quota})
    return made_cgroup(path, {"cpu.max": f"{quota} {CFS_PERIOD_US}"})


@contextlib.contextmanager
def caged(pid: int, cgroup: contextlib.AbstractContextManager[Path]) -> Iterator[Path]:
    """pid moved into the cgroup: what it allocates or runs from then on counts there."""
    with cgroup as path:
        try:
            (path / "cgroup.procs").write_text(str(pid))
        except OSError as e:
            raise LabError(f"cannot move rank pid {pid} into {path}: {e.strerror or e}") from None
        yield path


def memory_cage(pid: int, label: str) -> contextlib.AbstractContextManager[Path]:
    return caged(pid, memory_cgroup(f"diagnosis-{label}"))


def cpu_cage(pid: int, label: str, percent: float) -> contextlib.AbstractContextManager[Path]:
    """pid held to percent of one core (stop it before leaving: a cgroup in use cannot be removed)."""
    return caged(pid, cpu_cgroup(f"stragglers-{label}", percent))
