"""A node's round trip to a neutral host, twice a second: how a slow network names its node.

A network that delays one node's packets slows every rank's all-reduce alike: the ranks on
the slow node wait no longer than the others, so busy time (lab.health.stragglers) cannot
tell. A round trip from each node to one host outside the job can: on netns hosts, the lab's
bridge in the host's own namespace (LAB_NET_PROBE, set by the local runtime). The probe is a
TCP connection attempt to a port nothing serves (discard, 9): the host answers with a reset,
one round trip later, and no service is touched. The delayed node's own packets leave late,
so its round trip grows; the others', to the same host, do not. Two nodes timing each other
could not say which end is slow.

Each probe is one line of events/net-<node>.jsonl (read back by events.read_probes); with the
agent's exporter on, the last one is the gauge lab_node_net_rtt_seconds. The agent runs the
probe (lab.node.launch) in a daemon thread, so it ends with the node.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

from lab.health.events import PROBE_PREFIX, Event

PORT = 9  # discard: nothing listens there, so the answer is the host's own reset
INTERVAL_S, TIMEOUT_S = 0.5, 2.0


def round_trip(addr: str, port: int = PORT, timeout_s: float = TIMEOUT_S) -> float | None:
    """Seconds from a SYN to the host's answer (a reset, or an accepted connection); None:
    no answer within the timeout, or no route."""
    started = time.perf_counter()
    try:
        with socket.create_connection((addr, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        pass
    except OSError:
        return None
    return time.perf_counter() - started


def record(events_dir: Path, node: str, rtt: float | None) -> None:
    line = json.dumps({"time": time.time(), "event": Event.NET_RTT, "node": node, "rtt": rtt}) + "\n"
    with open(events_dir / f"{PROBE_PREFIX}{node}.jsonl", "a") as f:
        f.write(line)


def start(addr: str, events_dir: Path, node: str, gauge=None) -> threading.Thread:
    """Probe addr every INTERVAL_S from a daemon thread; gauge: a Gauge set to each answer."""

    def run() -> None:
        while True:
            rtt = round_trip(addr)
            try:
                record(events_dir, node, rtt)
            except OSError:
                return  # the run dir is gone: the lab is coming down
            if gauge is not None and rtt is not None:
                gauge.set(rtt)
            time.sleep(INTERVAL_S)

    thread = threading.Thread(target=run, name="lab-net-probe", daemon=True)
    thread.start()
    return thread
