"""A collective mismatch, as torch's DETAIL debug mode reports it: which rank ran the odd one;
and as gloo reports it without DETAIL, where it cannot say.

With TORCH_DISTRIBUTED_DEBUG=DETAIL each collective is first checked against every other
rank's (its sequence number, op, shapes). A rank whose peers differ fails at once with
"Detected mismatch between collectives on ranks. Rank R is running collective: <R's>, but
Rank N is running collective: <N's>". Each rank names the first rank that differs from it,
so every rank but the odd one names the odd one, and the odd one names some other rank.

The odd rank is the one named by at least two ranks and by more ranks than any other. Two
ranks that each name the other say nothing about which is odd: no rank is named, and the
card does not guess. torchrun reports one failed worker per node and stops the rest, so
the odd rank's own report, and some of its peers', may be missing: measured in `lab bench
diagnosis`, once the only reports were the odd rank's and one peer's, naming each other.

Without DETAIL nothing checks the collectives first. gloo aborts the rank that receives more
bytes than its own collective expects ("op.preamble.length <= op.nbytes. 8 vs 4. Received data
size doesn't match expected size. Is there a distributed collective mismatch in your code?",
measured in `lab bench diagnosis`). That rank ran the odd collective, or the peer that sent to
it did; the card says so and names neither with confidence.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

DETECTED = re.compile(
    r"Detected mismatch between collectives on ranks\. Rank (?P<rank>\d+) is running collective: (?P<own>.*?), "
    r"but Rank (?P<named>\d+) is running collective: (?P<theirs>.*?)\.\s*Collectives differ",
    re.S,
)
OP = re.compile(r"OpType=(\w+)")
SEQUENCE = re.compile(r"SequenceNumber=(\d+)")
SHAPE = re.compile(r"TensorShape=(\[[^\]]*\])")
SIZE = re.compile(r"Received data size doesn't match expected size")
SIZE_HOW = "gloo received more data than its collective expects (a collective mismatch)"
SIZE_NOTE = (
    "gloo aborts the rank that receives more than its collective expects: that rank, or the peer that sent to it, "
    "ran a different collective; TORCH_DISTRIBUTED_DEBUG=DETAIL checks every collective first and names the odd rank"
)


@dataclass(frozen=True)
class Mismatch:
    rank: int  # the odd rank
    ran: str  # its collective as it said it ran it ("": it said nothing), "ALLREDUCE #14 [3]"
    others_ran: str  # the collective of the first rank that named it, "ALLREDUCE #14 [1, 16]"
    named_by: tuple[int, ...]  # the ranks that named it

    def how(self) -> str:
        ranks = ", ".join(str(r) for r in self.named_by)
        ran = f"{self.ran} where they ran {self.others_ran}" if self.ran else f"they ran {self.others_ran}"
        return (
            f"ran a different collective than its peers ({ran}; named by ranks {ranks} under "
            "TORCH_DISTRIBUTED_DEBUG=DETAIL)"
        )


def collective(fingerprint: str) -> str:
    """ "ALLREDUCE #14 [1, 16]" from torch's CollectiveFingerPrint(SequenceNumber=14, OpType=ALLREDUCE,
    TensorShape=[1, 16], ...). Only a rank's own collective is worth reading: the one it quotes
    for the rank it names is the check's own exchange (a GATHER or SCATTER #0), not that rank's."""
    op, sequence, shape = OP.search(fingerprint), SEQUENCE.search(fingerprint), SHAPE.search(fingerprint)
    return f"{op[1] if op else '?'} #{sequence[1] if sequence else '?'}" + (f" {shape[1]}" if shape else "")


def odd_rank(errors: dict[int, str]) -> Mismatch | None:
    """The rank that ran a collective its peers did not, from the ranks' errors (rank -> the
    error it died of); None when no error reports a mismatch or the reports do not agree."""
    said = {rank: found for rank, error in errors.items() if (found := DETECTED.search(error))}
    counts = Counter(int(found["named"]) for found in said.values()).most_common()
    if not counts or counts[0][1] < 2 or (len(counts) > 1 and counts[1][1] == counts[0][1]):
        return None
    odd = counts[0][0]
    by = tuple(sorted(rank for rank, found in said.items() if int(found["named"]) == odd))
    own = collective(said[odd]["own"]) if odd in said else ""
    return Mismatch(odd, own, collective(said[by[0]]["own"]), by)


def unsettled(errors: dict[int, str]) -> str:
    """A note when ranks report a mismatch but do not agree on the odd rank ("" otherwise): then
    the earliest to fail is no more the cause than the others, and the card must not say it is."""
    reporting = sorted(rank for rank, error in errors.items() if DETECTED.search(error))
    if not reporting or odd_rank(errors) is not None:
        return ""
    return (
        f"ranks {', '.join(map(str, reporting))} report a collective mismatch (TORCH_DISTRIBUTED_DEBUG=DETAIL) and "
        "do not agree on which rank ran a different collective (each names the first peer that differs from it; "
        "the others were stopped before they said): which rank is at fault is unknown"
    )


def size_mismatch(error: str) -> bool:
    """gloo's abort on a message longer than its collective expects (no DETAIL check ran)."""
    return bool(SIZE.search(error))
