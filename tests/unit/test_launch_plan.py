"""The runtime lifecycle (lab.runtimes.base.Runtime.up): one template every runtime with a plan
fills in. A runtime written here in a few lines (its nodes record what happens to them, no
process starts) shows the order the template keeps and that `up` runs the plan --dry-run shows."""

from __future__ import annotations

from pathlib import Path

from lab import recovery
from lab.rundir import RunDir
from lab.runtimes import state as runstate
from lab.runtimes.base import Node, Runtime
from lab.runtimes.plan import LaunchPlan
from lab.topology import Topology


class PaperNode(Node):
    runtime_name = "paper"

    def __init__(self, index: int, run_dir: Path, journal: list[str]):
        self.name, self.index, self.address = f"sheet{index}", index, f"10.1.1.{index + 1}"
        self.dir, self.journal = run_dir / "nodes" / self.name, journal

    def start(self, argv: list[str]) -> None:
        self.journal.append(f"start {self.name}: {argv[-1]}")

    def stop(self, grace_s: float = 10.0) -> None: ...

    def exit_code(self) -> int | None:
        return None


class PaperRuntime(Runtime):
    """Without a `name` it stays out of the registry: the test calls it directly."""

    journal: list[str]

    def job_rendezvous(self) -> recovery.Host:  # what a registered runtime's `name` would say
        return recovery.Host("paper", self.RDZV_BACKENDS)

    def plan(self, topology, script, script_args) -> LaunchPlan:
        nodes = [PaperNode(i, self.run_dir.path, self.journal) for i in range(topology.nodes)]
        topology = topology.replace(rdzv_host="10.1.1.1")
        text = "".join(f"# {n.name}: {n.address}\n" for n in nodes)
        return LaunchPlan("paper", "sheets", topology, script, list(script_args), nodes, text, own={"ink": "blue"})

    def prepare(self, topology, script, script_args) -> LaunchPlan:
        self.journal.append(f"prepare (state recorded: {runstate.load(self.run_dir) is not None})")
        return super().prepare(topology, script, script_args)

    def provision(self, plan: LaunchPlan) -> None:
        self.journal.append(f"provision (state recorded: {runstate.load(self.run_dir) is not None})")

    def attach(self):
        return []

    def down(self, grace_s: float = 10.0) -> list[str]:
        return []


def test_up_prepares_records_the_plan_once_provisions_then_starts_the_planned_nodes(tmp_path):
    runtime = PaperRuntime(RunDir(tmp_path / "run"), log=lambda _: None)
    runtime.journal = []
    shown = runtime.plan(Topology(nodes=2), "/w/train.py", ["--epochs", "1"])
    topology, nodes = runtime.up(Topology(nodes=2), "/w/train.py", ["--epochs", "1"])
    assert runtime.journal == [
        "prepare (state recorded: False)",
        "provision (state recorded: True)",
        "start sheet0: 1",
        "start sheet1: 1",
    ]
    recorded = runstate.load(runtime.run_dir)
    assert recorded is not None
    shown_state = shown.state()
    shown_state.started_at = recorded.started_at  # the one field that differs: when each was made
    assert recorded == shown_state  # what --dry-run showed is what ran
    assert recorded.own == {"ink": "blue"} and [n["address"] for n in recorded.nodes] == ["10.1.1.1", "10.1.1.2"]
    assert topology.rdzv_host == "10.1.1.1" and [n.name for n in nodes] == ["sheet0", "sheet1"]
