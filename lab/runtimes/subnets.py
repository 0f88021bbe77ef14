"""Which /24 a lab takes for its hosts (netns bridges, Docker networks): one nobody uses yet.

The search starts at a block the lab id picks, so two labs rarely race for the same one,
and moves on past every block that overlaps a network already in use.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence

from lab.errors import LabError


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


def free_block_among(
    supernets: Sequence[str], taken: Mapping[str, list[ipaddress.IPv4Network]], lab_id: str, override: str
) -> ipaddress.IPv4Network:
    """The first free /24 of the first supernet that has one; taken maps a network's name to its ranges.

    When none has, the error names the networks that hold them and the variable that overrides.
    """
    ranges = [block for blocks in taken.values() for block in blocks]
    for supernet in supernets:
        block = free_block(supernet, ranges, lab_id)
        if block is not None:
            return block
    holders = sorted(
        name
        for name, blocks in taken.items()
        if any(block.overlaps(ipaddress.IPv4Network(s)) for block in blocks for s in supernets)
    )
    raise LabError(
        f"every /24 of {' and '.join(supernets)} is taken by a network ({', '.join(holders)}); set {override}"
    )
