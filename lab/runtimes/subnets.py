"""Which /24 a lab takes for its hosts (netns bridges, Docker networks): one nobody uses yet.

The search starts at a block the lab id picks, so two labs rarely race for the same one,
and moves on past every block that overlaps a network already in use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable


def free_block(supernet: str, taken: Iterable[ipaddress.IPv4Network], lab_id: str) -> ipaddress.IPv4Network | None:
    """The first /24 of supernet, from the lab id's place on, that overlaps none of taken (None: all do)."""
    blocks = list(ipaddress.IPv4Network(supernet).subnets(new_prefix=24))
    taken = list(taken)
    start = int(lab_id, 16) % len(blocks) if all(c in "0123456789abcdef" for c in lab_id) else 0
    for k in range(len(blocks)):
        block = blocks[(start + k) % len(blocks)]
        if not any(block.overlaps(t) for t in taken):
            return block
    return None
