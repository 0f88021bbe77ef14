"""A signalled agent still arrives at torchrun's exit barrier, so its peers end when their work does.

torchrun's agent, its workers done, waits in an exit barrier until every agent of the group has
arrived (torch's `_exit_barrier`: a count in the rendezvous store, 300 s at most). An agent that
receives SIGTERM (a preempted machine) stops its workers and raises: it never arrives. Its peers,
whose workers stopped at the same agreed step and succeeded, then sit in the barrier for the
whole 300 s: a preempted node kept the other node's job alive five minutes after its end.

Here, once the signalled agent's own workers are stopped (torch's `run` has shut them down when
it raises SignalException), it adds itself to the barrier's count, without waiting, with a short
store timeout (the store's host may be the node going away). Only under the lab's rendezvous
(fixed-size, each round's own store: a count left in one round never lands in another), and not
with --torch-defaults, which shows torch's own behaviour.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any

ARRIVE_TIMEOUT_S = 5.0  # the store's host may be going down too: never hold the exit longer
COUNTED_IN = "_lab_counted_in"  # set on an agent once it is counted at its exit barrier (by torch or here)


def arrive(agent: Any) -> bool:
    """Count this agent in at its group's exit barrier, if it has a group and has not arrived yet.
    True when it was counted."""
    from torch.distributed.elastic.agent.server.api import _TERMINAL_STATE_SYNC_ID
    from torch.distributed.elastic.utils.store import _barrier_nonblocking

    store, group = getattr(agent, "_store", None), getattr(agent, "_worker_group", None)
    world = getattr(group, "group_world_size", None)
    # torch clears its own _in_exit_barrier when the signal ends its wait: COUNTED_IN stays set.
    if store is None or not world or getattr(agent, "_in_exit_barrier", False) or getattr(agent, COUNTED_IN, False):
        return False
    try:
        store.set_timeout(datetime.timedelta(seconds=ARRIVE_TIMEOUT_S))
        _barrier_nonblocking(store, world, _TERMINAL_STATE_SYNC_ID)
    except Exception as e:  # noqa: BLE001 - the store went with its host: nobody waits on it any more
        print(f"[lab.node.exit_barrier] could not arrive at the exit barrier: {e}", file=sys.stderr)
        return False
    setattr(agent, COUNTED_IN, True)
    print("[lab.node.exit_barrier] signalled: counted in at the exit barrier, so the others need not wait")
    return True


def install() -> None:
    """Wrap the agent's run: on a termination signal, arrive, then let the signal's error go on."""
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.elastic.multiprocessing import SignalException

    run, exit_barrier = SimpleElasticAgent.run, SimpleElasticAgent._exit_barrier

    def counted_exit_barrier(self):
        setattr(self, COUNTED_IN, True)  # torch's barrier counts it in first thing
        return exit_barrier(self)

    def run_then_arrive(self, *args, **kwargs):
        try:
            return run(self, *args, **kwargs)
        except SignalException:
            arrive(self)
            raise

    run_then_arrive.__wrapped__ = run  # type: ignore[attr-defined]
    SimpleElasticAgent.run = run_then_arrive  # type: ignore[method-assign]
    SimpleElasticAgent._exit_barrier = counted_exit_barrier  # type: ignore[method-assign]
