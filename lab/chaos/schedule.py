"""A chaos campaign's faults: which kinds there are, the mix a user names, and the seeded
schedule drawn from it (the same seed replays the same schedule).

Each kind is declared once: what it does to the job, and the Node faults it needs (so the
runtime's refusal, lab.exercises.grid, speaks for a kind it cannot inject). Two kinds land
inside a recovery: a second kill while the survivors regroup, and a kill just after a
checkpoint save began.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from lab.errors import LabError
from lab.options import Option, count


@dataclass(frozen=True)
class Kind:
    name: str
    summary: str
    injects: tuple[str, ...]  # Node faults (lab.runtimes.faults) it uses
    in_recovery: bool = False  # its second blow lands inside the first one's recovery
    kills: bool = True  # every rank it hits is a new process afterwards (a partition need not be)
    cuts_network: bool = False  # needs nodes with networks of their own (Runtime.network_fault_refusal)
    loses_a_node: bool = False  # a node SIGKILLed whole: node 0's loss ends the job (campaign.loses_the_job)
    stops_the_job: bool = False  # every rank stops; the campaign starts the job again, as a scheduler would
    stalls: bool = False  # the job goes on, slower: the ledger counts its time as a stall, not a recovery


KINDS = {
    k.name: k
    for k in (
        Kind("kill-worker", "SIGKILL one rank's process", ("kill_worker",)),
        Kind("hang-worker", "SIGSTOP one rank: it hangs, and its peers wait on it", ("pause_worker", "kill_worker")),
        Kind(
            "kill-node",
            "SIGKILL a node's agent and every worker at once (a machine lost), then start it again 1 s later",
            ("kill_node", "restart"),
            loses_a_node=True,
        ),
        Kind(
            "preempt-node",
            "SIGTERM one node with a grace period (a VM reclaimed); the job stops at an agreed step, "
            "checkpointed, and is started again, as a scheduler would",
            ("preempt",),
            stops_the_job=True,
        ),
        Kind(
            "partition-node",
            "drop all of one node's traffic for 6 s, then heal it: its peers' collectives and its keeper's "
            "or agent's store calls block on a silent network",
            ("partition", "heal"),
            kills=False,
            cuts_network=True,
        ),
        Kind(
            "lose-store",
            "SIGKILL node 0 whole, which holds the job's store (the rendezvous store, or the in-process keepers'): "
            "every node loses it and the job ends; the campaign starts it again whole, as a scheduler would",
            ("kill_node",),
            loses_a_node=True,
        ),
        Kind(
            "kill-in-regroup",
            "SIGKILL one rank, then another 50 ms later, while the survivors regroup",
            ("kill_worker",),
            in_recovery=True,
        ),
        Kind(
            "kill-after-save",
            "SIGKILL one rank just after a checkpoint save began (steps at the save interval)",
            ("kill_worker",),
            in_recovery=True,
        ),
        # Named in --mix only (DEFAULT_MIX keeps the documented campaigns' schedules as they are):
        Kind("rank-exception", "one rank raises a RuntimeError from inside its step", ("kill_worker",)),
        Kind(
            "hang-in-python",
            "one rank waits for ever in Python, as on a queue that never answers (its other threads run on); "
            "its peers wait on it until the process group's timeout",
            ("kill_worker",),
        ),
        Kind(
            "slow-rank",
            "one rank stopped three quarters of every 0.2 s for 8 s, then let go: a straggler, "
            "which the job rides out without a recovery",
            ("slow_worker", "unslow_worker"),
            kills=False,
            stalls=True,
        ),
        Kind(
            "corrupt-checkpoint",
            "the newest checkpoint cut short while one rank is stopped, then that rank SIGKILLed: a restart "
            "must set the damaged file aside and resume from the one before (in-process, a peer's state serves)",
            ("pause_worker", "corrupt_checkpoint", "kill_worker"),
        ),
        Kind(
            "kill-replacement",
            "SIGKILL one rank, then the process that takes its place as soon as it runs (a spare taking a "
            "peer's state, or the restarted worker loading the checkpoint)",
            ("kill_worker",),
            in_recovery=True,
        ),
        Kind(
            "lose-node-in-restart",
            "SIGKILL one rank, then 50 ms later a whole node other than node 0 (the store's), started again 1 s "
            "later: a machine lost while the job recovers",
            ("kill_worker", "kill_node", "restart"),
            in_recovery=True,
            loses_a_node=True,
        ),
        Kind(
            "kill-in-save",
            "rank 0's next checkpoint save pauses midway (storage that stalls), and a SIGKILL lands inside it: "
            "the restart must resume from the newest whole checkpoint",
            ("kill_worker",),
            in_recovery=True,
        ),
    )
}
# The campaign's flags (lab chaos, lab bench chaos): declared once, here, with the schedule they draw.
COUNT = Option("--count", "how many faults (or --duration); --faults N is the same", type=count, aliases=("--faults",))
MTBF = Option("--mtbf", "the mean time between faults (default %(default)s)", "20s")
SEED = Option("--seed", "the schedule's seed: the same seed, the same faults (default %(default)s)", 1, int)
LOAD = Option("--load", "busy processes beside the job (default %(default)s)", 0, int)


def check_load(load: int) -> int:
    """--load, or one line saying what is wrong with it."""
    if load < 0:
        raise LabError(f"--load must be 0 or more, got {load}")
    return load


DEFAULT_MIX = {
    "kill-worker": 4,
    "hang-worker": 1,
    "kill-node": 1,
    "preempt-node": 1,
    "partition-node": 1,
    "lose-store": 1,
    "kill-in-regroup": 2,
    "kill-after-save": 1,
}
DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)?$")
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


@dataclass(frozen=True)
class Planned:
    at_s: float  # seconds after the job's first step
    kind: str
    rank_draw: float  # in [0, 1): which rank, once the world is known
    second_draw: float  # in [0, 1): the second rank of a double blow


def seconds(text: str, flag: str) -> float:
    """A duration like 20s, 1.5m, 500ms or 30 (seconds); above 0, or one line naming the flag."""
    match = DURATION.match(text.strip())
    if not match:
        raise LabError(f"{flag} {text!r} is not a duration (like 20s, 2m, 500ms)")
    value = float(match[1]) * UNITS[match[2]]
    if value <= 0:
        raise LabError(f"{flag} must be above 0, got {text}")
    return value


def parse_mix(text: str | None, refused: dict[str, str] | None = None) -> dict[str, int]:
    """--mix kill-worker=4,hang-worker=1 (a name alone weighs 1); by default every kind this
    runtime can inject. refused: kind -> why this runtime cannot, named in --mix or not."""
    refused = refused or {}
    if not text:
        return {name: weight for name, weight in DEFAULT_MIX.items() if name not in refused}
    mix: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        name, _, weight = part.partition("=")
        if name not in KINDS:
            raise LabError(f"--mix: unknown fault {name!r}; choose from {', '.join(KINDS)}")
        if weight and not weight.isdigit():
            raise LabError(f"--mix: {name}={weight}: a weight is a whole number")
        if name in mix:
            raise LabError(f"--mix: {name} is named twice; give it once, with its weight")
        if name in refused and weight != "0":
            raise LabError(f"--mix: {name} cannot run here: {refused[name]}")
        mix[name] = int(weight or 1)
    if not mix or not any(mix.values()):
        raise LabError(f"--mix names no fault with a weight above 0; choose from {', '.join(KINDS)}")
    return mix


def draw(
    mix: dict[str, int], mtbf_s: float, seed: int, *, count: int | None, duration_s: float | None
) -> list[Planned]:
    """Faults at exponential inter-arrival times of mean mtbf_s, each kind by its weight: `count`
    of them, or as many as fall within duration_s. Never two within MIN_GAP_S: the campaign
    judges one fault's recovery before the next (a kind of its own puts two in one recovery)."""
    if count is None and duration_s is None:
        raise LabError("say how long: --count N or --duration D")
    rng = random.Random(seed)
    names = sorted(n for n, w in mix.items() if w > 0)
    weights = [mix[n] for n in names]
    planned: list[Planned] = []
    at = 0.0
    while count is None or len(planned) < count:
        at += max(MIN_GAP_S, rng.expovariate(1.0 / mtbf_s))
        if duration_s is not None and at > duration_s:
            break
        planned.append(Planned(round(at, 3), rng.choices(names, weights)[0], rng.random(), rng.random()))
    if not planned:
        raise LabError(f"--duration {duration_s:g}s is too short for one fault at --mtbf {mtbf_s:g}s")
    return planned


MIN_GAP_S = 2.0
