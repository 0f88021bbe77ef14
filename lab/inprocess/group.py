"""How a rank tells what ended its join or its collective, and how it lets a failed group go
(lab.inprocess.api's attempts).

A peer's death surfaces in gloo as a closed or reset connection (PEER_LOST): the attempt ends
quietly and the rank regroups. A timeout (TIMED_OUT) means a peer lives but takes no part. A
join whose wait for every rank lapsed (Absent) means ranks that never came: their nodes are
gone. A join the next generation overtook (Superseded) starts again in that one.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

import torch.distributed as dist

from lab.node_log import COMMUNICATION_TIMEOUT

# What a collective raises when a peer's process is gone (gloo on Linux): an attempt ends quietly on these.
# A timeout ends the rank (lookout.leave_timed_out); anything else (the script's own bug) propagates.
PEER_LOST = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "Connection refused")
TIMED_OUT = COMMUNICATION_TIMEOUT  # gloo's "Timed out waiting", the store's "wait timeout": not the script's own


class Superseded(Exception):
    """The next generation opened while this rank was joining the last one."""


class Absent(RuntimeError):
    """The join's wait for every rank lapsed: `came` of them came."""

    def __init__(self, came: int, waited_s: float):
        super().__init__(f"{came} rank(s) came within {waited_s:.0f} s")
        self.came, self.waited_s = came, waited_s


def await_everyone(prefixed, world: int, join_timeout_s: float) -> None:
    """Count this rank in under the generation's prefix and wait until all `world` ranks came
    (the last to come says so: one write, which every waiter hears). Absent when the wait
    lapses; the store's error at once when its connection is shut down (the next generation opened)."""
    if prefixed.add("came", 1) == world:
        prefixed.set("all-came", "1")
    asked = time.monotonic()
    try:
        prefixed.wait(["all-came"], timedelta(seconds=join_timeout_s))
    except dist.DistStoreError as error:
        if time.monotonic() - asked < join_timeout_s / 2:
            raise  # its connection shut down (its lookout: the next generation opened), not the wait lapsing
        raise Absent(int(prefixed.add("came", 0)), join_timeout_s) from error


def destroy_quietly() -> None:
    with contextlib.suppress(RuntimeError):  # a group whose peer died may refuse a clean teardown
        dist.destroy_process_group()


def forget_failed_join() -> None:
    """A failed init_process_group leaves torch's count of groups one up, and the count names
    the default group's keys in the store ("1/..." instead of "0/..."): this rank would then wait
    for its peers under keys none of them writes. destroy_process_group sets the count back to 0,
    but only for a group that was made; so here it is set back by hand (no public API does)."""
    world = getattr(dist.distributed_c10d, "_world", None)
    if world is not None and not dist.is_initialized():
        world.group_count = 0


def first_line(error: BaseException) -> str:
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    return first.split("] ", 1)[-1][:200]  # without gloo's source-file prefix


def a_peer_died(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError | ConnectionError) and any(cause in text for cause in PEER_LOST)
