"""Stragglers named from the ranks' step records, with a relative score per rank.

In DDP every rank's step lasts as long as the slowest rank's, so a straggler shows only in
busy time: the seconds of a step a rank spends outside the gradient all-reduce (the trainer
records it with each step, lab.workloads.step_clock). A rank's busy figure over a window of
WINDOW steps is their mean less the slowest step (`typical`); its score is that over the
mean of the other ranks' figures for the same steps: 1 is like the others, 4 is four times as
busy. A rank is named once its score reaches RATIO and it is busy MARGIN_S a step longer than
the others (a 3 ms step twice as long as a 1.5 ms one is noise, not a straggler).

Why that figure: one step the machine's scheduler delayed by 0.2 s would move a plain mean
over ten steps by 0.02 s, and a clean run would name a rank; a median would miss a rank
that stalls one step in three (a rank stopped 0.75 s of every second: the straggler drill).
Dropping the slowest step forgives the one and keeps the other.

The same score is a metric (the Prometheus rule `lab:straggler_score` over each rank's
`lab_step_busy_seconds`, the same figure over its last WINDOW steps), a column of the live
view and of `lab status --watch`, and a line of `lab why`. `lab bench stragglers` measures how
soon it names a slowed rank and how often it names one in a clean run.

A slow network is the one straggler busy time cannot see (every rank waits longer in the
all-reduce, the slow node's too): it is named on its node from round trips to a host outside
the job (lab.health.net_probe), by first_slow_network below.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from statistics import mean, median

from lab.health.events import Event

WINDOW = 10
RATIO = 2.0
MARGIN_S = 0.02


@dataclass(frozen=True)
class Straggler:
    rank: int
    step: int  # the last step of the first window that named it
    score: float
    busy_s: float  # its busy seconds a step in that window (typical())
    others_s: float  # the other ranks' mean of theirs
    scores: dict[int, float]  # every rank's score in that window
    since: int | None = None  # the first of its latest run of slow steps in that window (onset)

    def text(self) -> str:
        per_rank = ", ".join(f"{rank}: {score:.1f}" for rank, score in sorted(self.scores.items()))
        since = f" (slow since step {self.since})" if self.since is not None else ""
        return (
            f"straggler: rank {self.rank}, busy {self.busy_s:.3f} s a step outside the all-reduce against "
            f"{self.others_s:.3f} s for the others (score {self.score:.1f}), named at step {self.step}{since}; "
            f"scores per rank: {per_rank}"
        )


def busy_by_step(events: Iterable[dict]) -> dict[int, dict[int, float]]:
    """step -> rank -> busy seconds (the latest record of a step a restart repeated)."""
    found: dict[int, dict[int, float]] = {}
    for e in events:
        busy = e.get("busy")
        if e["event"] == Event.STEP and isinstance(busy, (int, float)) and not isinstance(busy, bool):
            found.setdefault(e["step"], {})[e["rank"]] = float(busy)
    return found


def typical(busy: list[float]) -> float:
    """The mean of a window's busy seconds less its slowest step (all of one step alone)."""
    return (sum(busy) - max(busy)) / (len(busy) - 1) if len(busy) > 1 else sum(busy)


def scores(window: list[dict[int, float]]) -> dict[int, tuple[float, float, float]]:
    """rank -> (score, its busy figure, the others' mean figure) over the window's steps."""
    figures = {rank: typical([step[rank] for step in window]) for rank in window[0]}
    result = {}
    for rank, busy in figures.items():
        others = mean(b for r, b in figures.items() if r != rank)
        result[rank] = (busy / others if others > 0 else float("inf") if busy > 0 else 1.0, busy, others)
    return result


def windows(events: Iterable[dict]) -> list[tuple[int, list[dict[int, float]]]]:
    """(last step, WINDOW steps' busy times) for every run of WINDOW consecutive steps every rank
    recorded; the ranks are those of the step the window ends on."""
    by_step = busy_by_step(events)
    found = []
    for last in sorted(by_step):
        ranks = set(by_step[last])
        steps = [by_step.get(s, {}) for s in range(last - WINDOW + 1, last + 1)]
        if len(ranks) > 1 and all(set(s) == ranks for s in steps):
            found.append((last, steps))
    return found


def first_named(events: Iterable[dict]) -> Straggler | None:
    """The first window in which one rank is the straggler, or None."""
    for last, window in windows(events):
        scored = scores(window)
        slow = [r for r, (score, busy, others) in scored.items() if score >= RATIO and busy - others >= MARGIN_S]
        if slow:
            rank = max(slow, key=lambda r: scored[r][0])
            score, busy, others = scored[rank]
            since = onset(window, rank, last)
            return Straggler(rank, last, score, busy, others, {r: s[0] for r, s in scored.items()}, since)
    return None


def onset(window: list[dict[int, float]], rank: int, last: int) -> int | None:
    """The first step of the latest run of the rank's slow steps in the window: a slowdown that
    stays (a sleep in each step) from its first step on; one earlier hiccup does not count."""
    slow = [slow_in(step, rank) for step in window]
    end = max((i for i, is_slow in enumerate(slow) if is_slow), default=None)
    if end is None:
        return None
    start = end
    while start > 0 and slow[start - 1]:
        start -= 1
    return last - len(window) + 1 + start


def slow_in(step: dict[int, float], rank: int) -> bool:
    """The rank was busy RATIO x the others' mean and MARGIN_S more in this one step."""
    others = mean(b for r, b in step.items() if r != rank)
    return step[rank] >= RATIO * others and step[rank] - others >= MARGIN_S


def latest_scores(events: Iterable[dict]) -> dict[int, float]:
    """rank -> its score over the last WINDOW steps every rank recorded ({} before there are any)."""
    found = windows(events)
    return {rank: s[0] for rank, s in scores(found[-1][1]).items()} if found else {}


# A slow network: each node's round trip to a host outside the job (lab.health.net_probe).
CUT_PROBES = 2  # unanswered in a row (5 s: each waits out its timeout) while the others answer: cut off
NET_WINDOW = 5  # probes (two and a half seconds): an odd count, so the median is a probe's own
NET_MARGIN_S = 0.005


@dataclass(frozen=True)
class SlowNetwork:
    node: str
    ranks: list[int]  # the ranks it holds, as their step records say
    step: int | None  # the newest step any rank had recorded when it was named
    score: float
    rtt_s: float  # its median round trip over the window
    others_s: float  # the other nodes' mean of theirs
    per_node: dict[str, float]
    cut: bool = False  # its last CUT_PROBES probes got no answer while the others' did: cut off, not slow

    def text(self) -> str:
        ranks = f" (ranks {', '.join(map(str, self.ranks))})" if self.ranks else ""
        if self.cut:
            return (
                f"network cut: {self.node}{ranks}, its last round trips to the lab's bridge got no answer, "
                f"from step {self.step} (a partition, a link down); the other nodes' took {self.others_s * 1000:.1f} ms"
            )
        per_node = ", ".join(f"{node}: {rtt * 1000:.1f} ms" for node, rtt in sorted(self.per_node.items()))
        return (
            f"slow network: {self.node}{ranks}, round trip to the lab's bridge {self.rtt_s * 1000:.1f} ms against "
            f"{self.others_s * 1000:.1f} ms for the other nodes (score {self.score:.1f}), named at step {self.step}; "
            f"per node: {per_node}"
        )


def first_slow_network(
    probes: list[dict], events: list[dict], timeout_s: float = 2.0, cut_first: bool = True
) -> SlowNetwork | None:
    """The first moment one node's last NET_WINDOW round trips (a probe with no answer counts
    as its timeout) are RATIO times the other nodes' and NET_MARGIN_S longer, or None. With
    cut_first, a node cut off later (its last CUT_PROBES probes unanswered while every other
    node's last one was) is named as cut instead: a cut first shows as a slow window, and a job
    whose peers time out ends before a whole window of unanswered probes."""
    first = None
    for at, window in probe_windows(probes, timeout_s):
        medians = {node: median(rtts) for node, rtts in window.items()}
        for node, mine in medians.items():
            others = mean(m for n, m in medians.items() if n != node)
            silent = all(rtt >= timeout_s for rtt in window[node][-CUT_PROBES:])
            cut = silent and all(w[-1] < timeout_s for n, w in window.items() if n != node)
            slow = mine >= RATIO * others and mine - others >= NET_MARGIN_S
            if not (slow or (cut and cut_first)):
                continue
            steps = [e["step"] for e in events if e["event"] == Event.STEP and e["time"] <= at]
            ranks = sorted({e["rank"] for e in events if e.get("node") == node})
            score = mine / others if others > 0 else float("inf")
            found = SlowNetwork(node, ranks, max(steps, default=None), score, mine, others, medians, cut)
            if cut or not cut_first:
                return found
            first = first or found  # slow, not cut: kept while a later window may show the cut
    return first


def probe_windows(probes: list[dict], timeout_s: float) -> Iterator[tuple[float, dict[str, list[float]]]]:
    """(time, each node's last NET_WINDOW round trips) after each probe, once every node has that many."""
    recent: dict[str, deque[float]] = {}
    for probe in sorted(probes, key=lambda p: p["time"]):
        rtt = probe.get("rtt")
        answered = float(rtt) if isinstance(rtt, (int, float)) and not isinstance(rtt, bool) else timeout_s
        recent.setdefault(str(probe["node"]), deque(maxlen=NET_WINDOW)).append(answered)
        if len(recent) >= 2 and all(len(r) == NET_WINDOW for r in recent.values()):
            yield probe["time"], {node: list(r) for node, r in recent.items()}
