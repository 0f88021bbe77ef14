"""What the hardware allows, measured in the same run as the collectives it bounds.

Memory copy on one host (torch's copy_ of a large buffer: the ceiling for ranks that
share a host) and a plain TCP stream between two lab hosts (the ceiling for ranks on
different hosts: gloo moves its data over TCP too). The stream's receiver runs in node0's
network namespace and its sender in node1's, when the hosts are netns hosts.

    python -m lab.bench.ceiling serve PORT BYTES     # prints the receiver's seconds
    python -m lab.bench.ceiling send HOST PORT BYTES
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

CHUNK = 1 << 20


def memcpy_bandwidth(size_bytes: int = 256 << 20, reps: int = 5) -> float:
    """Bytes per second copied by torch on one core, best of reps."""
    import torch

    src, dst = torch.ones(size_bytes // 4), torch.empty(size_bytes // 4)
    best = float("inf")
    for _ in range(reps):
        started = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - started)
    return size_bytes / best


def serve(port: int, total: int) -> float:
    with socket.create_server(("0.0.0.0", port)) as server:
        print("listening", flush=True)
        conn, _ = server.accept()
        with conn:
            received, buf, started = 0, bytearray(CHUNK), 0.0
            while received < total:
                n = conn.recv_into(buf)
                if n == 0:
                    raise SystemExit(f"ceiling: the sender stopped after {received} of {total} bytes")
                started = started or time.perf_counter()
                received += n
            return time.perf_counter() - started


def send(host: str, port: int, total: int) -> None:
    payload = b"\0" * CHUNK
    with socket.create_connection((host, port), timeout=30) as conn:
        sent = 0
        while sent < total:
            conn.sendall(payload[: min(CHUNK, total - sent)])
            sent += min(CHUNK, total - sent)


def tcp_bandwidth(
    receiver_netns: str | None, sender_netns: str | None, receiver_address: str, port: int, total: int = 512 << 20
) -> float:
    """Bytes per second of one TCP stream between two lab hosts, timed at the receiver."""

    def in_netns(netns, *argv):
        prefix = ["ip", "netns", "exec", netns] if netns else []
        return [*prefix, sys.executable, "-m", "lab.bench.ceiling", *argv]

    receiver = subprocess.Popen(
        in_netns(receiver_netns, "serve", str(port), str(total)), stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None
    try:
        if receiver.stdout.readline().strip() != "listening":
            raise RuntimeError("the TCP receiver did not start")
        subprocess.run(in_netns(sender_netns, "send", receiver_address, str(port), str(total)), check=True, timeout=120)
        seconds = float(receiver.stdout.readline())
        receiver.wait(10)
    finally:
        receiver.kill()
        receiver.stdout.close()
    return total / seconds


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"]:
        print(serve(int(argv[1]), int(argv[2])), flush=True)
    elif argv[:1] == ["send"]:
        send(argv[1], int(argv[2]), int(argv[3]))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
