"""How the card reads one rank's error, by class rather than by the recorded examples: a timeout
of communication is a peer's doing, a timeout of the rank's own input is its own failure, and
an allocation that failed is out of memory whatever wrote the message."""

from __future__ import annotations

import pytest

from lab.bench.grading import kind_of
from lab.why.card import how_it_failed
from lab.why.failure_card import RankFailure


def failed(error: str, exit_code: int = 1) -> tuple[str, bool]:
    return how_it_failed(RankFailure(1, "node0", 1, 0.0, exit_code, pid=42, error=error), terminated=set())


@pytest.mark.parametrize(
    "error",
    [
        "RuntimeError: [../gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms for recv operation",
        "RuntimeError: Timed out waiting 60000ms for send operation to complete",
        "torch.distributed.DistStoreError: wait timeout after 30000ms, keys: /gen3/all-came",
        "torch.distributed.DistBackendError: [Rank 1] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600012 milliseconds before timing out.",
        "RuntimeError: [../gloo/transport/tcp/pair.cc:144] Connect timeout [10.0.0.11]:41021",
        "RuntimeError: Connection closed by peer [10.0.0.10]:5855",
    ],
)
def test_communication_that_timed_out_or_broke_is_a_peers_consequence(error):
    how, consequence = failed(error)
    assert consequence and how.startswith("raised ")


@pytest.mark.parametrize(
    "error",
    [
        "RuntimeError: DataLoader timed out after 60 seconds",
        "TimeoutError: The read operation timed out",
        "requests.exceptions.ReadTimeout: HTTPSConnectionPool(host='data', port=443): Read timed out.",
        "socket.timeout: timed out",
    ],
)
def test_a_timeout_of_the_ranks_own_input_is_its_own_failure(error):
    how, consequence = failed(error)
    assert not consequence and kind_of(how) == "exception", how


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "torch.OutOfMemoryError"),
        ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20 MiB", "torch.cuda.OutOfMemoryError"),
        ("RuntimeError: CUDA out of memory. Tried to allocate 1.50 GiB (GPU 0; 15.78 GiB total)", "RuntimeError"),
        ("MemoryError", "MemoryError"),
        ("RuntimeError: std::bad_alloc", "RuntimeError"),
    ],
)
def test_an_allocation_that_failed_is_out_of_memory(error, raised):
    how, consequence = failed(error)
    assert how == f"ran out of memory: raised {raised}" and not consequence
    assert kind_of(how) == "oom"


def test_an_error_that_only_mentions_memory_is_an_exception():
    how, _ = failed("ValueError: memory layout of the batch is wrong")
    assert kind_of(how) == "exception"
