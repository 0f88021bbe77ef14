"""How the system tier's tests are handed to its workers, and a record of when each ran.

pytest-xdist's loadgroup hands out the multi-test groups first, largest first, then single tests
in collection order. A long test handed out near the end holds its worker while the others have
nothing left: the suite's tail. So the longest single tests (CI's `--durations`, on a clean
clone) go first, LPT scheduling, but the README's (which starts with `make lab-up` in Docker) and
no other Docker test before the images that build beside the first tests are likely done
(scripts/with-images-building.sh). Each worker also writes when each test started
and ended (test-artifacts/timeline/WORKER.jsonl): where a run's time went, worker by worker; and,
as root where the kernel has cgroup v1's cpuacct, the CPU seconds each test's processes used
(`cpu_s`), daemons included, containers not (Docker counts those in its own cgroups). On two
cores a test's wall time says little of its cost: the tier is as fast as its CPU seconds allow."""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import pytest

LONGEST_FIRST = (  # seconds in CI's clean-clone run of 2026-12-05, longest first
    "test_matrix_on_the_snapshot_tutorial_script",  # 111
    "test_the_docs_campaign_recovers_every_fault",  # 106
    "test_the_docs_campaign_on_an_ordinary_script_resumes_it_each_time_and_ends_where_a_run_without_faults_does",
    "test_the_same_commands_in_other_orders",  # 67
    "test_preempt_checkpoints_together_and_the_rerun_loses_no_step",  # 59
    "test_a_killed_rank_is_replaced_in_process_and_the_job_ends_bit_identical",  # 54
    "test_partition_times_out_at_the_process_group_timeout_and_recovers_after_the_heal",  # 53
    "test_the_crash_loop_drill_outlives_its_budget_with_progress_and_stops_without",  # 49
    "test_the_readme_in_order",  # 291: its first command is `make lab-up`, on the images building beside
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: order.get(getattr(item, "originalname", item.name), len(order)))  # stable


def _timeline(config: pytest.Config) -> Path:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return Path(config.rootpath) / "test-artifacts" / "timeline" / f"{worker}.jsonl"


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


def own_cpuacct() -> Path:
    """The cpuacct cgroup this process is in (a CI runner's, say): the tests' goes beneath it, so
    whatever the runner accounts or limits there still holds."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if "cpuacct" in controllers.split(","):
            return CPUACCT / path.lstrip("/")
    raise OSError("no cpuacct hierarchy")


class CpuAccount:
    """A cpuacct cgroup of this process's own, which every process it starts inherits."""

    def __init__(self) -> None:
        self.group: Path | None = None
        try:
            self.parent = own_cpuacct()
            for stale in self.parent.glob("tlab-tests-*"):  # an earlier run's, killed: removable only when empty
                with contextlib.suppress(OSError):
                    stale.rmdir()
            group = self.parent / f"tlab-tests-{os.getpid()}"
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
            self.group = group
        except (OSError, ValueError):  # no cpuacct hierarchy here, or not root: the timeline keeps times only
            pass

    def seconds(self) -> float | None:
        return int((self.group / "cpuacct.usage").read_text()) / 1e9 if self.group else None

    def close(self) -> None:
        if self.group is not None:
            with contextlib.suppress(OSError):
                (self.parent / "cgroup.procs").write_text(str(os.getpid()))
                self.group.rmdir()  # fails, and stays, only while a process the tests left lives in it


def pytest_runtest_logstart(nodeid: str) -> None:
    _STARTED[nodeid] = time.time()
    _CPU_AT_START[nodeid] = _ACCOUNT.seconds() if _ACCOUNT else None


def pytest_runtest_logfinish(nodeid: str) -> None:
    began, cpu_then = _STARTED.pop(nodeid, None), _CPU_AT_START.pop(nodeid, None)
    if began is None or _CONFIG is None:
        return
    record = {"test": nodeid, "start": round(began, 3), "end": round(time.time(), 3)}
    cpu_now = _ACCOUNT.seconds() if _ACCOUNT else None
    if cpu_then is not None and cpu_now is not None:
        record["cpu_s"] = round(cpu_now - cpu_then, 2)
    path = _timeline(_CONFIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if path in _WRITTEN else "w") as out:  # each run's own record
        _WRITTEN.add(path)
        out.write(json.dumps(record) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    global _CONFIG, _ACCOUNT
    _CONFIG = config
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", None):
        return  # xdist's controller runs no test
    _ACCOUNT = CpuAccount() if (CPUACCT / "cpuacct.usage").exists() and os.geteuid() == 0 else None


def pytest_unconfigure(config: pytest.Config) -> None:
    if _ACCOUNT is not None:
        _ACCOUNT.close()


_STARTED: dict[str, float] = {}
_CPU_AT_START: dict[str, float | None] = {}
_ACCOUNT: CpuAccount | None = None
_WRITTEN: set[Path] = set()
_CONFIG: pytest.Config | None = None
