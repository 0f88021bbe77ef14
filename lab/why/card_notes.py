"""What the first-failure card adds to the rank it names: which silent rank hung, why no rank
failed of its own, and what the first rank's error or signal means (a full disk, gloo's abort on
a mismatch, an OOM kill). lab.why.card draws the card and calls these once its first rank is chosen.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

from lab.health.stragglers import SlowNetwork
from lab.kernel_log import kernel_log, oom_kill
from lab.node import worker_record
from lab.why import disk_full, mismatch
from lab.why.failure_card import Card, RankFailure
from lab.why.lost_store import StoreLoss


def hung_ranks(silent: list[RankFailure]) -> list[RankFailure]:
    """Of the ranks that raised nothing and that torchrun stopped, those that may be the hung one.
    A peer stopped a moment before its own timeout fired looks the same (measured once in `lab bench
    diagnosis`, 1 cell in 84), unless the hung rank left a mark: it lived through the SIGTERM and
    took the SIGKILL that follows (frozen: SIGSTOPped, or ignoring SIGTERM), while the peer died of
    the SIGTERM."""
    frozen = [f for f in silent if f.exit_code == -signal.SIGKILL]
    return frozen if len(silent) > 1 and len(frozen) == 1 else silent


NEVER_FORMED = re.compile(r"connectFullMesh|timed out connecting|Connection refused")


def never_formed(result: Card, failures: list[RankFailure]) -> RankFailure | None:
    """Ranks that could not connect to their peers at all (gloo's connectFullMesh, refused
    connections) while none failed of its own: the group never formed, so no rank hung in it (a
    card once called the rank torchrun stopped "the likely hung rank", GLOO_SOCKET_IFNAME=lo). The
    first to say so is shown, and the note says where to look."""
    setup = [f for f in failures if NEVER_FORMED.search(f.error)]
    if not setup:
        return None
    result.certain = False
    result.notes.append(
        f"ranks {', '.join(str(f.rank) for f in sorted(setup, key=lambda f: f.rank))} could not connect to their "
        "peers, so the group never formed and no rank hung in it: the hosts' network (an interface, a firewall, "
        "a name), not a rank's own failure; `lab doctor` checks it"
    )
    return setup[0]


def note_a_shared_error(result: Card, said: list[RankFailure]) -> None:
    """Several ranks raised the very same error of their own (every rank's loss turned NaN at one
    step, each rank's check raised): a cause they share, the data, the model or a hyperparameter,
    not one rank. Which of them the agents noticed first says nothing, and the card says so."""
    if not said:
        return
    alike = sorted(f.rank for f in said if f.error == said[0].error)
    if len(alike) < 2:
        return
    result.certain = False
    result.notes.append(
        f"ranks {', '.join(map(str, alike))} each raised the same error ({said[0].error[:120]}): a cause they "
        "share (the code, the data, a setting), not one rank; which was noticed first says nothing"
    )


def left_first(run_dir: Path, failures: list[RankFailure], terminated: set[int]) -> list[RankFailure]:
    """Ranks that ended on their own, cleanly, while their group still ran: on a node whose other
    ranks failed, a worker (in the node's workers file) that neither failed nor was stopped by
    torchrun. Uneven inputs look like this, the most common DDP hang: a rank whose data ran out
    leaves the loop and exits 0, and its peers fail waiting for it in the next collective."""
    gone = []
    failed = {f.pid for f in failures}
    for node, rank, local_rank, pid in node_workers(run_dir, failures):
        if pid not in failed and pid not in terminated:
            left = RankFailure(rank, node, local_rank, failures[0].time, 0, pid=pid)
            left.how = "exited 0 while its peers were still in the job: it left first"
            gone.append(left)
    return gone


def node_workers(run_dir: Path, failures: list[RankFailure]) -> Iterator[tuple[str, int, int, int]]:
    """(node, rank, local rank, pid) of each worker in the workers file of a node where a rank
    failed: the rank is the node's first rank (known from a failure there) plus the local rank."""
    for node_dir in sorted((run_dir / "nodes").glob("*")):
        recorded = worker_record.read(node_dir / "workers.json")
        bases = {f.rank - f.local_rank for f in failures if f.node == node_dir.name and f.local_rank is not None}
        if recorded is None or len(bases) != 1:
            continue
        base = bases.pop()
        for local_rank, pid in sorted(recorded[1].items()):
            yield node_dir.name, base + local_rank, local_rank, pid


def note_no_cause(
    result: Card, silent: list[RankFailure], store_loss: StoreLoss | None, network: SlowNetwork | None
) -> None:
    """Every failed rank failed of a peer: name the silent rank that hung, or say why none can be."""
    assert result.first is not None
    if len(silent) > 1:
        result.certain = False
        result.notes.append(
            f"ranks {', '.join(str(f.rank) for f in silent)} raised nothing and torchrun had to stop them (a hung "
            "rank, or a peer stopped before its own timeout said so): which one hung is unknown"
        )
    elif silent:
        result.notes.append(
            f"rank {result.first.rank} raised nothing while its peers failed waiting for it (a timeout or a lost "
            "connection), and torchrun had to stop it: the likely hung rank"
        )
    else:
        result.certain = False
        killed = ", ".join(store_loss.killed) if store_loss else ""
        cut = network.node if network and network.cut else ""
        who = (
            f"{killed} died with its agent, unreported"
            if killed
            else f"{cut} was cut off the network (below)"
            if cut
            else "a rank hung or a node was cut off"
        )
        result.notes.append(
            f"every failed rank reports a peer's failure (a timeout or a lost connection): {who}; "
            "the earliest report is shown first"
        )


def note_the_first_error(result: Card, terminated: set[int], kernel: Callable[[], str] | None) -> None:
    """What the first rank's own error or signal means: torch's words for a full disk, gloo's abort
    on a collective mismatch (which cannot say which rank is odd), an OOM kill."""
    first = result.first
    assert first is not None
    if disk_full.note(first.error):
        result.notes.append(disk_full.note(first.error))
    if mismatch.size_mismatch(first.error):
        first.how, result.certain = f"{first.how}: {mismatch.SIZE_HOW}", False
        result.notes.append(mismatch.SIZE_NOTE)
    if first.exit_code == -signal.SIGKILL and first.pid not in terminated:
        note_sigkill(result, kernel)


def note_sigkill(result: Card, kernel: Callable[[], str] | None) -> None:
    """A first rank killed by a SIGKILL nobody in the job sent: the OOM killer, if the kernel says so."""
    assert result.first is not None
    oom = oom_kill(result.first.pid, (kernel or kernel_log)())
    if oom:
        result.first.how = "killed by the kernel's OOM killer (SIGKILL)"
        result.notes.append(f"kernel log: {oom}")
    else:
        result.notes.append(
            "SIGKILL from outside the job, and the kernel log names no OOM kill of its pid: a scheduler, "
            "a person, or a kernel log this user cannot read"
        )
