"""The verdict on a user's script (lab.exercises.script.judge) on what real drills on
tests/user_scripts saw (tests/fixtures/drills/script-*, recorded by scripts/record-fixtures.sh):
the resumes, the script that never loads its checkpoint, the silent one, the fault that never
fired, the rerun after a preemption and the straggler. No process runs."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lab.exercises.script import judge
from lab.exercises.seen import Seen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "drills"
SNAPSHOT_SCRIPT = Path(__file__).resolve().parents[1] / "user_scripts" / "snapshot_every_epoch.py"


def seen(case: str) -> Seen:
    return Seen.load(FIXTURES / f"script-{case}" / "seen.json")


def failed(report) -> list[str]:
    return [c.name for c in report.checks if not c.ok]


def test_a_snapshot_script_killed_mid_run_resumes_and_says_what_it_redid():
    report = judge.judge(seen("kill-worker"))
    facts = report.facts
    assert report.verdict == "pass", report.checks
    assert facts["restarts"] == 1 and facts["progress"]["source"] == "output"
    assert facts["work_redone"]["unit"] == "epoch" and facts["work_redone"]["count"] >= 0
    assert facts["finding"].startswith("finished; 1 restart(s), redid")


def test_a_rank_that_raised_in_the_script_is_quoted_with_the_script_line_and_recovers():
    """rank-exception on the snapshot script: the exception comes from the line the rank ran,
    named in the script's file, first among the errors (its peers' lost connections follow)."""
    report = judge.judge(seen("rank-exception"))
    assert report.verdict == "pass", report.checks
    first = report.facts["errors_after_fault"][0]
    assert first.startswith("RuntimeError: rank 1: exception injected") and "snapshot_every_epoch.py:" in first
    assert report.facts["restarts"] == 1 and report.facts["work_redone"]["unit"] == "epoch"


def test_a_script_that_never_loads_its_checkpoint_fails_and_says_why():
    """One node of three workers (1 x 3): torchrun restarts it, it starts again from step 0."""
    evidence = seen("never-loads")
    report = judge.judge(evidence)
    assert evidence.topology.world_size == 3 and report.facts["restarts"] == 1
    assert failed(report) == ["it resumed where it left off, not from the start"]
    detail = next(c.detail for c in report.checks if not c.ok)
    # What was seen (its saves), what could explain it, and the knob that tells the two apart.
    assert "restarted from step 0 and no load was seen after the fault, though it saved a checkpoint at step " in detail
    assert "it does not load its checkpoint on start" in detail and "--progress-regex" in detail
    assert report.facts["work_redone"]["count"] >= 8 and report.facts["work_redone"]["from"] == 0


def test_a_fault_before_any_checkpoint_is_not_blamed_on_the_script():
    """Fired before the first save (a slow start on a loaded machine, a wall-time fire point):
    starting over was all the script could do, and the detail says the fault may have come too early."""
    evidence = seen("never-loads")
    evidence.events = [e for e in evidence.events if e["event"] != "saved"]
    report = judge.judge(evidence)
    assert failed(report) == ["it resumed where it left off, not from the start"]
    detail = next(c.detail for c in report.checks if not c.ok)
    assert "it came before the first checkpoint (fire later: --at-step, --at-time)" in detail
    assert "your script does not load its checkpoint" not in detail


def test_a_silent_script_is_judged_by_its_checkpoint_files_and_says_so():
    report = judge.judge(seen("silent"))
    assert report.verdict == "pass", report.checks
    assert report.facts["progress"]["source"] == "checkpoint files" and report.facts["work_redone"] is None
    assert report.facts["loaded_after_fault"][0] == "state/latest.pt"
    assert "progress read from checkpoint files" in report.facts["finding"]


def test_a_silent_script_that_loads_nothing_fails():
    evidence = seen("silent")
    evidence.events = [e for e in evidence.events if e["event"] != "loaded"]
    assert failed(judge.judge(evidence)) == ["it loaded a checkpoint when it started again"]


def test_a_fault_that_never_fired_says_to_choose_an_earlier_step_no_later_than_the_last_one_seen():
    report = judge.judge(seen("unfired"))
    assert failed(report) == ["the fault fired while the job ran"]
    assert report.checks[0].detail.endswith(
        "before the fault fired: rank 1's epoch never reached 50 (its last was 2): choose a lower --at-step (at most 2)"
    )


def test_a_script_that_printed_no_step_is_told_of_at_time_and_progress_regex_not_at_step():
    evidence = seen("unfired")
    evidence.events = [e for e in evidence.events if e["event"] != "step"]
    joined = min(e["time"] for e in evidence.events if e["event"] == "rendezvous_done")
    ended = max(e["time"] for e in evidence.events)
    detail = judge.judge(evidence).checks[0].detail
    assert "--at-step" not in detail and "--progress-regex" in detail
    assert detail.endswith(f"--at-time 15 s after its process group was up; it ended {ended - joined:.1f} s after: "
                           "choose a lower --at-time")  # fmt: skip
    evidence.extra.update(ckpt_dir="checkpoints", at_time_s=0.5)
    assert (
        judge.judge(evidence)
        .checks[0]
        .detail.endswith("no checkpoint appeared in --ckpt-dir checkpoints (the fault waits for one)")
    )


def test_a_preempted_script_is_started_again_and_resumes():
    report = judge.judge(seen("preempt"))
    assert report.verdict == "pass", report.checks
    assert report.facts["rerun"] is True and report.facts["work_redone"]["unit"] == "epoch"
    assert "torchrun restarted the workers" not in [c.name for c in report.checks]  # a rerun, not a restart


def test_a_slowed_script_needs_no_restart_and_its_rates_show_the_slowdown():
    report = judge.judge(seen("straggler"))
    assert report.verdict == "pass", report.checks
    rate = report.facts["progress"]["rate_per_s"]
    assert rate["during"] < rate["before"], rate
    assert "while slowed" in report.facts["finding"]


def test_a_straggler_that_restarted_fails():
    evidence = seen("straggler")
    evidence.events.append({**evidence.events[-1], "restart": 1})
    assert failed(judge.judge(evidence)) == ["no restart was needed"]


@pytest.mark.parametrize("case", ["kill-worker", "preempt"])
def test_a_result_unlike_the_references_fails_and_a_stale_checkpoint_is_named(case):
    evidence = seen(case)
    evidence.extra["compared"] = [False, "result.pt differs from the reference's, bitwise"]
    evidence.extra["found_at_start"] = ["snapshot.pt"]
    report = judge.judge(evidence)
    assert failed(report) == ["it started from a clean slate", "the result equals the fault-free reference's"]
    assert report.facts["finding"].startswith("it started from a clean slate: no.")


def test_a_job_still_running_at_the_deadline_says_nothing_ended_the_hang():
    evidence = seen("kill-worker")
    evidence.codes = {node: None for node in evidence.codes}
    report = judge.judge(evidence)
    assert "the job finished with exit 0" in failed(report)
    assert "nothing ended the hang" in next(c.detail for c in report.checks if c.name == "the job finished with exit 0")


def test_a_script_that_failed_before_the_fault_is_judged_as_that_with_its_own_error():
    evidence = seen("kill-worker")
    fault_time = evidence.extra["fault"]["time"]
    first = next(e for e in evidence.events if e["event"] == "rendezvous_done")
    evidence.events.append(
        {**first, "time": fault_time - 1, "event": "exit", "reason": "exception",
         "error": "FileNotFoundError: configurator.py", "where": "train.py:12"}
    )  # fmt: skip
    report = judge.judge(evidence)
    assert failed(report) == ["the script ran until the fault"]
    said = "the script failed before the fault: FileNotFoundError: configurator.py (train.py:12)"
    # A file it opens where it starts: the verdict says where that was, and the flag to move it.
    workdir = evidence.extra["workdir"]
    assert (
        report.checks[-1].detail
        == f"{said} (it ran in a fresh working dir, {workdir}: --workdir DIR runs it where its files are)"
    )
    evidence.extra["own_workdir"] = True  # run with --workdir already: nothing to suggest
    assert judge.judge(evidence).checks[-1].detail == said


def test_a_restart_before_the_fault_is_a_failure_before_it_even_without_words():
    evidence = seen("kill-worker")
    first = next(e for e in evidence.events if e["event"] == "start")
    evidence.events.append({**first, "time": evidence.extra["fault"]["time"] - 1, "restart": 1})
    assert failed(judge.judge(evidence)) == ["the script ran until the fault"]


def test_a_script_that_exited_before_the_fault_fired_says_its_own_error_not_to_lower_the_step():
    evidence = seen("unfired")
    last = evidence.events[-1]
    usage = ["usage: snapshot_every_epoch.py [-h] --data DATA", "error: the following arguments are required: --data"]
    evidence.events.append({**last, "event": "exit", "reason": "exit_status", "code": 2, "stderr": usage})
    detail = judge.judge(evidence).checks[0].detail
    assert (
        detail
        == "the script failed before the fault: exit status 2: error: the following arguments are required: --data"
    )


def only_rank(evidence: Seen, rank: int) -> None:
    """The same run as a script that prints its progress from one rank alone."""
    evidence.events = [e for e in evidence.events if e["event"] != "step" or e["rank"] == rank]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_script_that_prints_from_one_rank_is_judged_on_that_ranks_progress(rank):
    evidence = seen("kill-worker")
    only_rank(evidence, rank)
    report = judge.judge(evidence)
    assert report.verdict == "pass", report.checks
    assert report.facts["work_redone"]["unit"] == "epoch"


class Replay:
    """What wait_fire_point asks of a drill, answered from a recorded run: its events, all
    ended or not, and a progress line (no process behind it)."""

    def __init__(self, events: list[dict]):
        self.recorded, self.lines = events, []

    def events(self) -> list[dict]:
        return self.recorded

    def exit_codes(self) -> dict:
        return {"node0": None}

    def progress(self, line: str) -> None:
        self.lines.append(line)


def test_the_fault_fires_on_the_job_progress_when_the_target_rank_prints_none():
    """Rank 1 is the target; only rank 0 prints: the fire point reads rank 0, and says so."""
    from lab.exercises.script import signals

    evidence = seen("kill-worker")
    only_rank(evidence, 0)
    fire = signals.wait_fire_point(Replay(evidence.events), target=1, at_step=3, at_time_s=15, ckpt=None)
    assert fire == {"source": "output", "unit": "epoch", "value": fire["value"], "rank": 0} and fire["value"] >= 3


def test_a_banner_line_from_the_target_rank_does_not_hold_the_fault_back():
    """issue 56: the elastic example's rank 1 printed one matching line at its start and nothing
    more, rank 0 printed every epoch: the fault waited on rank 1 and never fired."""
    from lab.exercises.script import signals

    evidence = seen("kill-worker")
    only_rank(evidence, 0)
    first = next(e for e in evidence.events if e["event"] == "step")
    evidence.events.insert(0, {**first, "rank": 1, "step": 0})  # rank 1's one line
    fire = signals.wait_fire_point(Replay(evidence.events), target=1, at_step=3, at_time_s=15, ckpt=None)
    assert fire is not None and fire["rank"] == 0 and fire["value"] >= 3


def test_a_script_with_nothing_to_see_is_told_how_to_make_it_visible():
    evidence = seen("silent")
    evidence.events = [e for e in evidence.events if e["event"] != "loaded"]
    detail = next(c.detail for c in judge.judge(evidence).checks if not c.ok)
    assert "print 'step N'" in detail and "--ckpt-dir" in detail


def test_the_cause_is_named_before_the_peers_it_took_down_however_many_reported_first():
    """Recorded from a CI run of the matrix (tests/test_script_drills.py) that failed on it: after
    corrupt-checkpoint three ranks reported lost connections (each naming its own port) before
    rank 0 died loading the damaged snapshot; the verdict must name the load, not a peer."""
    report = judge.judge(seen("corrupt-crowded"))
    load_line = next(i for i, text in enumerate(SNAPSHOT_SCRIPT.read_text().splitlines(), 1) if "torch.load(" in text)
    assert report.facts["errors_after_fault"][0].startswith("RuntimeError: PytorchStreamReader failed")
    assert f"snapshot_every_epoch.py:{load_line})" in report.facts["finding"]


def test_peers_that_time_out_while_the_drill_holds_the_target_are_the_faults_doing():
    """Recorded from a CI run of the matrix that failed on it: corrupt-checkpoint held rank 1
    stopped 12.5 s before its kill (the damage imported torch on a loaded machine, since mended:
    tests/unit/test_checkpoint_damage.py), and its peers' 10 s collective timeout fired first. The
    fault began at the hold: the verdict is the damaged load's, as when the kill follows at once,
    not "the script failed before the fault"."""
    evidence = seen("corrupt-held-long")
    held, killed = evidence.injected("pause_worker")["time"], evidence.extra["fault"]["time"]
    timeouts = [e["time"] for e in evidence.events if "Timed out" in e.get("error", "")]
    assert timeouts and held < min(timeouts) < killed  # the recording is the case it stands for
    report = judge.judge(evidence)
    assert failed(report) == failed(judge.judge(seen("corrupt-crowded")))
    load_line = next(i for i, text in enumerate(SNAPSHOT_SCRIPT.read_text().splitlines(), 1) if "torch.load(" in text)
    assert report.facts["errors_after_fault"][0].startswith("RuntimeError: PytorchStreamReader failed")
    assert f"snapshot_every_epoch.py:{load_line})" in report.facts["finding"]


def test_the_wall_clock_fire_point_counts_from_the_process_group_not_the_import():
    """A loaded machine spends many seconds importing torch: timed from the workers' start, a
    wall-time fault hit a worker that had not begun (seen live: no checkpoint, no signal handler)."""
    from lab.exercises.script import signals

    now = time.time()
    started = {"event": "start", "time": now - 20, "rank": 0, "restart": 0}
    assert signals.seconds_running([started], at_time_s=15) is None  # still importing, perhaps
    joined = {"event": "rendezvous_done", "time": now - 5, "rank": 0}
    assert 5 <= signals.seconds_running([started, joined], at_time_s=15) < 6
    long_ago = {**started, "time": now - 46}  # no process group seen in 3 x 15 s: timed from the start
    assert signals.seconds_running([long_ago], at_time_s=15) >= 46
