"""lab chaos: the seeded schedule, the flags' refusals, and the ledger on recorded progress."""

from __future__ import annotations

import json
import statistics

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.chaos import ledger, schedule
from lab.chaos.campaign import Blow
from lab.chaos.progress import Progress
from lab.errors import LabError
from lab.health import tail as tail_module
from lab.workloads import script_path

PLAIN = script_path("plain_train")


def test_the_default_mix_is_every_kind_this_runtime_can_inject_and_a_named_one_it_cannot_is_refused():
    """Loopback nodes share one network: no partition in the default mix, and a mix that names one
    is one line; a weight of 0 names it away. The kinds added after the documented campaigns were
    published come when named, so those campaigns' seeds replay the same schedules."""
    named_only = {
        "rank-exception", "hang-in-python", "slow-rank", "corrupt-checkpoint", "kill-replacement",
        "lose-node-in-restart", "kill-in-save",
    }  # fmt: skip
    assert set(schedule.parse_mix(None)) == set(schedule.KINDS) - named_only
    shared = {"partition-node": "--hosts loopback: the nodes share one network"}
    assert set(schedule.parse_mix(None, shared)) == set(schedule.KINDS) - named_only - {"partition-node"}
    assert schedule.parse_mix(",".join(sorted(named_only)), shared) == dict.fromkeys(named_only, 1)
    assert schedule.parse_mix("kill-worker,partition-node=0", shared) == {"kill-worker": 1, "partition-node": 0}
    with pytest.raises(LabError, match="partition-node cannot run here: --hosts loopback"):
        schedule.parse_mix("kill-worker,partition-node", shared)


def test_the_same_seed_replays_the_same_schedule_and_another_seed_does_not():
    mix = schedule.parse_mix(None)
    one = schedule.draw(mix, 20.0, 7, count=30, duration_s=None)
    assert one == schedule.draw(mix, 20.0, 7, count=30, duration_s=None)
    assert one != schedule.draw(mix, 20.0, 8, count=30, duration_s=None)


def test_faults_arrive_at_the_mtbf_on_average_and_never_closer_than_the_gap():
    plan = schedule.draw({"kill-worker": 1}, 10.0, 1, count=2000, duration_s=None)
    gaps = [b.at_s - a.at_s for a, b in zip(plan, plan[1:], strict=False)]
    assert min(gaps) >= schedule.MIN_GAP_S - 1e-9
    assert 9.0 < statistics.mean(gaps) < 11.5  # exponential of mean 10, floored at 2 s


def test_the_mix_weighs_the_kinds_and_a_duration_bounds_the_schedule():
    plan = schedule.draw({"kill-worker": 3, "hang-worker": 1}, 5.0, 2, count=None, duration_s=4000.0)
    kinds = [p.kind for p in plan]
    assert set(kinds) == {"kill-worker", "hang-worker"}
    assert 2.2 < kinds.count("kill-worker") / kinds.count("hang-worker") < 4.0
    assert plan[-1].at_s <= 4000.0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("nosuch=1", "unknown fault 'nosuch'"),
        ("kill-worker=x", "a weight is a whole number"),
        ("kill-worker=0", "no fault with a weight above 0"),
        (",", "no fault"),
        ("kill-worker=1,hang-worker,kill-worker=2", "kill-worker is named twice"),
    ],
)
def test_a_bad_mix_is_one_line(text, words):
    with pytest.raises(LabError, match=words):
        schedule.parse_mix(text)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ([], ["--count N or --duration D"]),
        (["--count", "3", "--duration", "1m"], ["one way"]),
        (["--count", "3", "--mtbf", "0"], ["--mtbf must be above 0"]),
        (["--count", "3", "--mtbf", "soon"], ["--mtbf 'soon' is not a duration"]),
        (["--duration", "1s"], ["too short for one fault"]),
        (["--count", "3", "--seed", "x"], ["--seed", "invalid int"]),
        (["--count", "0"], ["--count", "1 or more"]),
        (["--faults", "-2"], ["--count/--faults", "1 or more"]),  # the spelling of --count
        (["--faults", "3", "--duration", "1m"], ["one way"]),
        (["--count", "3", "--load", "-1"], ["--load must be 0 or more"]),
        (["--count", "3", "--mix", "kill-worker,nosuch"], ["unknown fault 'nosuch'"]),
        (["--count", "3", "--report-dir", ""], ["--report-dir is empty"]),
        (["--count", "3", "--runtime", "k8s"], ["does not run on --runtime k8s yet", "proven on docker, local"]),
        (
            ["--count", "3", "--hosts", "loopback", "--mix", "partition-node"],
            ["partition-node cannot run here", "netns"],
        ),
        (["--count", "3", "--compare", "out.pt"], ["--compare: only with --script"]),
        (["--count", "3", "--deadline", "180"], ["--deadline: only with --script"]),  # its default, given
        (["--count", "3", "--", "--epochs", "2"], ["arguments after --: only with --script"]),
        (["--count", "3", "--script", "tests/user_scripts/nosuch.py"], ["--script: no such file"]),
        (["--count", "3", "--script", PLAIN, "--mix", "hang-worker"], ["hang-worker cannot run here: on your script"]),
        (
            ["--count", "3", "--script", PLAIN, "--mix", "kill-worker,hang-in-python"],
            ["hang-in-python cannot run here"],
        ),
        (["--count", "3", "--script", PLAIN, "--mix", "kill-in-save"], ["kill-in-save cannot run here", "rank 0"]),
        (["--count", "3", "--script", PLAIN, "--recovery", "in-process"], ["not behind lab chaos on your script"]),
    ],
)
def test_bad_input_is_one_line_and_nothing_starts(tmp_path, capsys, args, words):
    out = lab_in_process(capsys, "chaos", "--run-dir", str(tmp_path / "run"), *args)
    assert_one_line_error(out, *words)
    assert not (tmp_path / "run").exists()


def recorded(tmp_path) -> Progress:
    """Two ranks stepping every 0.1 s from t=100.1 to 103.5, step 11 0.5 s late; rank 1 redoes step 10."""
    events = tmp_path / "events"
    events.mkdir()
    for rank in (0, 1):
        lines, when = [], 100.0
        for step in range(1, 31):
            when += 0.6 if step == 11 else 0.1
            lines.append({"time": when, "event": "step", "rank": rank, "step": step, "restart": 0})
        if rank == 1:
            lines.insert(10, {"time": 101.05, "event": "step", "rank": 1, "step": 10, "restart": 1})
        lines.append({"time": 102.0, "event": "checkpoint_saved", "rank": rank, "step": 20, "seconds": 0.25})
        (events / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"torn')
    progress = Progress(events)
    progress.poll()
    return progress


def test_progress_reads_steps_incrementally_and_keeps_a_torn_line_for_later(tmp_path):
    progress = recorded(tmp_path)
    assert progress.front() == 30 and len(progress.steps) == 61
    with open(tmp_path / "events" / "rank0.jsonl", "a") as f:
        f.write('": 1}\n' + json.dumps({"time": 200.0, "event": "step", "rank": 0, "step": 31}) + "\n")
    progress.poll()
    assert progress.front() == 31 and len(progress.steps) == 62
    assert progress.all_reached(2, 12, since=101.0) == pytest.approx(101.7)
    assert progress.all_reached(2, 32, since=101.0) is None


def test_a_whole_poll_reads_past_the_chunk_a_loop_poll_stops_at(tmp_path, monkeypatch):
    """The ledger's read takes every line however long the run; a poll in the campaign's loop
    reads at most a chunk of each file (the first 100-fault ledger saw only the first 4 MB)."""
    monkeypatch.setattr(tail_module, "CHUNK", 64)
    events = recorded(tmp_path).events_dir
    assert Progress(events).polled().front() < 30
    assert Progress(events).polled(whole=True).front() == 30
    assert len(Progress(events).polled(whole=True).steps) == 61


def test_the_ledger_splits_wall_time_and_counts_what_was_redone(tmp_path):
    progress = recorded(tmp_path)
    blows = [Blow("kill-worker", 1.0, ranks=[1], time=101.0, front=10, recovered_s=0.7, bound_s=70)]
    blows.append(Blow("kill-in-regroup", 9.0, bound_s=70))  # never injected: the job ended first
    record = ledger.ledger(blows, progress, {"identical": True}, {"seed": 1, "load": 0, "recovery_style": "x"})
    assert record["faults_injected"] == 1 and record["faults_planned"] == 2
    assert record["wall_s"] == pytest.approx(3.4) and record["recovery_s"] == {"kill-worker": 0.7}
    assert record["checkpoint_s"] == 0.25 and record["productive_s"] == pytest.approx(2.45)
    assert record["ettr"] == pytest.approx(2.45 / 3.4, abs=1e-4) and record["steps_redone"] == 1
    table = [line for line in ledger.markdown(record).splitlines() if line.startswith("| 2 ")]
    assert "not injected" in table[0]
    assert record["stalled_s"] == {} and "stalls" not in ledger.markdown(record)


def test_a_slow_rank_is_a_stall_in_the_ledger_not_a_recovery(tmp_path):
    progress = recorded(tmp_path)
    blows = [
        Blow("kill-worker", 1.0, ranks=[1], time=101.0, front=10, recovered_s=0.7, bound_s=70),
        Blow("slow-rank", 2.0, ranks=[0], time=102.0, front=20, recovered_s=1.1, bound_s=70),
    ]
    record = ledger.ledger(blows, progress, {"identical": True}, {"seed": 1, "load": 0, "recovery_style": "x"})
    assert record["recovery_s"] == {"kill-worker": 0.7} and record["stalled_s"] == {"slow-rank": 1.1}
    assert record["productive_s"] == pytest.approx(3.4 - 0.7 - 1.1 - 0.25)
    assert "recovery 0.7 s, stalls 1.1 s" in ledger.markdown(record)


@pytest.mark.parametrize(
    ("weights", "said"),
    [
        ({"identical": True}, "final weights bit-identical to an uninterrupted run"),
        ({"identical": False, "why": "checksums a against b"}, "final weights differ: checksums a against b"),
        ({"identical": None, "why": "not compared: give --compare FILE"}, "final result not compared: give --compare"),
        (
            {"identical": True, "compared": "r.txt", "why": "", "how": "bitwise equal (9 bytes)"},
            "final r.txt as an uninterrupted run's (bitwise equal (9 bytes))",
        ),
        (
            {"identical": False, "compared": "r.txt", "why": "r.txt differs", "how": "r.txt differs"},
            "final r.txt differs from an uninterrupted run's (r.txt differs)",
        ),
        (
            {
                "identical": False,
                "why": "not compared: the uninterrupted reference did not end (timed out)",
                "reference_ended": False,
            },
            "final result not compared: the uninterrupted reference did not end (timed out)",
        ),
    ],
)
def test_the_ledger_says_what_the_end_was_compared_with(tmp_path, weights, said):
    """The trainer's weights, or a script's --compare file, or nothing compared: said as it is."""
    record = ledger.ledger([], recorded(tmp_path), weights, {"seed": 1, "load": 0, "recovery_style": "restart"})
    assert said in ledger.markdown(record)
