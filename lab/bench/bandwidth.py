"""Bandwidth as nccl-tests defines it (its doc/PERFORMANCE.md), and the sizes a sweep visits.

algbw = S / t, with S the operation's size in bytes: the buffer for all_reduce and
broadcast, the whole gathered output for all_gather, the whole input for reduce_scatter.
busbw corrects algbw by how much data each rank must move at best, so that it can be
compared with the link's bandwidth whatever the number of ranks n:

    all_reduce      busbw = algbw * 2(n-1)/n
    all_gather      busbw = algbw * (n-1)/n
    reduce_scatter  busbw = algbw * (n-1)/n
    broadcast       busbw = algbw
"""

from __future__ import annotations

import re

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def bus_factor(op: str, ranks: int) -> float:
    if op == "all_reduce":
        return 2 * (ranks - 1) / ranks
    if op in ("all_gather", "reduce_scatter"):
        return (ranks - 1) / ranks
    if op == "broadcast":
        return 1.0
    raise ValueError(f"unknown collective {op!r} (one of {', '.join(OPS)})")


def algbw(size_bytes: int, seconds: float) -> float:
    """Bytes per second."""
    return size_bytes / seconds


def busbw(op: str, size_bytes: int, seconds: float, ranks: int) -> float:
    return algbw(size_bytes, seconds) * bus_factor(op, ranks)


def parse_size(text: str) -> int:
    """'1K' -> 1024, '256M' -> 268435456, '4096' -> 4096."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text.upper())
    if not match:
        raise ValueError(f"not a size: {text!r} (e.g. 4096, 1K, 256M)")
    return int(match[1]) * UNITS[match[2]]


def size_argument(text: str) -> int:
    """parse_size for argparse: a bad size is a one-line usage error."""
    import argparse

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def sweep(low: int, high: int, factor: int, ranks: int) -> list[int]:
    """Sizes from low to high (both included when reachable), multiplying by factor; each
    a multiple of 4 * ranks bytes, so float32 buffers split evenly across the ranks."""
    if low < 1 or high < low or factor < 2:
        raise ValueError(f"need 1 <= min <= max and factor >= 2, got {low}, {high}, {factor}")
    unit = 4 * ranks
    sizes, size = [], low
    while size <= high:
        sizes.append(max(unit, size - size % unit))
        size *= factor
    return sorted(set(sizes))


def human(size_bytes: int) -> str:
    for suffix in ("G", "M", "K"):
        if size_bytes >= UNITS[suffix] and size_bytes % UNITS[suffix] == 0:
            return f"{size_bytes // UNITS[suffix]}{suffix}"
    return str(size_bytes)
