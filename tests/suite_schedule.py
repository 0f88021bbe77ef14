"""How the system tier's tests are handed to its workers, and a record of when each ran.

pytest-xdist's loadgroup hands out the multi-test groups first, largest first, then single tests
in collection order. A long test handed out near the end holds its worker while the others have
nothing left: the suite's tail. So the longest single tests (CI's `--durations`, on a clean
clone) go first, LPT scheduling, but the README's (which starts with `make lab-up` in Docker) and
no other Docker test before the images that build beside the first tests are likely done
(scripts/with-images-building.sh). Each worker also writes when each test started
and ended (test-artifacts/timeline/WORKER.jsonl): where a run's time went, worker by worker."""

from __future__ import annotations

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


def pytest_runtest_logstart(nodeid: str) -> None:
    _STARTED[nodeid] = time.time()


def pytest_runtest_logfinish(nodeid: str) -> None:
    began = _STARTED.pop(nodeid, None)
    if began is None or _CONFIG is None:
        return
    path = _timeline(_CONFIG)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if path in _WRITTEN else "w") as out:  # each run's own record
        _WRITTEN.add(path)
        out.write(json.dumps({"test": nodeid, "start": round(began, 3), "end": round(time.time(), 3)}) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    global _CONFIG
    _CONFIG = config


_STARTED: dict[str, float] = {}
_WRITTEN: set[Path] = set()
_CONFIG: pytest.Config | None = None
