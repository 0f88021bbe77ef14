"""Errors a node's log holds with no rank, given to the ranks that died without saying why:
a native abort's last words ("terminate called after throwing ...", lab.node_log.native_aborts)
and the tracebacks processes printed themselves (a SyntaxError before any had a rank, a wrapper's
traceback: Hydra's, a `logging.exception`; lab.node_log.PrintedErrors). Neither says which
process printed it, so each is given only where one reading is possible."""

from __future__ import annotations

import re

from lab.node_log import COMMUNICATION_TIMEOUT
from lab.why.failure_card import RankFailure

Said = tuple[str, str]  # (error, where)

# What a rank says when a *peer* failed: a consequence, never the first cause. A timeout counts
# only where communication timed out (lab.node_log.COMMUNICATION_TIMEOUT).
CONSEQUENCE = re.compile(
    rf"Connection closed by peer|Connection reset by peer|{COMMUNICATION_TIMEOUT.pattern}|Broken pipe|"
    r"DistNetworkError|DistStoreError|SIGTERM|connectFullMesh|RendezvousClosedError"
)


def aborted_by(failures: list[RankFailure], node: str, aborts: list[Said], terminated: set[int]) -> list:
    """(failure, said) for the node's one rank killed by a signal nobody in the job sent, when the
    log holds one native abort."""
    died = [f for f in failures if f.node == node and (f.exit_code or 0) < 0 and f.pid not in terminated]
    return [(died[0], aborts[0])] if len(aborts) == 1 and len(died) == 1 and not died[0].error else []


def printed_by(failures: list[RankFailure], node: str, bare: list[Said], terminated: set[int]) -> list:
    """(failure, said) for the node's ranks that exited with a status and no error, from the errors
    its processes printed with no rank: one error printed by each (a SyntaxError before any had a
    rank), or one cause among peers' consequences (a wrapper's traceback, Hydra's, beside a peer's
    "Connection closed by peer") when one of those ranks alone was not stopped by its agent."""
    mute = [f for f in failures if f.node == node and (f.exit_code or 0) > 0 and not f.error]
    if not mute or not bare:
        return []
    if len({error for error, _ in bare}) == 1:
        return [(failure, bare[0]) for failure in mute]
    causes = {error: where for error, where in bare if not CONSEQUENCE.search(error)}
    unstopped = [f for f in mute if f.pid not in terminated]
    return [(unstopped[0], next(iter(causes.items())))] if len(unstopped) == 1 and len(causes) == 1 else []


def mute_ranks_note(causes: list[RankFailure], bare: dict[str, list[Said]]) -> str:
    """The card's note on ranks that all exited with a status and no error of their own: which
    failed first is unknown. Where their nodes' logs hold one cause printed with no rank (beside a
    peer's consequence), it is quoted: one of them raised it, which one the log cannot say."""
    ranks = ", ".join(str(f.rank) for f in causes)
    printed = {error: where for f in causes for error, where in bare.get(f.node, []) if not CONSEQUENCE.search(error)}
    if len(printed) == 1:
        error, where = next(iter(printed.items()))
        return (
            f"ranks {ranks} exited with a status, and their log holds, printed with no rank, {error}"
            + (f" at {where}" if where else "")
            + ": one of them raised it; which one, and which failed first, is unknown (the earliest noticed is shown)"
        )
    return (
        f"ranks {ranks} exited without saying why, and agents notice exits in their own time: which one failed "
        "first is unknown (the earliest noticed is shown)"
    )
