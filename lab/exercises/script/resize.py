"""A user's script on an elastic job whose world changed under it: `kill-node --elastic` (the node
stays dead, the survivors go on with fewer ranks) and `--elastic --rejoin` (it comes back and the
job grows again). What the verdict on such a run adds to a restart's: the world sizes the groups
formed with, which nodes had to finish, and why its result is not compared with a fault-free run's.

The script is the user's, unchanged: it resumes from its own checkpoint at whatever WORLD_SIZE
torchrun gives it. A DDP job at another world size averages its gradients over other ranks, so
its result differs from the reference's by design, not by a fault's damage.
"""

from __future__ import annotations

from dataclasses import replace

from lab.exercises import observe, samples
from lab.exercises.seen import Seen
from lab.report import Report


def elastic(seen: Seen) -> bool:
    return seen.topology.min_nodes is not None


def lost_for_good(seen: Seen) -> set[str]:
    """The nodes the fault left dead on an elastic job (the job is to go on without them)."""
    fault = seen.extra.get("fault") or {}
    return {fault["node"]} if fault.get("lost_for_good") else set()


def expected_to_finish(seen: Seen) -> dict[str, int | None]:
    """The exit codes of the nodes that had to end well: all but those lost for good."""
    gone = lost_for_good(seen)
    return {node: code for node, code in seen.codes.items() if node not in gone}


def after_fault(seen: Seen) -> list[dict]:
    """The run's events after the fault ([] where none fired)."""
    fault = seen.extra.get("fault")
    return [e for e in seen.events if e["time"] > fault["time"]] if fault else []


def worlds_after(seen: Seen) -> list[int]:
    """The sizes the groups formed with after the fault, in turn ([] where none fired)."""
    return observe.world_sizes_in_turn(after_fault(seen))


def check(report: Report, seen: Seen) -> None:
    """On an elastic job: it went on with the ranks it had (and, with --rejoin, grew back), judged
    as on the lab's trainer (observe.check_resized); after samples.check, whose failure across a
    change of size it explains."""
    if not elastic(seen):
        return
    observe.check_resized(report, seen.topology, after_fault(seen), rejoined=not lost_for_good(seen))
    grew = worlds_after(seen)
    report.facts["world_sizes_after"] = grew
    if any(size != seen.topology.world_size for size in grew):
        advise_on_samples(report, seen, grew)


SAMPLES_ADVICE = (
    "; the job's world changed ({sizes}): a place in the epoch kept per rank (a step count, a "
    "sampler's offset) deals other samples at another world size: keep how many samples the whole job "
    "consumed, and skip that many of the epoch's order before dealing the rest to the ranks there are"
)


def advise_on_samples(report: Report, seen: Seen, grew: list[int]) -> None:
    """Where the script's samples were skipped or repeated across a change of size, say the likely
    reason with the count (samples.check made the check; lab.exercises.samples)."""
    for i, found in enumerate(report.checks):
        if found.name == samples.CHECK and not found.ok:
            sizes = " -> ".join(map(str, [seen.topology.world_size, *grew]))
            report.checks[i] = replace(found, detail=found.detail + SAMPLES_ADVICE.format(sizes=sizes))


def not_comparable(seen: Seen) -> str:
    """Why the result is not judged against the reference's ("" where it is): the job trained
    at another world size for a while."""
    if not elastic(seen):
        return ""
    grew = worlds_after(seen)
    if all(size == seen.topology.world_size for size in grew):
        return ""
    return (
        f"the job trained on {' then '.join(map(str, grew))} ranks after the kill, the reference on "
        f"{seen.topology.world_size}: DDP averages over the ranks it has, so the result differs by design"
    )
