"""One cell of `lab bench stragglers`: a 2 x 2 trainer job with one rank slowed after a given
step (or none: a clean run), and what lab.health.stragglers names from the events it recorded:
a straggling rank (busy time), or a node with a slow network (round trips, lab.health.net_probe).

A slowed rank stays slow to the end of the job, AFTER steps later, or until the finding its way
calls for is named (nothing later changes the verdict: it is drawn from the first). The cell is
judged on the step it was named at: within GOAL_STEPS steps of the slowdown is in time; a rank
named before the slowdown, or in a clean run, is a false alarm. A clean run runs to its end.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab import runtimes
from lab.bench import up_on_its_own_port
from lab.bench.cages import cpu_cage
from lab.bench.diagnosis_cell import cell_topology, reached, waiting
from lab.errors import LabError
from lab.health import injected_error, net_probe, stragglers
from lab.health.events import read_events, read_probes
from lab.rundir import RunDir
from lab.topology import Topology
from lab.workloads import script_path

STEP_TIME, AFTER, CLEAN_STEPS = 0.05, 40, 200
GOAL_STEPS = 20
NET_DELAY_MS, SLOW_LINK_KBIT = 50, 100
CPU_PERCENT = 1  # of one core: the smallest quota cgroups take (1 ms in 100); the paced trainer needs about 6
END_S = 180.0  # from the slowdown until the job ends by itself
WAYS = {
    "sleep": f"a sleep of {injected_error.STALL_S:g} s in every step (SIGRTMIN+5, lab.health.injected_error)",
    "cpu-quota": f"a CPU quota of {CPU_PERCENT}% of one core, through a cgroup of the rank's own",
    "netem": f"a delay of {NET_DELAY_MS} ms on every packet the rank's node sends (tc netem; netns hosts)",
    "slow-link": f"the rank's node sends at most {SLOW_LINK_KBIT} kbit/s, queued up to 1 s (tc tbf; netns hosts)",
}
# Named by round trips, on the node (the ranks it holds); the queueing discipline each needs.
NETWORK_WAYS = {"netem": "netem", "slow-link": "tbf"}


@dataclass(frozen=True)
class Cell:
    way: str  # a key of WAYS, or "clean"
    rank: int | None
    step: int
    run: int = 0  # clean runs: which one
    steps: int = CLEAN_STEPS  # clean runs: how long

    @property
    def name(self) -> str:
        return f"clean-{self.run}" if self.rank is None else f"{self.way}-r{self.rank}-s{self.step}"


@dataclass
class Outcome:
    cell: Cell
    slowed_at: int | None  # the rank's last step when it was slowed
    named: stragglers.Straggler | stragglers.SlowNetwork | None

    @property
    def named_ranks(self) -> list[int]:
        if isinstance(self.named, stragglers.SlowNetwork):
            return self.named.ranks
        return [self.named.rank] if self.named else []

    @property
    def steps_to_name(self) -> int | None:
        if self.named is None or self.named.step is None or self.slowed_at is None:
            return None
        return self.named.step - self.slowed_at

    @property
    def verdict(self) -> str:
        named, late = self.named, self.steps_to_name
        if self.cell.rank is None:
            return "clean" if named is None else "false alarm"
        if named is None:
            return "missed"
        if late is not None and late <= 0:
            return "false alarm"  # named before anything was slowed
        if self.cell.rank not in self.named_ranks or isinstance(named, stragglers.SlowNetwork) != (
            self.cell.way in NETWORK_WAYS
        ):
            return "wrong"  # another rank, or a slow network for a slow rank (or the reverse)
        return "named" if late is not None and late <= GOAL_STEPS else "late"

    def to_json(self) -> dict:
        named = self.named
        return {
            "way": self.cell.way,
            "rank": self.cell.rank,
            "slowed_at": self.slowed_at,
            "named": None if named is None else "slow network" if isinstance(named, stragglers.SlowNetwork) else "rank",
            "named_ranks": self.named_ranks,
            "named_at": named.step if named else None,
            "score": round(named.score, 1) if named else None,
            "steps_to_name": self.steps_to_name,
            "verdict": self.verdict,
        }


def job(cell: Cell) -> tuple[Topology, str, list[str]]:
    steps = cell.steps if cell.rank is None else cell.step + AFTER
    return (
        cell_topology(),
        script_path("trainer"),
        ["--steps", str(steps), "--step-time", str(STEP_TIME), "--ckpt-every", "0"],
    )


def ended(nodes, stop: threading.Event, named: Callable[[], object] = lambda: None) -> None:
    """The job ended by itself, or `named` found what the cell waits for."""
    deadline = time.monotonic() + END_S
    while any(node.exit_code() is None for node in nodes) and not named():
        if time.monotonic() > deadline:
            raise LabError(f"the job did not end within {END_S:.0f} s of the slowdown")
        waiting(stop, 0.2)


def slow_down(cell: Cell, start: dict, nodes, cages: contextlib.ExitStack) -> None:
    """The cell's rank slowed, its way; a cgroup stays until the stack closes, after teardown
    (a network delay or cap goes with the node's namespace)."""
    node = next(n for n in nodes if n.name == start["node"])  # the rendezvous, not the name, orders ranks
    if cell.way == "sleep":
        node.kill_worker(start["local_rank"], injected_error.STALL_SIGNAL)
    elif cell.way == "cpu-quota":
        cages.enter_context(cpu_cage(start["pid"], cell.name, CPU_PERCENT))
    elif cell.way == "netem":
        node.delay_network(NET_DELAY_MS)
    elif cell.way == "slow-link":
        node.throttle_network(SLOW_LINK_KBIT)
    else:
        raise LabError(f"no way to slow a rank called {cell.way!r}: choose from {', '.join(WAYS)}")


def run_cell(cell: Cell, hosts: str, tmp: Path, stop: threading.Event) -> Outcome:
    run_dir = RunDir(tmp / cell.name)
    runtime = runtimes.create("local", run_dir, log=lambda m: None, hosts=hosts, monitoring="off")
    runtimes.begin_job(runtime, lambda m: None)
    cages = contextlib.ExitStack()
    slowed_at = None
    try:
        _topology, nodes = up_on_its_own_port(runtime, *job(cell))
        if cell.rank is not None:
            slowed_at, start = reached(run_dir.path / "events", cell.rank, cell.step, stop)
            slow_down(cell, start, nodes, cages)
            ended(nodes, stop, lambda: its_kind_named(cell, run_dir.path / "events"))
        else:
            ended(nodes, stop)
        named = what_was_named(cell, run_dir.path / "events")
    finally:
        runtime.down(grace_s=5)
        cages.close()  # once its rank is gone: a cgroup with a process in it cannot be removed
        run_dir.release()
    return Outcome(cell, slowed_at, named)


def findings(events_dir: Path) -> tuple[stragglers.Straggler | None, stragglers.SlowNetwork | None]:
    """The first straggling rank and the first slow network named in the events, if any."""
    events = list(read_events(events_dir))
    network = stragglers.first_slow_network(read_probes(events_dir), events, net_probe.TIMEOUT_S, cut_first=False)
    return stragglers.first_named(events), network


def its_kind_named(cell: Cell, events_dir: Path) -> bool:
    """The finding the cell's way calls for (a slow network for a network way) is named."""
    rank, network = findings(events_dir)
    return bool(network if cell.way in NETWORK_WAYS else rank)


def what_was_named(cell: Cell, events_dir: Path) -> stragglers.Straggler | stragglers.SlowNetwork | None:
    """The card's own first finding, whatever way the cell slowed its rank (graded strictly: the
    bench once chose the finding to grade by the method it knew it had used): the one named at
    the earlier step, the straggling rank on a tie (the card shows it first). A clean run names
    neither."""
    rank, network = findings(events_dir)
    if rank is None or network is None:
        return rank or network
    return network if network.step is not None and network.step < rank.step else rank
