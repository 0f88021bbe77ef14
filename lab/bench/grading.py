"""`lab why`'s card graded against what was injected: the rank it names, the class of fault, the step.

A diagnosis names a rank only when the card stands behind it: a rank that failed of its own
(killed, crashed, raised something that is not a peer's disconnect) or the silent rank torchrun
had to stop while its peers timed out waiting. A card whose first entry is only the earliest of
many consequences names no rank: that is "unknown", which is allowed, where a wrong rank named
with confidence is the one error that counts against the lab most.
"""

from __future__ import annotations

import re
import signal
from dataclasses import asdict, dataclass

from lab.health import injected_error as injected
from lab.why.failure_card import Card

CRASH_SIGNALS = ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGFPE", "SIGILL")
HUNG_NOTE = "the likely hung rank"
NEVER_FORMED_NOTE = "so the group never formed"  # lab.why.card_notes.never_formed
# A lost store is found by the agents, not the ranks: at their next call on it (every 0.1 s,
# --monitor-interval), while the ranks train on. Measured 1 to 7 of the cells' 0.05 s steps late.
STORE_NOTICED_WITHIN = 10


@dataclass(frozen=True)
class Fault:
    """A class of fault the bench injects: the signal sent to one rank's worker, and the class
    a right diagnosis names."""

    name: str
    signal: int
    expect: str
    what: str
    caged: bool = False  # the rank is moved into a small memory cgroup first (lab.bench.cages)
    no_script: str = ""  # why an unchanged script cannot be given this fault ("": it can)
    ends_job: bool = True  # False: the job goes on (a straggler), and the card is read on the running job
    survived_by: tuple[str, ...] = ()  # targets that go on through it (as ends_job=False) where others die
    save_every: int = 0  # the target saves a checkpoint every N steps, for the fault to land in (0: never)
    writer_only: bool = False  # on the trainer, hit the rank that writes checkpoints (rank 0: one folder for all)
    workload: str = ""  # a lab workload the fault needs, run instead of the trainer ("": the trainer)
    detail: bool = True  # the workload runs under TORCH_DISTRIBUTED_DEBUG=DETAIL
    settled: bool = True  # False: the evidence cannot say which rank; a right card names none, and says the class
    cuts_node: bool = False  # not a signal: the rank's node is cut off the network (Node.partition)
    kills_store: bool = False  # not a signal: node 0's agent, the rendezvous store's host, is SIGKILLed
    resumes: bool = False  # not a signal: the job ends at the step, its newest checkpoint is damaged, it runs again
    needs_hosts: str = ""  # the only kind of hosts it can be made on ("": any)


FAULTS = (
    Fault("kill", signal.SIGKILL, "killed", "SIGKILL from outside the job (a scheduler, a person)"),
    Fault("exception", signal.SIGUSR2, "exception", "a Python exception raised in the rank's script"),
    Fault("sigstop", signal.SIGSTOP, "hung", "the rank frozen (SIGSTOP): its peers time out waiting"),
    Fault("segfault", signal.SIGSEGV, "crashed", "a native crash (SIGSEGV, as from a bad C extension)"),
    Fault("abort", signal.SIGABRT, "crashed", "a native abort (SIGABRT, as from std::terminate)"),
    Fault("sigterm", signal.SIGTERM, "terminated", "SIGTERM to one rank alone (a preemption notice)"),
    Fault("oom", injected.HOG_SIGNAL, "oom", "memory allocated past its cgroup's limit: the OOM killer", caged=True),
    Fault("gil-hang", injected.GIL_SIGNAL, "hung", "stuck in C code holding the GIL: no handler or thread runs"),
    Fault(
        "py-hang",
        injected.WAIT_SIGNAL,
        "hung",
        "waits for ever in Python (a queue or data loader that never answers): its threads and handlers still run",
    ),
    Fault("exit", injected.EXIT_SIGNAL, "exited", "exits with status 3 and says nothing (os._exit(3))"),
    Fault(
        "nan",
        injected.NAN_SIGNAL,
        "diverged",
        "its next loss is NaN (a bad batch): the trainer (--check-loss) stops before the all-reduce spreads it",
        no_script="an unchanged script cannot be made to diverge from outside (the lab's trainer passes its "
        "loss through lab.health.injected_error.poisoned and, with --check-loss, checks it)",
    ),
    Fault(
        "slow",
        injected.STALL_SIGNAL,
        "slow",
        f"every step from then on {injected.STALL_S:g} s longer on this rank: a straggler, the job goes on",
        no_script="a user's script records no busy time, so no straggler is named on it (the lab's trainer "
        "times each step outside its all-reduce: lab/workloads/step_clock.py)",
        ends_job=False,
    ),
    Fault(
        "mismatch",
        signal.SIGUSR1,
        "mismatch",
        "one extra all-reduce on this rank alone, a collective its peers never issue (the lab's collective_loop "
        "workload, under TORCH_DISTRIBUTED_DEBUG=DETAIL: DDP itself cannot run under DETAIL on torch 2.13 CPU)",
        no_script="the extra all-reduce is injected inside the lab's collective_loop workload, a hook your "
        "script lacks",
        workload="collective_loop",
    ),
    Fault(
        "mismatch-no-detail",
        signal.SIGUSR1,
        "mismatch",
        "the same extra all-reduce, without DETAIL: gloo aborts a rank that receives more than it expects, this "
        "one or the one after the sender, so a right card names no rank with confidence, and the class",
        no_script="the extra all-reduce is injected inside the lab's collective_loop workload, a hook your "
        "script lacks",
        workload="collective_loop",
        detail=False,
        settled=False,
    ),
    Fault(
        "partition",
        0,
        "partition",
        "the rank's node cut off the network (every packet in or out of its netns host dropped): both sides time "
        "out; right = the cut node named (its ranks), as the node's round trips to the lab's bridge show it",
        cuts_node=True,
        needs_hosts="netns",
    ),
    Fault(
        "disk-full",
        injected.DISK_FULL_SIGNAL,
        "disk-full",
        "its next checkpoint write finds the disk full (written to /dev/full: the kernel's ENOSPC); the trainer "
        "(rank 0 writes its one checkpoints folder) trains on from its last checkpoint; a script's torch.save raises",
        survived_by=("trainer",),
        save_every=1,
        writer_only=True,
    ),
    Fault(
        "corrupt-checkpoint",
        0,
        "corrupt-checkpoint",
        "the job ends at the step, its newest checkpoint is cut in half (a crash mid-save), and it is run again to "
        "resume: the trainer checks a digest, sets the file aside and resumes from the one before; a script's "
        "torch.load raises on every rank (each reads the same file), so a right card names no rank with "
        "confidence, and the class; the cell's rank is unused",
        survived_by=("trainer",),
        save_every=1,
        settled=False,
        resumes=True,
    ),
    Fault(
        "store-lost",
        0,
        "store-lost",
        "node 0's agent, host of the lab's rendezvous store, SIGKILLed (its ranks die with it): no rank failed of "
        "its own, so a right card names no rank with confidence, and the lost store; the step is the one the agents "
        f"found it at (right within {STORE_NOTICED_WITHIN} steps of the kill); the cell's rank is unused",
        settled=False,
        kills_store=True,
    ),
)
FAULT_NAMES = tuple(f.name for f in FAULTS)


@dataclass(frozen=True)
class Named:
    """What a card names: the rank (None: it names none with confidence), the class, the step."""

    rank: int | None
    kind: str
    step: int | None
    ranks: tuple[int, ...] = ()  # a node named instead of a rank (a cut network): the ranks it holds


def named(card: Card) -> Named:
    first = card.first
    if first is None and card.failed_write and card.failed_write.disk_full:  # the trainer saved on without it
        return Named(card.failed_write.rank, "disk-full", card.failed_write.step)
    if first is None and card.set_aside:  # the trainer resumed from the checkpoint before it
        return Named(None, "corrupt-checkpoint", card.set_aside.step)
    cut = card.slow_network if card.slow_network and card.slow_network.cut else None
    if cut and (first is None or first.consequence or not card.certain):  # no rank failed of its own
        return Named(None, "partition", cut.step, tuple(cut.ranks))
    lost = card.store_loss
    if lost and not lost.went_on and (first is None or first.consequence or not card.certain):
        return Named(None, "store-lost", lost.at_step)  # a coordinator failed, no rank of its own
    if first is None and card.straggler:  # nothing failed, and one rank slowed the rest
        return Named(card.straggler.rank, "slow", card.straggler.since)
    if first is None:
        return Named(None, "unknown", None)
    if any(NEVER_FORMED_NOTE in note for note in card.notes):  # the ranks never connected: no rank's own
        return Named(None, "cannot-connect", first.last_step)
    hung = any(HUNG_NOTE in note for note in card.notes)
    if first.consequence and not hung:
        return Named(None, "unknown", first.last_step)
    if not card.certain:  # the card says so first, and names the class its first failure shows
        return Named(None, "hung" if hung else kind_of(first.how), first.last_step)
    return Named(first.rank, "hung" if hung else kind_of(first.how), first.last_step)


def kind_of(how: str) -> str:
    """The class of fault a card's "how" says: killed, oom, crashed, terminated, exception, exited,
    diverged, mismatch, disk-full, corrupt-checkpoint."""
    if "OOM killer" in how or how.startswith("ran out of memory"):  # killed by the kernel, or its own allocation
        return "oom"
    if how.endswith("(a collective mismatch)"):  # gloo's abort without DETAIL (lab.why.mismatch)
        return "mismatch"
    killed = re.match(r"killed by (SIG\w+)", how)
    if killed:
        name = killed[1]
        return {"SIGKILL": "killed", "SIGTERM": "terminated"}.get(name, "crashed" if name in CRASH_SIGNALS else name)
    if how.startswith("stopped on SIGTERM"):
        return "terminated"
    if how.startswith("ran a different collective"):  # lab.why.mismatch
        return "mismatch"
    if how.endswith("disk full"):  # lab.why.disk_full
        return "disk-full"
    if how.endswith("a damaged checkpoint"):  # lab.why.bad_checkpoint
        return "corrupt-checkpoint"
    if how.startswith("raised FloatingPointError"):  # what a loss check raises on NaN or inf
        return "diverged"
    if how.startswith("raised "):
        return "exception"
    if how.startswith("exited with status"):
        return "exited"
    if how.startswith("exited 0 while its peers"):  # lab.why.card_notes.left_first: uneven inputs, say
        return "left"
    return "unknown"


@dataclass(frozen=True)
class Grade:
    target: str
    fault: str
    rank: int
    step: int  # the target rank's last completed step when the fault was injected
    named_rank: int | None
    named_kind: str
    named_step: int | None
    expect: str
    settled: bool = True  # Fault.settled: False when the evidence cannot say which rank
    named_ranks: tuple[int, ...] = ()  # a node named instead (Named.ranks)

    @property
    def rank_ok(self) -> bool:
        return self.named_rank == self.rank or (self.named_rank is None and self.rank in self.named_ranks)

    @property
    def unknown(self) -> bool:
        return self.named_rank is None and not self.named_ranks

    @property
    def wrong_rank(self) -> bool:
        """A rank (or a node) named with confidence, and not the one that failed first (or holds it)."""
        return (self.named_rank is not None or bool(self.named_ranks)) and not self.rank_ok

    @property
    def kind_ok(self) -> bool:
        return self.named_kind == self.expect

    @property
    def step_ok(self) -> bool:
        """The step in flight when the fault landed, or the one before it (a signal between steps).
        A slowdown shows from the step after: the one in flight may be past its pause already; a
        failed save at the next save; a lost store at the agents' next call on it."""
        late = {"slow": 2, "disk-full": 2, "store-lost": STORE_NOTICED_WITHIN}.get(self.expect, 1)
        return self.named_step is not None and self.step <= self.named_step <= self.step + late

    @property
    def right(self) -> bool:
        """The rank and the class named; where the evidence cannot settle the rank, no rank named
        with confidence and the class named (saying more would be a guess)."""
        return self.kind_ok and (self.rank_ok if self.settled else self.unknown)

    def to_json(self) -> dict:
        keys = ("rank_ok", "kind_ok", "step_ok", "wrong_rank", "unknown", "right")
        return {**asdict(self), **{k: getattr(self, k) for k in keys}}


def grade(target: str, fault: Fault, rank: int, step: int, card: Card) -> Grade:
    """Strict: the rank, the class and the step only as the card itself states them (lab.bench.grading.named)."""
    said = named(card)
    return Grade(
        target, fault.name, rank, step, said.rank, said.kind, said.step, fault.expect, fault.settled, said.ranks
    )
