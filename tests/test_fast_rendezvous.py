"""The lab's rendezvous backend (lab.node.fast_rendezvous) on a real TCPStore, agents as
threads: rounds fill only with every node, ranks are the node ranks, a restarting node
pulls the others into the next round, a node brought back joins the round after the last
complete one, and an unfilled round times out with a clear error. Plus the topology that
renders it."""

import threading
import time

import pytest
from torch.distributed.elastic.rendezvous import RendezvousClosedError, RendezvousParameters, RendezvousTimeoutError

from lab.bench import free_port
from lab.node import fast_rendezvous
from lab.topology import Topology, TopologyError


@pytest.fixture
def agents():
    """A handler factory over one store: node 0's handler hosts it, as on a real node 0."""
    port = free_port()
    made = []

    def make(node_rank: int, nodes: int = 2, join_timeout: float = 20):
        params = RendezvousParameters(
            backend="lab",
            endpoint=f"127.0.0.1:{port}",
            run_id="test",
            min_nodes=nodes,
            max_nodes=nodes,
            local_addr="127.0.0.1",
            node_rank=str(node_rank),
            join_timeout=str(join_timeout),
        )
        handler = fast_rendezvous.create_handler(params)
        made.append(handler)
        return handler

    yield make
    made.clear()  # node 0's store goes with its handler


def join_all(handlers):
    """next_rendezvous on every handler at once; their results in order."""
    results: list = [None] * len(handlers)

    def join(i):
        results[i] = handlers[i].next_rendezvous()

    threads = [threading.Thread(target=join, args=(i,)) for i in range(len(handlers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_a_round_completes_with_every_node_and_ranks_are_node_ranks(agents):
    node0, node1, node2 = agents(0, nodes=3), agents(1, nodes=3), agents(2, nodes=3)
    infos = join_all([node2, node0, node1])
    assert [i.rank for i in infos] == [2, 0, 1]
    assert {i.world_size for i in infos} == {3}
    # Every node reads the same workers' store address, hosted by node 0's agent.
    assert len({(i.bootstrap_store_info.master_addr, i.bootstrap_store_info.master_port) for i in infos}) == 1
    assert node0.use_agent_store


def test_a_restarting_node_is_seen_waiting_and_pulls_the_others_into_the_next_round(agents):
    node0, node1 = agents(0), agents(1)
    join_all([node0, node1])
    assert node0.num_nodes_waiting() == 0
    joining = threading.Thread(target=node1.next_rendezvous)  # node 1's workers failed: it re-joins
    joining.start()
    for _ in range(200):
        if node0.num_nodes_waiting() == 1:
            break
        time.sleep(0.01)
    assert node0.num_nodes_waiting() == 1
    second = node0.next_rendezvous()  # what the healthy agent does next
    joining.join(10)
    assert second.rank == 0 and not joining.is_alive()
    # Each round has its own workers' store: nothing of the first round is readable in the second.
    assert node0.num_nodes_waiting() == 0


def test_a_node_brought_back_joins_the_round_after_the_last_complete_one(agents):
    node0, node1 = agents(0), agents(1)
    join_all([node0, node1])
    join_all([node0, node1])  # a restart: round 1
    replacement = agents(1)  # node 1's agent restarted from scratch
    infos = join_all([node0, replacement])
    assert [i.rank for i in infos] == [0, 1]


def test_a_node_that_ends_for_good_wakes_a_node_waiting_for_the_next_round(agents):
    """Node 0's agent runs out of restarts (or finishes) and shuts its rendezvous down while node 1
    waits for the next round: node 1 is told the rendezvous closed at once, not at its join timeout."""
    node0, node1 = agents(0, join_timeout=60), agents(1, join_timeout=60)
    join_all([node0, node1])
    outcome: list = []

    def rejoin():
        try:
            node1.next_rendezvous()
        except RendezvousClosedError as e:
            outcome.append(e)

    waiting = threading.Thread(target=rejoin)
    waiting.start()
    for _ in range(200):
        if node0.num_nodes_waiting() == 1:
            break
        time.sleep(0.01)
    assert node0.shutdown() is True
    waiting.join(10)
    assert not waiting.is_alive() and len(outcome) == 1, "node 1 still waits for a round nobody will join"
    with pytest.raises(RendezvousClosedError):
        node1.next_rendezvous()


def test_a_round_that_does_not_fill_times_out_with_a_clear_error(agents):
    node0 = agents(0, join_timeout=1)
    with pytest.raises(RendezvousTimeoutError, match="did not fill with 2 nodes in 1s"):
        node0.next_rendezvous()


def test_it_refuses_an_elastic_job_and_a_missing_node_rank():
    base = dict(backend="lab", endpoint=f"127.0.0.1:{free_port()}", run_id="t", local_addr="127.0.0.1")
    with pytest.raises(ValueError, match="fixed-size"):
        fast_rendezvous.create_handler(RendezvousParameters(min_nodes=1, max_nodes=2, node_rank="0", **base))
    with pytest.raises(ValueError, match="node_rank=N"):
        fast_rendezvous.create_handler(RendezvousParameters(min_nodes=2, max_nodes=2, **base))


def test_the_topology_renders_the_node_rank_and_refuses_elastic():
    args = Topology(nodes=2, rdzv_backend="lab").torchrun_args(1)
    assert "--rdzv-backend=lab" in args
    conf = next(a for a in args if a.startswith("--rdzv-conf="))
    assert "node_rank=1" in conf and "is_host" not in conf
    with pytest.raises(TopologyError, match="fixed-size"):
        Topology(nodes=2, min_nodes=1, rdzv_backend="lab")
