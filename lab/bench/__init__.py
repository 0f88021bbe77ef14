"""Measurements, each side by side with its reference in the same run (machines here are noisy)."""

import socket

from lab.options import Option

TRIALS = Option("--trials", "how many times each side is measured (default %(default)s)", 3, int)
BENCH_RUNTIMES = Option("--runtimes", "where the bench runs, comma-separated (default %(default)s)", "local")


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
