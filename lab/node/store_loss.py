"""A healthy job outlives its rendezvous store.

torchrun's agent asks its rendezvous, every monitor interval, how many nodes wait to join
(`num_nodes_waiting`), and an error there ends the agent, healthy workers and all.
Measured (`lab bench coordinators`): kill the lab's etcd under a 2 x 2 etcd-v2 job whose
ranks were all training, and both agents exited 2.6 s later, each with "The connection to
etcd has failed". The store is needed to form the next round, not to train in this one.

So the lab's agents answer "no node waits" while the store cannot be reached, say so once
(in the node log, and as an agent event `lab.store_lost`, which `lab why` reads) and go
on, asking it again less and less often (a store brought back is used again). A node that
wanted to rejoin cannot while the store is gone either; if a worker fails later, its agent's
next rendezvous fails at once, naming the store. Only a lost connection is forgiven: any
other error still ends the agent, as torch would.
"""

from __future__ import annotations

import sys
import time

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0


def unreachable(error: BaseException) -> bool:
    """The store is gone or cannot be reached (not a timeout of a wait, not a bug)."""
    from torch.distributed import DistNetworkError
    from torch.distributed.elastic.rendezvous import RendezvousConnectionError

    return isinstance(error, RendezvousConnectionError | DistNetworkError)


def tolerant(num_nodes_waiting, clock=time.monotonic):
    """num_nodes_waiting, answering 0 while the store cannot be reached. Once it is lost the store
    is asked again after RETRY_FIRST_S, then twice as long each time up to RETRY_MAX_S: torch's
    rendezvous records each failed ask (about 7 KB), and the agent asks every monitor interval."""
    said = False
    retry_at, backoff = 0.0, 0.0

    def ask(handler) -> int:
        nonlocal said, retry_at, backoff
        if clock() < retry_at:
            return 0
        try:
            answer = num_nodes_waiting(handler)
        except Exception as e:  # noqa: BLE001 -- only a lost store is forgiven; the rest re-raised
            if not unreachable(e):
                raise
            if not said:
                said = True
                reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                record(handler.get_backend(), reason)
            backoff = min(RETRY_MAX_S, backoff * 2 or RETRY_FIRST_S)
            retry_at = clock() + backoff
            return 0
        backoff, said = 0.0, False  # it answers again: a later loss is news again
        return answer

    return ask


def record(backend: str, reason: str) -> None:
    from torch.distributed.elastic.events import Event, EventSource
    from torch.distributed.elastic.events import record as record_event

    from lab.health.agent_exporter import EVENT_HANDLER
    from lab.health.events import AgentEvent

    print(
        f"[lab.node.launch] the {backend} rendezvous store cannot be reached ({reason}): the workers go on; "
        "a restart would need it",
        file=sys.stderr,
        flush=True,
    )
    event = Event(AgentEvent.STORE_LOST, EventSource.AGENT, metadata={"backend": backend, "reason": reason})
    record_event(event, destination=EVENT_HANDLER)


def install() -> None:
    """Every rendezvous handler the lab runs: torch's dynamic one (c10d, etcd-v2) and the lab's."""
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import DynamicRendezvousHandler

    from lab.node.fast_rendezvous import FastRendezvous

    for cls in (DynamicRendezvousHandler, FastRendezvous):
        setattr(cls, "num_nodes_waiting", tolerant(cls.num_nodes_waiting))  # noqa: B010 -- a patch, on purpose
