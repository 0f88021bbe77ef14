"""Stragglers named from step records (lab.health.stragglers), written by the lab's own event writer and
read back as `lab why` reads them; the card's line, the watch view's column, the exporter's
gauge and the step clock's split, each on recorded or constructed steps, in milliseconds.
`lab bench stragglers` (tests/test_stragglers_bench.py) slows real ranks."""

import random
import re

import pytest

from lab.cli.watch import ranks_now
from lab.health import stragglers
from lab.health.events import Event, EventLog, read_events
from lab.health.step_metrics import StepMetrics
from lab.why import card as why
from lab.workloads import step_clock

RANKS = 4


def record(tmp_path, busy_of, steps=60, restart=0):
    """Every rank's steps 1..steps, busy_of(rank, step) seconds each; the records read back."""
    events = tmp_path / "events"
    for rank in range(RANKS):
        log = EventLog(events, rank=rank, local_rank=rank % 2)
        log.restart(restart)
        log.write(Event.START)
        for step in range(1, steps + 1):
            log.step(step, 1.0, 0.05, busy_of(rank, step))
    return list(read_events(events))


def calm(rank, step, seed=0):
    """A clean rank: 0.5-4 ms a step, and a scheduler's hiccup of 0.3 s once in a while (one step
    in 23, at a different step on each rank)."""
    rng = random.Random(hash((seed, rank, step)))
    return 0.3 if (step + 7 * rank + seed) % 23 == 0 else rng.uniform(0.0005, 0.004)


@pytest.mark.parametrize("slow_rank", [0, 2, 3])
@pytest.mark.parametrize("from_step", [11, 17, 30])
def test_a_rank_slowed_from_a_step_is_named_within_a_few_steps(tmp_path, slow_rank, from_step):
    events = record(tmp_path, lambda r, s: 0.25 if r == slow_rank and s > from_step else calm(r, s))
    named = stragglers.first_named(events)
    assert named is not None and named.rank == slow_rank
    assert from_step < named.step <= from_step + 3
    assert named.since == from_step + 1  # its first slow step: what `lab bench diagnosis` grades
    assert f"(slow since step {from_step + 1})" in named.text()
    assert named.score > 10 and set(named.scores) == set(range(RANKS))
    assert stragglers.latest_scores(events)[slow_rank] == max(stragglers.latest_scores(events).values())


@pytest.mark.parametrize("seed", range(20))
def test_clean_ranks_with_hiccups_are_never_named(tmp_path, seed):
    assert stragglers.first_named(record(tmp_path, lambda r, s: calm(r, s, seed))) is None


def test_one_long_step_is_not_a_straggler_but_one_stall_in_three_is(tmp_path):
    once = record(tmp_path / "once", lambda r, s: 0.6 if (r, s) == (1, 30) else 0.002)
    assert stragglers.first_named(once) is None
    every_third = record(tmp_path / "third", lambda r, s: 0.75 if r == 1 and s > 20 and s % 3 == 0 else 0.002)
    named = stragglers.first_named(every_third)
    assert named is not None and named.rank == 1 and named.step <= 30


def test_twice_as_busy_by_a_few_milliseconds_is_noise(tmp_path):
    assert stragglers.first_named(record(tmp_path, lambda r, s: 0.012 if r == 2 else 0.004)) is None


def test_the_steps_a_restart_repeats_are_judged_by_their_newest_records(tmp_path):
    slow_before = record(tmp_path, lambda r, s: 0.3 if r == 1 and s > 20 else 0.002, steps=40)
    again = record(tmp_path, lambda r, s: 0.002, steps=40, restart=1)  # appended: the same steps, all even
    assert stragglers.first_named(slow_before) is not None
    assert stragglers.first_named(again) is None


def test_a_script_that_records_no_busy_time_names_nobody(tmp_path):
    log = EventLog(tmp_path, rank=0, local_rank=0)
    for step in range(1, 40):
        log.write(Event.STEP, step=step, unit="step", source="helper")
    events = list(read_events(tmp_path))
    assert stragglers.first_named(events) is None and stragglers.latest_scores(events) == {}


def test_lab_why_names_the_straggler_on_its_card_and_in_json(tmp_path):
    record(tmp_path, lambda r, s: 0.2 if r == 3 and s > 25 else 0.003)
    card = why.card(tmp_path)
    line = next(line for line in card.text().splitlines() if line.startswith("straggler:"))
    # The facts of the recording: rank 3 slow from step 26 on, named within a few steps of it.
    named = re.search(r"^straggler: rank (\d+), .* named at step (\d+) \(slow since step (\d+)\)", line)
    assert named is not None, line
    assert int(named[1]) == 3 and int(named[3]) == 26 and 26 <= int(named[2]) <= 30, line
    assert "scores per rank: 0: " in line
    assert card.to_json()["straggler"]["rank"] == 3
    record(tmp_path / "even", lambda r, s: 0.003)
    assert "straggler" not in why.card(tmp_path / "even").text()


def test_the_watch_view_scores_every_rank(tmp_path):
    record(tmp_path, lambda r, s: 0.2 if r == 0 and s > 25 else 0.003)
    scores = {r.rank: r.score for r in ranks_now(tmp_path / "events")}
    assert set(scores) == set(range(RANKS)) and scores[0] > 10 and all(scores[r] < 1.5 for r in (1, 2, 3))


def test_the_exporters_gauge_is_the_same_figure_over_the_last_steps():
    metrics = StepMetrics([0.1], [0.1])
    assert not [m for m in metrics.collect() if m.name == "lab_step_busy_seconds"]  # no busy time, no gauge
    for step, busy in enumerate([0.9] * 5 + [0.001] * 9 + [0.5], 1):
        metrics.step_done(step, 0.05, 8, 1.0, busy)
    gauge = next(m for m in metrics.collect() if m.name == "lab_step_busy_seconds")
    assert gauge.samples[0].value == pytest.approx(stragglers.typical([0.001] * 9 + [0.5]))
    assert gauge.samples[0].value == pytest.approx(0.001)  # the window's slowest step left out


def test_the_step_clock_leaves_out_the_all_reduce_span(monkeypatch):
    now = iter([10.0, 10.5])  # the step starts at 10.0 and is asked at 10.5
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: next(now))
    clock = step_clock.StepClock()
    clock.step_started()
    clock.allreduce_launched(10.1)
    clock.allreduce_launched(10.2)  # a second bucket: the span starts at the first
    clock.allreduce_done(10.35)
    clock.allreduce_done(10.3)  # completions out of order: the span ends at the last
    assert clock.busy() == pytest.approx(0.25)


def test_a_pacing_sleep_that_overran_counts_as_busy(monkeypatch):
    """A rank stopped while it slept to its pace (the straggler drill's SIGSTOP) is late by that much."""
    now, slept = iter([10.0, 10.01, 10.3, 20.0, 20.01, 20.05]), []
    monkeypatch.setattr(step_clock.time, "perf_counter", lambda: next(now))
    monkeypatch.setattr(step_clock.time, "sleep", slept.append)
    clock = step_clock.StepClock()
    clock.step_started()
    assert clock.pace(0.05) == pytest.approx(0.25) and slept == [pytest.approx(0.04)]
    clock.step_started()
    assert clock.pace(0.05) == pytest.approx(0.0)  # on time
