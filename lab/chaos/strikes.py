"""How each kind of chaos fault lands on a running job (lab.chaos.schedule.KINDS declares them):
one function per kind, found by name, and the ranks it hit returned to the campaign, which
then watches them come back (lab.chaos.campaign)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lab.chaos.progress import Progress
from lab.chaos.schedule import Planned
from lab.errors import LabError
from lab.exercises import corrupt_checkpoint, kill_in_save
from lab.health import injected_error

PREEMPT_GRACE_S = 10.0
NODE_BACK_AFTER_S = 1.0
SECOND_KILL_WITHIN_S = 30.0  # kill-in-regroup's second blow: until a worker of the new generation is there
PARTITION_S = 6.0  # longer than a keeper's silence bound (5 s), shorter than the process group's timeout
SLOW_S = 8.0  # slow-rank's length: a few checkpoint intervals of the paced trainer
SAVER = 0  # the DDP trainer's checkpoint writer: the rank whose save kill-in-save cuts


@dataclass(frozen=True)
class Aim:
    """Where one planned fault lands: the drill, the ranks' progress, and the rank drawn for it."""

    drill: Any
    progress: Progress
    planned: Planned
    world: int
    ckpt_every: int

    @property
    def rank(self) -> int:
        return int(self.planned.rank_draw * self.world)

    def node_ranks(self, node: str) -> list[int]:
        return [r for r in range(self.world) if self.drill.locate(r)[0] == node]


def strike(drill: Any, progress: Progress, planned: Planned, world: int, ckpt_every: int) -> list[int]:
    """Land one fault; returns the ranks it hit."""
    return STRIKES[planned.kind](Aim(drill, progress, planned, world, ckpt_every))


def _kill_rank(aim: Aim, rank: int | None = None) -> list[int]:
    rank = aim.rank if rank is None else rank
    node, local = aim.drill.locate(rank)
    aim.drill.inject(node, "kill_worker", local_rank=local)
    return [rank]


def _hang_rank(aim: Aim) -> list[int]:
    node, local = aim.drill.locate(aim.rank)
    aim.drill.inject(node, "pause_worker", local_rank=local)
    return [aim.rank]


def _signal_rank(aim: Aim, sig: int) -> list[int]:
    """A fault from inside the rank (lab.health.injected_error, which the trainer and every watched
    script install)."""
    node, local = aim.drill.locate(aim.rank)
    aim.drill.inject(node, "kill_worker", local_rank=local, sig=sig)
    return [aim.rank]


def _raise_in_rank(aim: Aim) -> list[int]:
    return _signal_rank(aim, int(injected_error.SIGNAL))


def _hang_in_python(aim: Aim) -> list[int]:
    return _signal_rank(aim, int(injected_error.WAIT_SIGNAL))


def _slow_rank(aim: Aim) -> list[int]:
    node, local = aim.drill.locate(aim.rank)
    aim.drill.inject(node, "slow_worker", local_rank=local, stopped_fraction=0.75, period_s=0.2)
    time.sleep(SLOW_S)
    aim.drill.inject(node, "unslow_worker")
    return [aim.rank]


def _kill_replacement(aim: Aim) -> list[int]:
    """The rank killed, then whatever process runs in its place next: the first kill's pid again
    (not yet reaped) does not count."""
    node, local = aim.drill.locate(aim.rank)
    first = aim.drill.inject(node, "kill_worker", local_rank=local).get("result")
    deadline, last = time.monotonic() + SECOND_KILL_WITHIN_S, "its first pid still listed"
    while time.monotonic() < deadline:
        try:
            if aim.drill.inject(node, "kill_worker", local_rank=local).get("result") != first:
                return [aim.rank]
        except LabError as e:  # none runs in its place yet
            last = str(e)
        time.sleep(0.02)
    raise LabError(f"no process took rank {aim.rank}'s place within {SECOND_KILL_WITHIN_S:.0f} s ({last})")


def _lose_node_in_restart(aim: Aim) -> list[int]:
    first = _kill_rank(aim)[0]
    time.sleep(0.05)  # the job is recovering now
    nodes = sorted({aim.drill.locate(r)[0] for r in range(aim.world)} - {aim.drill.store_host})
    target = next((n for n in nodes if n != aim.drill.locate(first)[0]), nodes[0])
    lost = _lose_node(aim, aim.node_ranks(target)[0])
    return sorted({first, *lost})


def _corrupt_checkpoint(aim: Aim) -> list[int]:
    node, local = aim.drill.locate(aim.rank)
    corrupt_checkpoint.damage_then_kill(aim.drill, node, local, str(aim.drill.ckpt_dir), aim.rank, "truncate")
    return [aim.rank]


def _kill_in_save(aim: Aim) -> list[int]:
    kill_in_save.cut_a_save(aim.drill, SAVER)
    return [SAVER]


def _partition_node(aim: Aim) -> list[int]:
    node = aim.drill.locate(aim.rank)[0]
    aim.drill.inject(node, "partition")
    time.sleep(PARTITION_S)
    aim.drill.inject(node, "heal")
    return aim.node_ranks(node)


def _preempt_node(aim: Aim) -> list[int]:
    aim.drill.inject(aim.drill.locate(aim.rank)[0], "preempt", grace_s=PREEMPT_GRACE_S)
    return [aim.rank]


def _lose_node(aim: Aim, rank: int | None = None) -> list[int]:
    node = aim.drill.locate(aim.rank if rank is None else rank)[0]
    aim.drill.inject(node, "kill_node")
    if not loses_the_job(aim.drill, node):
        time.sleep(NODE_BACK_AFTER_S)  # the machine reboots: its agent starts again with the same command
        aim.drill.inject(node, "restart")
    return aim.node_ranks(node)


def _lose_store(aim: Aim) -> list[int]:
    return _lose_node(aim, next(r for r in range(aim.world) if aim.drill.locate(r)[0] == aim.drill.store_host))


def _kill_in_regroup(aim: Aim) -> list[int]:
    first = _kill_rank(aim)[0]
    second = (first + 1 + int(aim.planned.second_draw * (aim.world - 1))) % aim.world
    time.sleep(0.05)  # the survivors are regrouping now
    kill_in_the_regroup(aim.drill, *aim.drill.locate(second))
    return [first, second]


def _kill_after_save(aim: Aim) -> list[int]:
    _wait_for_a_save_step(aim.progress, aim.ckpt_every)
    return _kill_rank(aim)


# How each kind of lab.chaos.schedule.KINDS lands (tests/unit/test_chaos_strikes.py holds each to
# the Node faults its Kind declares).
STRIKES: dict[str, Callable[[Aim], list[int]]] = {
    "kill-worker": _kill_rank,
    "hang-worker": _hang_rank,
    "kill-node": _lose_node,
    "preempt-node": _preempt_node,
    "partition-node": _partition_node,
    "lose-store": _lose_store,
    "kill-in-regroup": _kill_in_regroup,
    "kill-after-save": _kill_after_save,
    "rank-exception": _raise_in_rank,
    "hang-in-python": _hang_in_python,
    "slow-rank": _slow_rank,
    "corrupt-checkpoint": _corrupt_checkpoint,
    "kill-replacement": _kill_replacement,
    "lose-node-in-restart": _lose_node_in_restart,
    "kill-in-save": _kill_in_save,
}


def kill_in_the_regroup(drill: Any, node: str, local_rank: int, within_s: float = SECOND_KILL_WITHIN_S) -> None:
    """The second blow of kill-in-regroup. In-process, the rank is a survivor, regrouping. Under a
    restart its agent has stopped every worker of the node already, and the blow lands on the
    worker it starts in their place (a campaign on a script once found none to hit, 50 ms after
    the first blow, and stopped)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            drill.inject(node, "kill_worker", local_rank=local_rank)
            return
        except LabError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def loses_the_job(drill: Any, node: str) -> bool:
    """Node 0 hosts the job's store, whatever the recovery style: the rendezvous store in its
    agent (restart styles) or the job's store in its keeper (in-process). Lost, every other node
    loses the store and ends at once, by design (docs/recovery.md): the job is over, and a
    scheduler starts it again, whole, from the checkpoint. (Node 0 started again alone waits for
    peers that ended, and gives up at the join timeout, under torchrun and under in-process
    recovery alike: lab.inprocess.heartbeat.ABSENT_EXIT. Found by this campaign: each lapsed join
    was once taken for a hang and restarted, round after round, for over 8 minutes.)"""
    return node == drill.store_host


def _wait_for_a_save_step(progress: Progress, ckpt_every: int, timeout_s: float = 60) -> None:
    """Until the front reaches the next step at the checkpoint interval: the save begins then."""
    progress.poll()
    target = (progress.front() // ckpt_every + 1) * ckpt_every
    deadline = time.monotonic() + timeout_s
    while progress.front() < target and time.monotonic() < deadline:
        time.sleep(0.005)
        progress.poll()
