"""Can gloo abort a collective that is waiting for a peer? The probe behind the in-process finding.

Two ranks form a gloo group with a TIMEOUT_S timeout. Rank 1 never enters the collective
(a hung peer, not a dead one: its sockets stay open). Rank 0 enters all_reduce, and
ABORT_AFTER_S later another thread of rank 0 calls ProcessGroup.abort() (also
shutdown()). The probe reports how long abort() took and how long the all_reduce kept
waiting. With torch 2.13's gloo, abort() returns at once and the collective still waits
for the whole timeout: in-process recovery from a hang cannot be faster than the
process-group timeout on gloo, while a dead peer (its sockets closed) fails every
survivor's collective within a fraction of a second.

    python -m lab.bench.gloo_abort
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from datetime import timedelta

TIMEOUT_S, ABORT_AFTER_S = 5.0, 0.5


def _rank(rank: int, port: int, method: str, results) -> None:
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timedelta(seconds=30))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timedelta(seconds=TIMEOUT_S))
    if rank == 1:
        time.sleep(TIMEOUT_S + 3)  # the hung peer: present, silent
        return
    group = dist.group.WORLD
    abort_took: list[float] = []

    def abort_later() -> None:
        time.sleep(ABORT_AFTER_S)
        started = time.monotonic()
        getattr(group, method)()
        abort_took.append(time.monotonic() - started)

    threading.Thread(target=abort_later, daemon=True).start()
    started = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
        outcome = "returned"
    except RuntimeError as e:
        outcome = str(e).splitlines()[0][-120:]
    waited = time.monotonic() - started
    results.put(
        {"method": method, "abort_s": abort_took[0] if abort_took else None, "collective_s": waited, "outcome": outcome}
    )


def probe(method: str = "abort") -> dict:
    """One probe with ProcessGroup.<method>(); its figures."""
    from lab.bench import free_port

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(rank, port, method, results)) for rank in range(2)]
    for proc in procs:
        proc.start()
    try:
        return results.get(timeout=TIMEOUT_S + 60)
    finally:
        for proc in procs:
            proc.join(TIMEOUT_S + 10)
            if proc.is_alive():
                proc.kill()
                proc.join()


if __name__ == "__main__":
    for method in ("abort", "shutdown"):
        print(json.dumps(probe(method)))
