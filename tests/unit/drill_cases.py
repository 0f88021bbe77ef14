"""The drills' recorded runs (tests/fixtures/drills/, recorded by scripts/record-fixtures.sh) and
how the judge tests read and change them. No process runs."""

from __future__ import annotations

from pathlib import Path

from lab.exercises import (
    DrillOptions,
    collective_mismatch,
    corrupt_checkpoint,
    crash_loop,
    hang_rank,
    kill_in_save,
    kill_node,
    kill_rendezvous_host,
    kill_worker,
    partition_node,
    preempt,
    rank_exception,
    straggler,
)
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
CASES = {
    "kill-worker": (kill_worker, {}),
    "kill-worker-torch-defaults": (kill_worker, {"torch_defaults": True}),
    "kill-worker-in-process": (kill_worker, {"recovery": "in-process"}),
    "kill-worker-save-async": (kill_worker, {"parallel": "fsdp2", "own": {"save": "async"}}),
    "rank-exception": (rank_exception, {}),
    "kill-node": (kill_node, {}),
    "kill-node-elastic": (kill_node, {}),
    "kill-node-elastic-rejoin": (kill_node, {"own": {"elastic": True, "rejoin": True}}),
    "kill-node-elastic-rejoin-4x1": (kill_node, {"own": {"elastic": True, "rejoin": True}}),
    "kill-node-in-process": (kill_node, {"recovery": "in-process"}),
    "kill-rendezvous-host": (kill_rendezvous_host, {}),
    "kill-rendezvous-host-etcd": (kill_rendezvous_host, {}),
    "hang-rank": (hang_rank, {}),
    "hang-rank-watchdog": (hang_rank, {}),
    "hang-rank-in-process": (hang_rank, {"recovery": "in-process"}),
    "hang-rank-in-python": (hang_rank, {"own": {"in_python": True}}),
    "hang-rank-in-python-restart": (hang_rank, {"recovery": "restart", "own": {"in_python": True}}),
    "partition-node": (partition_node, {}),
    "straggler": (straggler, {}),
    "preempt": (preempt, {}),
    "corrupt-checkpoint": (corrupt_checkpoint, {}),
    "collective-mismatch": (collective_mismatch, {}),
    "crash-loop": (crash_loop, {}),
    "kill-in-save": (kill_in_save, {}),
    "kill-in-save-fsdp2": (kill_in_save, {"parallel": "fsdp2"}),
}


def seen(case: str) -> Seen:
    return Seen.load(FIXTURES / case / "seen.json")


def judge(case: str, evidence: Seen):
    drill, flags = CASES[case]
    options = DrillOptions(target_rank=1, at_step=25, **flags)
    return drill.judge(evidence, options)


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


def after_fault(evidence: Seen, fault: str) -> float:
    return evidence.injected(fault)["time"]


def recorded_after(evidence: Seen, fault: str, event: str) -> list[dict]:
    """The records of that event after the fault: to change one thing in what the run saw."""
    at = after_fault(evidence, fault)
    return [e for e in evidence.events if e["event"] == event and e["time"] > at]
