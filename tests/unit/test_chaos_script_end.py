"""How `lab chaos --script` judges the end of the user's job (lab.chaos._judge): every node with
exit 0, or the codes that say otherwise, with a node still running at the bound said as such (it
was stopped, as a scheduler stops a fixed-size job that lost a node: lab.chaos.script_job_end)."""

from __future__ import annotations

import pytest

from lab import chaos
from lab.report import Report


def judged(codes: dict | None) -> dict[str, tuple[bool, str]]:
    record = {"faults_injected": 0, "stuck": 0, "findings": [], "final_weights": {"identical": None}}
    if codes is not None:
        record["exit_codes"] = codes
    report = Report("chaos", "local", 4)
    chaos._judge(report, record, chaos.Plan(faults=[], seed=1, load=0), on_script=codes is not None, loaded=0)
    return {c.name: (c.ok, c.detail) for c in report.checks}


def test_a_script_whose_every_node_ended_with_exit_0_ended_well():
    assert judged({"node0": 0, "node1": 0})["the job ended with exit 0"] == (
        True,
        "node exit codes {'node0': 0, 'node1': 0}",
    )


@pytest.mark.parametrize(
    ("codes", "said"),
    [
        ({"node0": 1, "node1": -15}, "node exit codes {'node0': 1, 'node1': -15}"),
        ({"node0": None, "node1": 1}, "node exit codes {'node0': None, 'node1': 1} (None: still running at the "
                                      "bound, stopped)"),
    ],
)  # fmt: skip
def test_a_node_that_failed_or_never_ended_fails_the_end_check_saying_which(codes, said):
    assert judged(codes)["the job ended with exit 0"] == (False, said)


def test_the_trainers_campaign_has_no_such_check():
    assert "the job ended with exit 0" not in judged(None)


def test_a_job_still_running_at_the_bound_says_where_each_rank_stands(tmp_path):
    """Asked before the stop, the ranks' own stacks (lab.health.hang_dump, in a real process
    standing in for rank 1, torch loaded, waiting in a function of its own) say where each
    waits; rank 0, ended, answers nothing and is said so."""
    import subprocess
    import sys
    import time
    from types import SimpleNamespace

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
        drill = SimpleNamespace(events_dir=tmp_path, topology=SimpleNamespace(world_size=2), events=lambda: events)
        said = chaos.where_they_stand(drill)
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
    assert chaos.returned(events) == []
    assert chaos.returned(events + [{"event": "exit", "rank": 0, "reason": "completed"}]) == [0]
