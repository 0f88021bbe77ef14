"""Running the host's network tools (ip, iptables) with a deadline, as the lab's own two kinds of call."""

from __future__ import annotations

import subprocess

from lab.errors import LabError

TIMEOUT_S = 30  # every ip/iptables call; iptables -w waits at most this for the xtables lock


def query(*argv: str) -> str:
    """A query (or best-effort removal): its output, "" when it fails or hangs."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


def must(*argv: str) -> None:
    """A change that has to happen: one line saying what failed, else nothing."""
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LabError(f"`{' '.join(argv)}` did not finish within {TIMEOUT_S}s") from None
    if result.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {result.stderr.strip() or result.returncode}")
