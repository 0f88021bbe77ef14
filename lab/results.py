"""Reading the lesson job's answer out of the node logs: one checksum per rank, and a verdict."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from lab import files
from lab.runtimes.base import Node

CHECKSUM_LINE = re.compile(
    r"rank (?P<rank>\d+) local_rank (?P<local_rank>\d+) host (?P<host>\S+) "
    r"checksum (?P<checksum>\S+) \((?P<exact>\S+)\)"
)


@dataclass(frozen=True)
class RankResult:
    rank: int
    node: str
    local_rank: int
    host: str
    checksum: str
    exact: str  # float.hex(): equal strings mean bit-identical weights


def parse(text: str, node: str) -> list[RankResult]:
    return [
        RankResult(
            rank=int(m["rank"]),
            node=node,
            local_rank=int(m["local_rank"]),
            host=m["host"],
            checksum=m["checksum"],
            exact=m["exact"],
        )
        for m in CHECKSUM_LINE.finditer(text)
    ]


def collect(nodes: Sequence[Node]) -> list[RankResult]:
    results = []
    for node in nodes:
        text = files.read_text(node.log_path, 64 << 20, tail=True) or ""  # the node's: no link, no FIFO, bounded
        results += parse(text, node.name)
    return sorted(results, key=lambda r: r.rank)


def verdict(results: Sequence[RankResult], world_size: int) -> tuple[bool, str]:
    """(ok, one line): every rank reported, and all hold bit-identical weights."""
    if len(results) != world_size:
        return False, f"FAIL: {len(results)} of {world_size} ranks reported a checksum"
    if len({r.exact for r in results}) != 1:
        return False, f"FAIL: the {world_size} ranks hold different weights"
    return True, f"all {world_size} ranks hold the same weights"


def table(results: Sequence[RankResult]) -> str:
    rows = [("rank", "node", "local rank", "host", "checksum")]
    rows += [(str(r.rank), r.node, str(r.local_rank), r.host, r.checksum) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows)
