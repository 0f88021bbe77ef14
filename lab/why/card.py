"""The first-failure card: which rank failed first, how, where in its script, and what the others did.

Read from what a run dir holds: the agents' `lab.failure_detected` records (the moment
each agent saw its workers fail, with every failed rank's exit code and pid), the ranks'
event logs (last step, and the exception a watched script died of), and the node logs
(each failed rank's Python traceback, which torch prefixes with `[rankN]:`, and the pids
torchrun itself sent SIGTERM). A rank killed by a signal nobody in the job sent, or one
that raised something other than a peer's disconnect or timeout, is the cause; the rest
are consequences and are listed after it.
"""

from __future__ import annotations

import re
import signal
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lab import files
from lab.health import net_probe
from lab.health.events import AgentEvent, Event, ExitReason, agent_failures, read_agent_events, read_events, read_probes
from lab.health.stragglers import SlowNetwork, Straggler, first_named, first_slow_network
from lab.node_log import SIGTERM_SENT, bare_errors, native_aborts, own_frame, tracebacks
from lab.why import bad_checkpoint, disk_full, doctor_note
from lab.why.card_notes import (
    hung_ranks,
    left_first,
    never_formed,
    node_workers,
    note_a_shared_error,
    note_no_cause,
    note_the_first_error,
)
from lab.why.evidence import LOG_TAIL_BYTES
from lab.why.failure_card import Card, RankFailure
from lab.why.lost_store import StoreLoss
from lab.why.lost_store import found as store_lost
from lab.why.mismatch import odd_rank, unsettled
from lab.why.unranked import CONSEQUENCE, aborted_by, mute_ranks_note, printed_by

# An allocation that failed in the rank itself: torch's (GPU) OutOfMemoryError, an older
# torch's "CUDA out of memory" RuntimeError, Python's MemoryError, C++'s bad_alloc.
OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|CUDA out of memory|^MemoryError\b|std::bad_alloc")


def describe(code: int | None, pid: int | None, terminated_by_agent: set[int]) -> str:
    if code is None:
        return "failed"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        by = " from torchrun's agent, stopping the group" if pid in terminated_by_agent else ""
        return f"killed by {name}{by}"
    return f"exited with status {code}"


@dataclass
class Evidence:
    """What a run dir (or a failed job's kept evidence, lab.why.evidence) says, read once."""

    agents: list[dict]  # the agents' lab.failure_detected records
    traces: dict[int, tuple[str, str]]  # rank -> (error, where) from the node logs
    terminated: set[int]  # pids torchrun's agents sent SIGTERM
    raised: dict[int, dict]  # rank -> its exit event, for ranks that died of an exception
    steps: dict[int, int]  # rank -> its last step
    skipped: list[str] = field(default_factory=list)  # "rank1.jsonl: 2 lines" not read as records
    preempted: dict[int, dict] = field(default_factory=dict)  # rank -> its exit event, stopped on SIGTERM
    straggler: Straggler | None = None
    slow_network: SlowNetwork | None = None
    store_loss: StoreLoss | None = None
    failed_write: disk_full.FailedWrite | None = None
    set_aside: bad_checkpoint.SetAside | None = None
    native: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node -> its log's native aborts
    bare: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # node -> errors printed with no rank


def read_evidence(run_dir: Path) -> Evidence:
    events_dir, skipped = run_dir / "events", list[str]()
    every_agent_event = read_agent_events(events_dir, skipped) if events_dir.is_dir() else []
    agents = [a for a in every_agent_event if a["name"] == AgentEvent.FAILURE_DETECTED]
    ranks = list(read_events(events_dir, skipped)) if events_dir.is_dir() else []
    found = Evidence(agents, {}, set(), {}, {}, skipped)
    for log in sorted((run_dir / "nodes").glob("*/node.log")):
        text = files.read_text(log, LOG_TAIL_BYTES, tail=True) or ""  # the node's: no link, no FIFO, bounded
        found.traces.update(tracebacks(text))
        found.terminated |= {int(pid) for pid, _ in SIGTERM_SENT.findall(text)}
        found.native[log.parent.name] = native_aborts(text)
        found.bare[log.parent.name] = bare_errors(text)
    exits = [e for e in ranks if e["event"] == Event.EXIT]
    found.raised = {e["rank"]: e for e in exits if e.get("reason") == ExitReason.EXCEPTION}
    found.preempted = {e["rank"]: e for e in exits if e.get("reason") == ExitReason.PREEMPTED}
    for e in ranks:
        if e["event"] == Event.STEP:
            found.steps[e["rank"]] = max(found.steps.get(e["rank"], e["step"]), e["step"])
    found.straggler = first_named(ranks)
    found.failed_write = disk_full.first_failed_write(ranks)
    found.set_aside = bad_checkpoint.first_set_aside(ranks)
    found.slow_network = first_slow_network(read_probes(events_dir, skipped), ranks, net_probe.TIMEOUT_S)
    steps = [(e["time"], e["step"]) for e in ranks if e["event"] == Event.STEP]
    found.store_loss = store_lost(every_agent_event, steps, run_dir / "nodes")
    return found


def reported_failures(found: Evidence) -> list[RankFailure]:
    """Every failed rank an agent reported, once each, with how it failed."""
    failures: list[RankFailure] = []
    seen: set[tuple[int, int | None]] = set()
    for record in found.agents:
        for rank, info in agent_failures(record["event"]):
            if (rank, info.get("pid")) in seen:
                continue
            seen.add((rank, info.get("pid")))
            failure = RankFailure(rank, record["node"], info.get("local_rank"), record["time"], info.get("exitcode"))
            failure.pid = info.get("pid")
            event = found.raised.get(rank)
            if event and (failure.pid is None or event.get("pid") == failure.pid):
                failure.error, failure.where = str(event.get("error", "")), str(event.get("where", ""))
                failure.time = event["time"]
            elif info.get("error"):  # torchelastic's error file, as the agent read it
                failure.error, failure.where = info["error"], own_frame(info.get("traceback", ""))
            elif rank in found.traces:
                failure.error, failure.where = found.traces[rank]
            failure.how, failure.consequence = how_it_failed(failure, found.terminated)
            failure.last_step = found.steps.get(rank)
            failures.append(failure)
    for node, aborts in found.native.items():
        for failure, said in aborted_by(failures, node, aborts, found.terminated):
            failure.error, failure.where = said
    for node, bare in found.bare.items():
        for failure, printed in printed_by(failures, node, bare, found.terminated):
            failure.error, failure.where = printed
            failure.how, failure.consequence = how_it_failed(failure, found.terminated)
    return failures


def how_it_failed(failure: RankFailure, terminated: set[int]) -> tuple[str, bool]:
    """(how, whether it is a peer's consequence). An exception of the rank's own is the cause even
    when the rank then hung on its way out and torchrun had to stop it (measured once in `lab
    bench diagnosis`: the peers timed out first, and the card called the raising rank a
    consequence of the group's stop)."""
    stopped = describe(failure.exit_code, failure.pid, terminated)
    consequence = bool(CONSEQUENCE.search(failure.error)) or failure.pid in terminated
    if failure.error and (failure.exit_code or 0) > 0:
        if disk_full.full(failure.error):
            return disk_full.how(failure.error), False
        if bad_checkpoint.damaged(failure.error):
            return bad_checkpoint.how(failure.error), False
        if OUT_OF_MEMORY.search(failure.error):  # its own allocation failed: out of memory, not a bug of its code
            return f"ran out of memory: raised {failure.error.split(':')[0]}", False
        return f"raised {failure.error.split(':')[0]}", consequence
    # Its own exception came first when torchrun then stopped it, or when it died of a signal on
    # its way out: an uncaught exception with gloo's threads still running can end in SIGABRT
    # (`lab bench natural`: every rank diverging was once called a native crash for it).
    dying = failure.pid in terminated or (failure.exit_code or 0) < 0
    if failure.error and not CONSEQUENCE.search(failure.error) and dying:
        return f"raised {failure.error.split(':')[0]}, then was {stopped}", False
    return stopped, consequence


def card(run_dir: Path, kernel: Callable[[], str] | None = None) -> Card:
    """The card for everything the run dir's events and logs say. kernel: the kernel's log
    (default: /dev/kmsg, read only when a rank died of a SIGKILL nobody in the job sent)."""
    found = read_evidence(run_dir)
    failures = reported_failures(found)
    failures += stopped_by_the_agent(run_dir, failures, found.terminated, found.steps)
    per_node = Counter(a["node"] for a in found.agents)  # every node's agent reports each failed round
    rounds = max(per_node.values(), default=0)
    result = Card(first=None, rounds=rounds, straggler=found.straggler, slow_network=found.slow_network)
    result.notes += doctor_note.notes(run_dir)
    result.store_loss, result.failed_write = found.store_loss, found.failed_write
    result.set_aside = found.set_aside
    if found.skipped:
        result.notes.append(
            f"left out what is not a record of this lab's (a torn last line, another program's output, an older "
            f"lab's shape): {', '.join(found.skipped)}"
        )
    if not failures:
        result.first = preempted_first(found, result.notes)
        return result
    failures.sort(key=lambda f: f.time)
    if settled_by_a_mismatch(result, failures):
        return result
    causes = [f for f in failures if not f.consequence]
    # A signal or an exception of its own says what happened; a bare exit status does not, and
    # agents notice their ranks' exits in their own time: such a rank is first only if it is alone.
    said = [f for f in causes if f.error or (f.exit_code or 0) < 0]
    # A rank with nothing to say of its own that torchrun had to stop, while its peers failed waiting
    # (in a group that formed: ranks that never connected waited for no one).
    formed = never_formed(result, failures) if not causes else None
    silent = [] if formed else hung_ranks([f for f in failures if not f.error and f.pid in found.terminated])
    left = left_first(run_dir, failures, found.terminated) if not causes and not silent and not formed else []
    if len(left) == 1:  # it left, and its peers failed waiting for it
        failures.insert(0, left[0])
        causes = said = left
        result.notes.append(LEFT_FIRST)
    result.first = said[0] if said else causes[0] if causes else formed or (silent[0] if silent else failures[0])
    if not said and len(causes) > 1:
        result.certain = False
        result.notes.append(mute_ranks_note(causes, found.bare))
    damaged = [f.rank for f in said if bad_checkpoint.damaged(f.error)]
    if len(damaged) > 1:  # each read the same file: no rank of them is the cause
        result.certain = False
        result.notes.append(bad_checkpoint.note(damaged))
    else:
        note_a_shared_error(result, said)
    result.then = [f for f in failures if f is not result.first][:8]
    # A rank its own agent noticed late (a kill, a hang stopped at last) failed no later than the
    # first of those that failed of it: the others' times are then never before it.
    result.first.time = failures[0].time
    if not causes and not formed:
        note_no_cause(result, silent, found.store_loss, found.slow_network)
    note_the_first_error(result, found.terminated, kernel)
    return result


LEFT_FIRST = (
    "it left the job while its peers still ran, and they failed waiting for it in a collective: uneven "
    "inputs (its data ran out first), an early return or break on one rank; give every rank the same number "
    "of steps (DistributedSampler with drop_last, or DDP's join() context manager)"
)


def settled_by_a_mismatch(result: Card, failures: list[RankFailure]) -> bool:
    """True when the ranks' errors name the odd rank of a collective mismatch (lab.why.mismatch): it
    comes first, however late its agent saw it, as every other rank failed because of it. Where
    they report a mismatch but name no rank, or one with no record of its end, the card is not
    certain of whichever rank it puts first."""
    errors = {f.rank: f.error for f in failures if f.error}
    mismatch = odd_rank(errors)
    odd = next((f for f in failures if mismatch and f.rank == mismatch.rank), None)
    if mismatch and odd:
        odd.how, odd.consequence = mismatch.how(), False
        result.first, result.then = odd, [f for f in failures if f is not odd][:8]
        for other in result.then:
            other.consequence = True
        odd.time = failures[0].time
        return True
    note = f"rank {mismatch.rank} {mismatch.how()}, but no record of its end was found" if mismatch else ""
    if note or unsettled(errors):
        result.certain = False
        result.notes.append(note or unsettled(errors))
    return False


def preempted_first(found: Evidence, notes: list[str]) -> RankFailure | None:
    """A job that stopped on a SIGTERM, every rank at one agreed step (the trainer's preemption):
    the rank the signal reached first, or the lowest of those it reached, is named."""
    told = sorted(rank for rank, e in found.preempted.items() if e.get("signalled"))
    if not told:
        return None
    event = found.preempted[told[0]]
    step = event.get("step")
    notes.append(
        f"no rank failed: SIGTERM reached rank{'s' if len(told) > 1 else ''} {', '.join(map(str, told))}, and "
        f"ranks {', '.join(map(str, sorted(found.preempted)))} checkpointed step {step} together and stopped"
    )
    stopped = RankFailure(told[0], str(event.get("node", "")), event.get("local_rank"), event["time"], 0)
    stopped.pid, stopped.last_step = event.get("pid"), step if isinstance(step, int) else None
    stopped.how = "stopped on SIGTERM (a preemption), after a checkpoint"
    return stopped


def stopped_by_the_agent(
    run_dir: Path, failures: list[RankFailure], terminated: set[int], steps: dict[int, int]
) -> list[RankFailure]:
    """Ranks still running when their group failed, which torchrun then stopped (SIGTERM): a
    hung rank looks like this. Their pids are in each node's workers file; the rank is the
    node's first rank (known from a failure on it) plus the local rank."""
    found = []
    known = {f.pid for f in failures}
    for node, rank, local_rank, pid in node_workers(run_dir, failures):
        if pid in terminated and pid not in known:
            detected = min(f.time for f in failures if f.node == node)
            failure = RankFailure(rank, node, local_rank, detected, None, pid=pid, consequence=True)
            failure.how = "stopped by torchrun's agent (SIGTERM) after its group failed"
            failure.last_step = steps.get(rank)
            found.append(failure)
    return found
