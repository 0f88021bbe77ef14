"""The lab's rendezvous backend for fixed-size jobs: `--rdzv-backend=lab`, no polling.

torchrun's c10d rendezvous re-reads its shared state once a second while it waits
(`_delay(seconds=1)` in dynamic_rendezvous.py's SYNC action, not configurable), so the
node that restarts first waits up to a second after the last node has joined. Measured on
2 x 2 netns hosts: 1.2-1.3 s of a 3 s recovery (docs/exercises.md, "Recovery at the floor").

This backend is for what the lab runs most, a job of a fixed number of nodes, each of
which knows its node rank: node 0's agent hosts a TCPStore on the rendezvous endpoint;
round N is complete when the N-th round's counter reaches the node count, and every
agent blocks in the store's own `wait` for that key, so the last node in wakes everyone
at once. Node 0's agent also starts the round's store for the workers before they exist
(a fresh one each round), so that no worker waits for another to host it.
`num_nodes_waiting` (which the healthy agents ask every monitor interval) is
that counter for the round after the current one, so a restarting node pulls the others
into the next round within one monitor interval. An agent that starts later (a node
brought back) joins the round after the last complete one.

It is registered under the name "lab" by lab.node.launch, through torch's own registry
for out-of-tree backends; torch itself is not changed. Limits, as with c10d's is_host:
the store lives in node 0's agent, so losing node 0 ends the job; and it cannot grow
or shrink (elastic jobs use c10d).

    torchrun --rdzv-backend=lab --rdzv-endpoint=HOST:PORT --rdzv-conf=node_rank=N ...
"""

from __future__ import annotations

import socket
import time
from contextlib import contextmanager
from datetime import timedelta

from torch.distributed import DistNetworkError, DistStoreError, PrefixStore, TCPStore
from torch.distributed.elastic.events import NodeState, construct_and_record_rdzv_event
from torch.distributed.elastic.rendezvous import (
    RendezvousClosedError,
    RendezvousConnectionError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
    RendezvousStoreInfo,
    RendezvousTimeoutError,
)
from torch.distributed.elastic.rendezvous.utils import parse_rendezvous_endpoint

NAME = "lab"
SHUT_WAIT_S = 2.0  # node 0's agent, ending, waits at most this for the others to close their side


class FastRendezvous(RendezvousHandler):
    def __init__(self, store, run_id: str, node_rank: int, nodes: int, local_addr: str | None, join_timeout_s: float):
        self._store = store
        self._run_id = run_id
        self._node_rank = node_rank
        self._nodes = nodes
        self._local_addr = local_addr
        self._join_timeout = timedelta(seconds=join_timeout_s)
        self._round: int | None = None  # the round this agent joins next; found on its first join
        self._workers_store: TCPStore | None = None  # node 0: the store its round's workers use

    def _key(self, name: str, round_: int | None = None) -> str:
        return f"{self._run_id}/" + (name if round_ is None else f"round{round_}/{name}")

    @contextmanager
    def _lost_store_named(self):
        """torch's DistNetworkError says only "Failed to recv, got 0 bytes": say what was lost."""
        try:
            yield
        except DistNetworkError as e:
            said = (
                f"the lab's rendezvous store at {self._store.host}:{self._store.port} is gone (node 0's agent "
                f"hosts it): {str(e).split('.')[0] if str(e) else type(e).__name__}"
            )
            self._record(f"RendezvousConnectionError: {said}", NodeState.FAILED)  # as torch's own rendezvous does
            raise RendezvousConnectionError(said) from e

    def next_rendezvous(self) -> RendezvousInfo:
        with self._lost_store_named():
            return self._join()

    def _join(self) -> RendezvousInfo:
        if self.is_closed():
            raise RendezvousClosedError()
        if self._round is None:  # a first start, or a node brought back: the round after the last complete
            self._round = int(self._store.add(self._key("rounds_complete"), 0))
        round_ = self._round
        # The same two records c10d's rendezvous makes, which recovery breakdowns read.
        self._record(f"The node {self._node_rank} attempts to join the next round of the rendezvous {self._run_id!r}.")
        if self._store.add(self._key("joined", round_), 1) == self._nodes:
            self._store.set(self._key("complete", round_), b"1")
            self._store.add(self._key("rounds_complete"), 1)
        try:
            self._store.wait([self._key("complete", round_)], self._join_timeout)
        except DistStoreError as e:  # the store's wait timed out (a lost store: DistNetworkError)
            raise RendezvousTimeoutError(
                f"round {round_} of rendezvous {self._run_id!r} did not fill with {self._nodes} nodes "
                f"in {self._join_timeout.total_seconds():g}s: {e}"
            ) from None
        if self.is_closed():  # woken by a node that ended for good (set_closed), not by a full round
            raise RendezvousClosedError()
        self._round = round_ + 1
        self._record(f"The node {self._node_rank} has joined round {round_} of the rendezvous {self._run_id!r}.")
        store = PrefixStore(self._key("", round_), self._store)
        addr = self._local_addr or socket.getfqdn()
        server_port = None
        if self._node_rank == 0:
            # The workers' store for this round, up before any worker starts. Workers that
            # host it themselves (rank 0, at init_process_group) make the others' first
            # connection attempts fail, and TCPStore's client backs off for about half a
            # second: measured in 1 of 3 restarts. A fresh server every round, so that no
            # key of a previous round is there to be read (pytorch/pytorch#135712).
            self._workers_store = TCPStore(addr, 0, is_master=True, wait_for_workers=False, use_libuv=True)
            server_port = self._workers_store.port
        info = RendezvousStoreInfo.build(self._node_rank, store, addr, server_port=server_port)
        return RendezvousInfo(store, self._node_rank, self._nodes, info)

    @property
    def use_agent_store(self) -> bool:
        """The workers connect to the store node 0's agent hosts for the round (see next_rendezvous)."""
        return True

    def _record(self, message: str, state: NodeState = NodeState.RUNNING) -> None:
        construct_and_record_rdzv_event(
            run_id=self._run_id, message=message, node_state=state, name="FastRendezvous.next_rendezvous"
        )

    def num_nodes_waiting(self) -> int:
        if self._round is None:
            return 0
        with self._lost_store_named():
            return int(self._store.add(self._key("joined", self._round), 0))

    def is_closed(self) -> bool:
        return self._store.check([self._key("closed")])

    def set_closed(self) -> None:
        """Close the rendezvous, and wake the nodes waiting for the round this one will not join:
        they learn it now, not at their join timeout (600 s by default)."""
        self._store.set(self._key("closed"), b"1")
        if self._round is not None:
            self._store.set(self._key("complete", self._round), b"1")

    def get_backend(self) -> str:
        return NAME

    def get_run_id(self) -> str:
        return self._run_id

    def shutdown(self) -> bool:
        """torchrun's agent calls this when it ends (done, or out of restarts; not when it is
        signalled): close the rendezvous, as c10d's does, so that no node waits on for it."""
        try:
            self.set_closed()
            self._store.add(self._key("shut"), 1)
            if self._node_rank == 0:
                self._wait_for_the_others_to_shut()
        except RuntimeError:  # the store went with node 0's agent: nobody is left to wake
            return False
        return True

    def _wait_for_the_others_to_shut(self) -> None:
        """The store goes with this agent. After a job that succeeded every agent passed torch's
        exit barrier and closes its side within milliseconds: one that found the store gone would
        print torch's C++ stack trace ("sendBytes failed ... Broken pipe") after a good job. The
        wait is bounded (SHUT_WAIT_S): after a failure, a lost node never comes to close."""
        deadline = time.monotonic() + SHUT_WAIT_S
        while self._store.add(self._key("shut"), 0) < self._nodes and time.monotonic() < deadline:
            time.sleep(0.02)


def create_handler(params: RendezvousParameters) -> RendezvousHandler:
    if params.min_nodes != params.max_nodes:
        raise ValueError(
            f"the lab rendezvous is for fixed-size jobs; got --nnodes={params.min_nodes}:{params.max_nodes}"
        )
    node_rank = params.config.get("node_rank")
    if node_rank is None:
        raise ValueError("the lab rendezvous needs the node's rank: --rdzv-conf=node_rank=N")
    host, port = parse_rendezvous_endpoint(params.endpoint, default_port=29400)
    join_timeout_s = float(params.config.get("join_timeout", 600))
    store = TCPStore(
        host,
        port,
        is_master=int(node_rank) == 0,
        timeout=timedelta(seconds=join_timeout_s),
        wait_for_workers=False,
        multi_tenant=True,
        use_libuv=True,
    )
    return FastRendezvous(store, params.run_id, int(node_rank), params.max_nodes, params.local_addr, join_timeout_s)


def register() -> None:
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    rendezvous_handler_registry.register(NAME, create_handler)
