"""kill-in-save's verdicts on what real runs saw (tests/fixtures/drills/, scripts/record-fixtures.sh):
the trainer's (a DDP file and a DCP step cut midway) and three scripts' (a `latest` marker moved
before the save, the same moved after it, a DCP script that loads its newest folder whatever it
holds), each changed in one thing the judge must catch. No process runs."""

from __future__ import annotations

import signal

import pytest
from drill_cases import FIXTURES, failed, judge, seen

from lab.errors import LabError
from lab.exercises import DrillOptions, kill_in_save
from lab.exercises.script import cut
from lab.exercises.script import judge as script_judge
from lab.exercises.seen import Seen
from lab.health import injected_error
from lab.health.events import Event
from lab.report import Report

KILLED = "rank 0 was killed with its save half written"
NOT_LOADED = "no rank loaded the save the kill cut"
SCRIPT_CHECK = "it did not load the save the kill cut short"


def the_pause(evidence: Seen) -> dict:
    return next(e for e in evidence.events if e["event"] == Event.SAVE_PAUSED)


@pytest.mark.parametrize("case", ["kill-in-save", "kill-in-save-fsdp2"])
def test_the_kill_is_the_sigkill_not_the_signal_that_paused_the_save(case):
    evidence = seen(case)
    told, kill = evidence.injected("kill_worker"), kill_in_save.the_kill(evidence)
    assert told["args"]["sig"] == int(injected_error.PAUSE_SIGNAL) and kill["args"]["sig"] == signal.SIGKILL
    assert told["time"] < the_pause(evidence)["time"] <= kill["time"]


def test_a_kill_after_the_pause_ended_is_not_a_kill_in_the_save():
    evidence = seen("kill-in-save")
    kill_in_save.the_kill(evidence)["time"] = the_pause(evidence)["time"] + injected_error.PAUSE_S + 0.5
    assert KILLED in failed(judge("kill-in-save", evidence))


def test_a_kill_before_any_save_paused_is_not_a_kill_in_the_save():
    evidence = seen("kill-in-save")
    evidence.events = [e for e in evidence.events if e["event"] != Event.SAVE_PAUSED]
    report = judge("kill-in-save", evidence)
    assert failed(report) == [KILLED, NOT_LOADED] and report.facts["cut"] is None


@pytest.mark.parametrize("case", ["kill-in-save", "kill-in-save-fsdp2"])
def test_a_restart_that_loads_the_cut_path_fails_by_that_check_alone(case):
    evidence = seen(case)
    kill = kill_in_save.the_kill(evidence)
    for e in evidence.events:
        if e["event"] == Event.CHECKPOINT_LOADED and e["time"] > kill["time"]:
            e["path"] = the_pause(evidence)["path"]
    report = judge(case, evidence)
    assert failed(report) == [NOT_LOADED]
    cut_path = the_pause(evidence)["path"]
    assert next(c.detail for c in report.checks if c.name == NOT_LOADED).startswith(f"cut: {cut_path}; loaded: [")


def test_the_ddp_trainer_refuses_a_rank_that_writes_no_checkpoint_and_fsdp2_takes_any():
    refused = kill_in_save.trainer_refusal(DrillOptions(target_rank=1, at_step=25))
    assert "written by rank 0" in refused and "--target-rank 1" in refused
    assert kill_in_save.trainer_refusal(DrillOptions(target_rank=0, at_step=25)) == ""
    assert kill_in_save.trainer_refusal(DrillOptions(target_rank=3, at_step=25, parallel="fsdp2")) == ""


def script_seen(case: str) -> Seen:
    return Seen.load(FIXTURES / f"script-cut-{case}" / "seen.json")


def test_a_marker_moved_before_the_save_loads_the_half_and_the_verdict_names_the_file():
    """latest_marker.py (rank 0 saves ckpt/step_N.pt every 5 steps), told at step 12: cut in step 15's save."""
    report = script_judge.judge(script_seen("marker-first"))
    found = report.facts["cut_save"]
    assert found["path"].endswith("/ckpt/step_15.pt") and found["loaded"] == "ckpt/step_15.pt" and found["took_cut"]
    assert "PytorchStreamReader" in found["error"]
    assert report.verdict == "fail" and failed(report)[0] == SCRIPT_CHECK
    assert report.facts["finding"].startswith(f"{SCRIPT_CHECK}: no. it loaded ckpt/step_15.pt")


def test_the_marker_moved_after_the_save_passes_over_the_half_to_the_step_before():
    report = script_judge.judge(script_seen("marker-last"))
    found = report.facts["cut_save"]
    assert found["loaded"] == "ckpt/step_10.pt" and not found["took_cut"] and found["error"] is None
    assert report.verdict == "pass", report.checks
    assert SCRIPT_CHECK in [c.name for c in report.checks if c.ok]


def test_a_dcp_script_loading_its_newest_folder_is_caught_on_the_folder_without_metadata():
    report = script_judge.judge(script_seen("dcp-newest-folder"))
    found = report.facts["cut_save"]
    assert found["how"] == "dcp.save" and found["path"].endswith("/ckpt/step15") and found["loaded"] == "ckpt/step15"
    assert found["took_cut"] and "CheckpointException" in found["error"]
    assert failed(report)[0] == SCRIPT_CHECK
    assert "with its shards and no .metadata" in report.facts["finding"]


def test_the_careful_scripts_verdict_turns_when_its_first_load_after_the_kill_is_the_cut_file():
    evidence = script_seen("marker-last")
    kill = evidence.extra["fault"]["time"]
    first = min(
        (e for e in evidence.events if e["event"] == Event.LOADED and e["time"] > kill), key=lambda e: e["time"]
    )
    first["path"] = "ckpt/step_15.pt"
    assert SCRIPT_CHECK in failed(script_judge.judge(evidence))


@pytest.mark.parametrize(
    ("loaded", "same"),
    [
        ("ckpt/step_15.pt", True),
        ("./ckpt/step_15.pt", True),
        ("step_15.pt", True),
        ("/w/run/ckpt/step_15.pt", True),
        ("ckpt/step_10.pt", False),
        ("other/step_15.pt", False),
        ("ckpt/step_15.pt.tmp", False),
        ("", False),
        (".", False),
    ],
)
def test_a_load_names_the_cut_file_when_its_path_is_the_cuts_tail(loaded, same):
    assert cut.same_file("/w/run/ckpt/step_15.pt", loaded) is same


def test_no_cut_or_no_load_after_the_kill_gives_no_check():
    pause = {"event": Event.SAVE_PAUSED, "time": 10.0, "rank": 0, "path": "/w/a.pt", "how": "torch.save"}
    load = {"event": Event.LOADED, "time": 12.0, "rank": 1, "path": "a.pt"}
    assert cut.loaded_cut([pause], kill_time=11.0) is None
    assert cut.loaded_cut([load], kill_time=11.0) is None
    assert cut.loaded_cut([pause, {**load, "time": 10.5}], kill_time=11.0) is None  # loaded before the kill
    assert cut.loaded_cut([{**pause, "time": 11.5}, load], kill_time=11.0) is None  # paused after it
    assert cut.loaded_cut([pause, load], kill_time=11.0)["took_cut"] is True


def test_a_file_another_rank_saved_again_after_the_cut_was_loaded_whole_unless_the_load_raised():
    """Several ranks writing one file (imagenet's way): rank 0 cut midway, rank 2's save of the same
    path done after the cut began: a load that worked read rank 2's copy."""
    pause = {"event": Event.SAVE_PAUSED, "time": 10.0, "rank": 0, "path": "/w/checkpoint.pth.tar", "how": "torch.save"}
    again = {"event": Event.SAVED, "time": 10.4, "rank": 2, "path": "checkpoint.pth.tar"}
    load = {"event": Event.LOADED, "time": 12.0, "rank": 1, "path": "checkpoint.pth.tar"}
    found = cut.loaded_cut([pause, again, load], kill_time=11.0)
    assert found["took_cut"] is False and found["rewritten_by"] == [2]
    raised = {**load, "event": Event.LOAD_FAILED, "error": "RuntimeError: PytorchStreamReader failed"}
    assert cut.loaded_cut([pause, again, raised], kill_time=11.0)["took_cut"] is True
    before = {**again, "time": 9.5}  # saved before the cut began: the cut came after it
    assert cut.loaded_cut([before, pause, load], kill_time=11.0)["rewritten_by"] == []
    assert cut.loaded_cut([before, pause, load], kill_time=11.0)["took_cut"] is True


class ADrill:
    """What kill-in-save's act asks of a drill, with a job that pauses a save or ends."""

    def __init__(self, pauses_save: bool = True, ends: bool = False):
        self.pauses_save, self.ends, self.injected, self.said = pauses_save, ends, [], []

    def locate(self, rank: int) -> tuple[str, int]:
        return f"node{rank // 2}", rank % 2

    def inject(self, node: str, fault: str, **args) -> dict:
        self.injected.append((node, fault, args))
        return {"fault": fault, "args": args, "time": 0.0}

    def events(self) -> list[dict]:
        told = bool(self.injected)
        pause = {"event": Event.SAVE_PAUSED, "rank": 3, "time": 9e12, "path": "/ckpt/.dcp_00000030.tmp"}
        return [pause] if told and self.pauses_save else []

    def ended(self):
        return {"node0": 0, "node1": 0} if self.ends else None

    def progress(self, line: str) -> None:
        self.said.append(line)


def test_the_act_signals_the_target_then_kills_it_inside_its_paused_save(monkeypatch):
    monkeypatch.setattr(kill_in_save, "SAVE_WAIT_S", 0.5)  # a pause it missed would end the wait at once
    drill = ADrill()
    fault = kill_in_save.cut_a_save(drill, 3)
    assert drill.injected == [
        ("node1", "kill_worker", {"local_rank": 1, "sig": int(injected_error.PAUSE_SIGNAL)}),
        ("node1", "kill_worker", {"local_rank": 1, "sig": int(signal.SIGKILL)}),
    ]
    assert fault["rank"] == 3 and drill.said == [
        "waiting for rank 3's next save to pause midway",
        "rank 3's save of /ckpt/.dcp_00000030.tmp paused midway",
    ]


def test_a_job_that_ends_before_the_save_or_a_rank_that_never_saves_is_one_line(monkeypatch):
    monkeypatch.setattr(kill_in_save, "SAVE_WAIT_S", 3.0)  # the job's end is looked at once a second
    with pytest.raises(LabError, match=r"^the job ended \(exit codes .*\) before rank 1's next save began$"):
        kill_in_save.cut_a_save(ADrill(pauses_save=False, ends=True), 1)
    monkeypatch.setattr(kill_in_save, "SAVE_WAIT_S", 0.1)
    message = (
        "rank 1 began no save in 0 s: kill-in-save cuts a torch.save(obj, PATH) or a dcp.save (before its "
        ".metadata, which rank 0 writes): choose a rank that saves (--target-rank)"
    )
    with pytest.raises(LabError) as refused:
        kill_in_save.cut_a_save(ADrill(pauses_save=False), 1)
    assert str(refused.value) == message


def test_a_pause_counts_from_the_signals_instant_and_only_the_ranks_own():
    events = [
        {"event": Event.SAVE_PAUSED, "rank": 0, "time": 10.0, "path": "a"},
        {"event": Event.SAVE_PAUSED, "rank": 1, "time": 11.0, "path": "b"},
        {"event": Event.STEP, "rank": 0, "time": 12.0, "step": 30},
        {"event": Event.SAVE_PAUSED, "rank": 0, "time": 9.5, "path": "c"},
    ]
    assert [e["path"] for e in kill_in_save.pauses(events, 0, since=10.0)] == ["a"]


def hand_run(pause_at: float, kill_at: float) -> Seen:
    """kill-in-save's evidence at its edges: told at 100, paused, killed; no job behind it."""
    faults = [
        {"fault": "kill_worker", "time": 100.0, "args": {"local_rank": 0, "sig": int(injected_error.PAUSE_SIGNAL)}},
        {"fault": "kill_worker", "time": kill_at, "args": {"local_rank": 0, "sig": 9}, "rank": 0},
    ]
    pause = {"event": Event.SAVE_PAUSED, "rank": 0, "time": pause_at, "step": 30, "path": "/c/.step_30.tmp"}
    return Seen("kill-in-save", "local", kill_in_save.topology(DrillOptions(0, 25)), faults=faults, events=[pause])


@pytest.mark.parametrize(
    ("pause_at", "kill_at", "inside"),
    [(100.5, 100.5, True), (100.5, 108.5, True), (100.5, 108.75, False), (100.5, 100.25, False)],
)
def test_the_kill_is_inside_the_save_from_the_pause_to_its_end_both_included(pause_at, kill_at, inside):
    report = Report("kill-in-save", "local", 4)
    cut_record = kill_in_save.check_cut(report, hand_run(pause_at, kill_at))
    assert cut_record["step"] == 30 and report.checks[0].ok is inside
    assert report.checks[0].detail == (
        f"its save of /c/.step_30.tmp paused 0.50 s after the signal, the kill came at {kill_at - 100:.2f} s "
        "(the pause lasts 8 s)"
    )


def test_its_job_is_two_nodes_with_one_restart():
    shape = kill_in_save.topology(DrillOptions(0, 25))
    assert (shape.nodes, shape.nproc_per_node, shape.max_restarts) == (2, 2, 1)


def test_a_load_at_the_kills_own_instant_is_not_the_restarts_and_no_cut_says_none():
    evidence = seen("kill-in-save")
    kill = kill_in_save.the_kill(evidence)
    evidence.events.append({**recorded_load(evidence), "time": kill["time"], "path": the_pause(evidence)["path"]})
    assert NOT_LOADED not in failed(judge("kill-in-save", evidence))
    evidence.events = [e for e in evidence.events if e["event"] != Event.SAVE_PAUSED]
    detail = next(c.detail for c in judge("kill-in-save", evidence).checks if c.name == NOT_LOADED)
    assert detail.startswith("cut: None; loaded: [")


def recorded_load(evidence: Seen) -> dict:
    return next(e for e in evidence.events if e["event"] == Event.CHECKPOINT_LOADED)
