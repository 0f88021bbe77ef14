"""The in-process recovery protocol past this machine: thousands of simulated ranks and keepers
against a real TCPStore (`lab bench scale` runs this, one world size at a time).

    python -m lab.bench.scale_sim --ranks N --per-node P [--keep-s S]   # prints one JSON object

Each simulated rank or keeper is a thread with its own store client (a real rank has its own,
and its lookout one more); no torch process group, no model. They run the lab's own code where
the protocol lives: the keepers' roll call and rounds (lab.node.inprocess.roll_call, .rounds)
and the join's count of ranks (lab.inprocess.group.await_everyone); the keeper's opening of a
generation (two writes, as lab.node.inprocess.keeper.replace) and the group's start are
simulated: NCCL's, where rank 0 writes the unique id and every rank reads it once (gloo's full
mesh reads every peer's address, N^2 reads in all, which no cluster of thousands uses).

The store is served by a process of its own, as node 0's keeper serves it. Run it in a network
namespace of its own (lab.bench.scale does): the store's clients look up their own socket's
host name, and on a host whose resolver answers slowly that, not the protocol, is what is timed.
Every store call is counted: the counts are exact, the times are this machine's (its threads
share two cores, so the times are an upper bound on what the protocol itself costs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import torch.distributed as dist

from lab.inprocess.group import await_everyone
from lab.node.inprocess.roll_call import KeeperLost, RollCall
from lab.node.inprocess.rounds import Rounds

TIMEOUT = timedelta(seconds=300)
SILENT_S = 5.0  # the keeper's own (lab.node.inprocess.keeper: min(5, the frozen-rank bound))
KEEPER_LOOP_S = 0.005  # the keeper's loop sleeps this between passes


class Counted:
    """A store client whose calls are counted (under a prefix, as a PrefixStore would put them)."""

    def __init__(self, store: dist.TCPStore, prefix: str = "", counter: list[int] | None = None):
        self.store, self.prefix = store, prefix
        self.counter = counter if counter is not None else [0]  # shared with its prefixed views

    @property
    def calls(self) -> int:
        return self.counter[0]

    def under(self, prefix: str) -> Counted:
        return Counted(self.store, prefix, self.counter)

    def add(self, key: str, amount: int) -> int:
        self.counter[0] += 1
        return self.store.add(self.prefix + key, amount)

    def set(self, key: str, value) -> None:
        self.counter[0] += 1
        self.store.set(self.prefix + key, value)

    def get(self, key: str) -> bytes:
        self.counter[0] += 1
        return self.store.get(self.prefix + key)

    def check(self, keys: list[str]) -> bool:
        self.counter[0] += 1
        return self.store.check([self.prefix + k for k in keys])

    def wait(self, keys: list[str], timeout: timedelta = TIMEOUT) -> None:
        self.counter[0] += 1
        self.store.wait([self.prefix + k for k in keys], timeout)


def serve() -> None:
    """Host the store until stdin closes; print its port first."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    print(store.port, flush=True)
    sys.stdin.read()


def clients(port: int, count: int) -> list[Counted]:
    def one(_: int) -> Counted:
        return Counted(dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT))

    with ThreadPoolExecutor(64) as pool:
        return list(pool.map(one, range(count)))


def tcp_counters() -> dict[str, int]:
    """This network namespace's TCP counters a stall would show in: segments sent again, and
    retransmission timeouts (the kernel's own, /proc/net/snmp and /proc/net/netstat)."""
    found: dict[str, int] = {}
    for path, table, names in (
        ("/proc/net/snmp", "Tcp:", ("RetransSegs",)),
        ("/proc/net/netstat", "TcpExt:", ("TCPTimeouts", "ListenOverflows")),
    ):
        with open(path) as f:
            rows = [line.split() for line in f if line.startswith(table)]
        header, values = rows[0], rows[1]
        found.update({name: int(values[header.index(name)]) for name in names if name in header})
    return found


def regroup(port: int, ranks: int) -> dict:
    """Every rank waits for generation 1 to open, then joins it: seconds from the opening until
    the last rank heard it, counted in, and read the group's id; store calls per rank."""
    stores = clients(port, ranks)
    opener = clients(port, 1)[0]
    marks: list[tuple[float, float, float]] = []
    ready = threading.Barrier(ranks + 1)

    def rank(number: int, store: Counted) -> None:
        ready.wait()
        store.wait(["gen1/open"])  # the lookout's wait
        heard = time.monotonic()
        generation = int(store.add("generation", 0))
        prefixed = store.under(f"gen{generation}/")
        await_everyone(prefixed, ranks, TIMEOUT.total_seconds())
        came = time.monotonic()
        if number == 0:
            prefixed.set("nccl-unique-id", b"x" * 128)
        prefixed.get("nccl-unique-id")
        marks.append((heard, came, time.monotonic()))

    threads = [threading.Thread(target=rank, args=(n, s)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    ready.wait()
    time.sleep(0.5)  # every rank in its wait
    before, opened = tcp_counters(), time.monotonic()
    opener.add("generation", 1)  # the keeper's two writes (lab.node.inprocess.keeper.replace)
    opener.set("gen1/open", b"1")
    for thread in threads:
        thread.join()
    return {
        "notice_s": max(m[0] for m in marks) - opened,
        "counted_in_s": max(m[1] for m in marks) - opened,
        "regroup_s": max(m[2] for m in marks) - opened,
        "calls_per_rank": sum(s.calls for s in stores) / ranks,
        "tcp_during_regroup": {k: v - before[k] for k, v in tcp_counters().items()},
    }


def keepers(port: int, nodes: int, keep_s: float) -> dict:
    """Every keeper beats, judges and polls for rounds as its loop does, for keep_s: the store
    calls a second, the longest a keeper went between two beats, and losses heard (all false)."""
    stores = clients(port, nodes)
    gaps: list[float] = []
    false_losses = [0]
    start = threading.Barrier(nodes + 1)

    def keeper(node: int, store: Counted) -> None:
        roll, rounds = RollCall(store, node, nodes, SILENT_S), Rounds(store)
        start.wait()
        last, worst, until, beats = time.monotonic(), 0.0, time.monotonic() + keep_s, 0
        while time.monotonic() < until:
            rounds.heard()
            try:
                roll.tick()
            except KeeperLost as lost:
                false_losses[0] += 1
                roll.away(lost)
            if roll.count != beats:  # it beat in this pass
                now = time.monotonic()
                worst, last, beats = max(worst, now - last) if beats else 0.0, now, roll.count
            time.sleep(KEEPER_LOOP_S)
        gaps.append(max(worst, time.monotonic() - last))  # a keeper that never beat again: since its last

    threads = [threading.Thread(target=keeper, args=(n, s)) for n, s in enumerate(stores)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    took = time.monotonic() - began
    return {
        "calls_per_s": sum(s.calls for s in stores) / took,
        "worst_beat_gap_s": max(gaps),
        "false_losses": false_losses[0],
    }


def store_rate(port: int, callers: int = 64, calls: int = 300) -> float:
    """The store's calls a second with `callers` clients adding at once: what it serves at most."""
    stores = clients(port, callers)
    threads = [threading.Thread(target=lambda s=s: [s.add("rate", 1) for _ in range(calls)]) for s in stores]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return callers * calls / (time.monotonic() - began)


def measure(ranks: int, per_node: int, keep_s: float) -> dict:
    server = subprocess.Popen(
        [sys.executable, "-m", "lab.bench.scale_sim", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        threading.stack_size(512 * 1024)  # thousands of threads: their stacks, not the default 8 MiB each
        return {
            "ranks": ranks,
            "nodes": ranks // per_node,
            "silent_s": SILENT_S,
            "store_calls_per_s": store_rate(port),
            **regroup(port, ranks),
            **keepers(port, ranks // per_node, keep_s),
        }
    finally:
        if server.stdin:
            server.stdin.close()
        server.wait(30)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lab.bench.scale_sim")
    p.add_argument("--serve", action="store_true")
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--per-node", type=int, default=8)
    p.add_argument("--keep-s", type=float, default=5.0)
    args = p.parse_args(argv)
    if args.serve:
        serve()
        return 0
    print(json.dumps(measure(args.ranks, args.per_node, args.keep_s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
