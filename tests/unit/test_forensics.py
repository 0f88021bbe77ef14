"""Who is behind, from the ranks' answers (lab.exercises.forensics.analyse): each case is what the
ranks of a real drill answered, their Flight Recorder entries and their own frames as recorded
(tests/fixtures/drills/*/seen.json and CI's failed partition run), with the innermost frame a rank
stands in written out: a frame of torch's own source where it waits in a collective (gloo's
Flight Recorder never marks an entry completed, so the stack is what tells the two apart). Those
frames are what real ranks show: tests/test_user_script_watch.py reads the all_reduce one from a
torchrun job, and a rank waiting in DDP's backward all-reduce stood at graph.py:979 when checked.

The partition case failed CI once: the cut fell inside all_reduce #64, rank 0 had passed it and
waited in #65, ranks 1-3 still waited in #64, and forensics named them "behind"."""

from __future__ import annotations

from lab.exercises import forensics

TORCH = "/venv/lib/python3.11/site-packages/torch"
IN_BACKWARD = f"{TORCH}/autograd/graph.py:979 in _engine_run_backward"  # DDP's all-reduce runs under it
IN_ALL_REDUCE = f"{TORCH}/distributed/distributed_c10d.py:3252 in all_reduce"  # work.wait()
TRAINER = "/repo/lab/workloads/trainer.py"
AT_BACKWARD = [f"{TRAINER}:294 in <module>", f"{TRAINER}:149 in main", f"{TRAINER}:207 in train", IN_BACKWARD]
AT_AGREED = [f"{TRAINER}:149 in main", f"{TRAINER}:219 in train", "/repo/lab/workloads/distributed.py:204 in agreed"]
HUNG_IN_PYTHON = [
    f"{TRAINER}:213 in train",
    "/repo/lab/workloads/step_clock.py:46 in pace",
    "/repo/lab/health/injected_error.py:108 in wait_for_ever",
]


def entry(seq: int) -> dict:
    sizes = [[1153]] if seq == 64 else [[1]]  # #64 the gradients' bucket, #65 the step's agreement
    return {"seq": seq, "op": "all_reduce", "sizes": sizes, "state": "scheduled", "pg": "0"}


def dump(seq: int, stack: list[str]) -> dict:
    return {"request": "1.0", "flight_recorder": [entry(seq - 1), entry(seq)], "stacks": {"MainThread": stack}}


def test_a_partition_cut_inside_a_collective_names_nobody():
    """CI's run: rank 0 passed #64 and waits in #65; 1-3 wait inside #64, in the backward pass."""
    found = forensics.analyse(
        {0: dump(65, [*AT_AGREED, IN_ALL_REDUCE]), **{r: dump(64, AT_BACKWARD) for r in (1, 2, 3)}}, 4
    )
    assert found["suspects"] == [] and found["behind"] == [] and found["waiting_behind"] == [1, 2, 3]
    assert found["finding"] == (
        "rank 1, 2, 3 still wait in all_reduce #64 (sizes [[1153]]), which rank 0 passed: "
        "none is behind (a network or peer problem, not a stuck rank)"
    )


def test_a_rank_hung_in_its_own_code_is_behind_however_its_peers_wait():
    """hang-rank --in-python: rank 1 sleeps in its own code after #64; the others wait in #65."""
    found = forensics.analyse(
        {1: dump(64, HUNG_IN_PYTHON), **{r: dump(65, [*AT_AGREED, IN_ALL_REDUCE]) for r in (0, 2, 3)}}, 4
    )
    assert found["suspects"] == [1] and found["waiting_behind"] == []
    assert found["finding"] == (
        "rank 1 never entered all_reduce #65 (sizes [[1]]): its last was #64; "
        "it stands at /repo/lab/health/injected_error.py:108 in wait_for_ever"
    )


def test_a_stopped_rank_is_named_and_the_peers_it_left_inside_a_collective_are_not():
    """A rank stopped (SIGSTOP) answers nothing; of its peers, one passed #64 and two wait in it."""
    found = forensics.analyse(
        {0: dump(65, [*AT_AGREED, IN_ALL_REDUCE]), 2: dump(64, AT_BACKWARD), 3: dump(64, AT_BACKWARD)}, 4
    )
    assert found["silent"] == [1] and found["suspects"] == [1] and found["waiting_behind"] == [2, 3]
    assert found["finding"].startswith("rank 1 did not answer (stopped, or stuck holding the GIL)")


def test_every_rank_in_one_collective_names_nobody():
    found = forensics.analyse({r: dump(64, AT_BACKWARD) for r in range(4)}, 4)
    assert found["suspects"] == [] and found["finding"].startswith("every rank entered all_reduce #64")


def test_a_job_still_running_at_the_bound_says_where_each_rank_stands(tmp_path):
    """A job past its bound (a drill's wait, lab chaos --script's end), asked before the stop:
    the ranks' own stacks (lab.health.hang_dump, in a real process standing in for rank 1, torch
    loaded, waiting in a function of its own) say where each waits; rank 0, ended, answers
    nothing and is said so, and its recorded exit says its script returned."""
    import subprocess
    import sys
    import time

    rank = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\n"
         "import torch.distributed  # a rank has it loaded: the dump reads its Flight Recorder\n"
         "from lab.health import hang_dump\n"
         "def waits_at_the_end():\n"
         "    time.sleep(60)\n"
         "hang_dump.install(sys.argv[1], 1)\n"
         "print('ready', flush=True)\n"
         "waits_at_the_end()\n",
         str(tmp_path)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert rank.stdout is not None and rank.stdout.readline() == "ready\n"
        time.sleep(0.1)  # a request made before install() returned would not be its own
        events = [  # as lab.node.user_script records them: rank 0's script returned, rank 1's did not
            {"event": "start", "rank": 0, "time": 1.0}, {"event": "start", "rank": 1, "time": 1.0},
            {"event": "exit", "rank": 0, "reason": "completed", "code": 0, "time": 9.0},
        ]  # fmt: skip
        said = forensics.where_they_stand(tmp_path, 2, events)
    finally:
        rank.kill()
        rank.wait()
    standing, silent, returned = said.split("; ")
    assert standing.startswith("rank 1 at ") and "waits_at_the_end" in standing, said
    assert silent == "rank 0 did not answer (ended, stopped, or holding the GIL)", said
    assert returned == "the script had returned on rank 0 (its exit recorded)", said


def test_a_rank_started_again_after_its_exit_has_not_returned():
    """A restart's new process: its start, after the exit of the one before, is what counts."""
    events = [
        {"event": "start", "rank": 0}, {"event": "exit", "rank": 0, "reason": "completed"},
        {"event": "start", "rank": 0}, {"event": "start", "rank": 1},
        {"event": "exit", "rank": 1, "reason": "exception"}, {"event": "step", "rank": 2},
    ]  # fmt: skip
    assert forensics.returned(events) == []
    assert forensics.returned(events + [{"event": "exit", "rank": 0, "reason": "completed"}]) == [0]


def test_a_drill_whose_job_outlives_its_wait_says_where_each_rank_stands(tmp_path, monkeypatch):
    """Every drill's wait for its job's end (Drill.wait_job, and so gather): the timeout's one line
    says where the ranks stand, asked before the teardown; here the one rank answers nothing."""
    import io

    import pytest

    from lab.exercises.drill import Drill, TimedOut
    from lab.rundir import RunDir
    from lab.runtimes.local import LocalRuntime
    from lab.topology import Topology

    runtime = LocalRuntime(RunDir(tmp_path / "run"))  # its nodes write where the drill reads: no relay
    drill = Drill(runtime, Topology(nodes=1, nproc_per_node=1), {}, tmp_path, "", None, out=io.StringIO())  # type: ignore[arg-type]
    monkeypatch.setattr(drill, "exit_codes", lambda: {"node0": None})  # still running
    with pytest.raises(TimedOut) as timed_out:
        drill.wait_job(0.2)
    assert str(timed_out.value) == (
        "timed out after 0s waiting for the job to end: rank 0 did not answer (ended, stopped, or holding the GIL)"
    )


def test_a_dump_copied_from_a_machine_with_a_disk_of_its_own_is_read_and_a_stale_one_is_not(tmp_path):
    """The relay runs while the lab waits (here it does what the Ray runtime's copy does: rank 1's
    dump arrives as rank1.node1.json); a copy answering an older request is not an answer."""
    import json

    folder = tmp_path / "forensics"
    folder.mkdir()
    (folder / "rank0.node1.json").write_text(json.dumps({"request": "0.5", "stacks": {}}))  # an older request's

    def relay() -> None:
        request = (folder / "request").read_text()
        (folder / "rank1.node1.json").write_text(json.dumps({"request": request, "stacks": {"MainThread": []}}))

    found = forensics.collect(tmp_path, 2, wait_s=0.5, relay=relay)
    assert found["answered"] == [1] and found["silent"] == [0], found
