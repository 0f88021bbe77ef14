"""lab.job.LogFollower on node output as torchrun writes it: torchrun's ChildFailedError block is
left out of the stream (one line says so), any other traceback is printed whole."""

import io
import os
from dataclasses import dataclass
from pathlib import Path

from lab.job import LogFollower

AGENT_FAILURE = """\
step 4
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1028, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 123)
  error_file: <N/A>
============================================================
after
"""
OTHER = """\
Traceback (most recent call last):
  File "train.py", line 3, in <module>
    import missing
ModuleNotFoundError: No module named 'missing'
next line
"""

# A node agent's last words after a job that succeeded (torch 2.13, `lab run` of a 2 x 2 job).
CPP_TRACE = (Path(__file__).parent / "fixtures" / "logs" / "cpp_store_trace.log").read_text()


@dataclass
class FakeNode:
    """Only what LogFollower reads of a Node: its name and its log."""

    name: str
    log_path: Path


def follow(tmp_path: Path, text: str, final: bool = True) -> list[str]:
    log = tmp_path / "node.log"
    log.write_text(text)
    out = io.StringIO()
    LogFollower([FakeNode("node0", log)], out=out).poll(final=final)
    return out.getvalue().splitlines()


def test_torchruns_child_failed_summary_is_one_line(tmp_path):
    assert follow(tmp_path, AGENT_FAILURE) == [
        "[node0] step 4",
        "[node0] (torchrun's ChildFailedError summary left out: the first-failure card follows)",
        "[node0] after",
    ]


def test_any_other_traceback_is_printed_whole(tmp_path):
    assert follow(tmp_path, OTHER) == [f"[node0] {line}" for line in OTHER.splitlines()]


def test_a_traceback_cut_short_by_the_end_of_the_job_is_printed(tmp_path):
    cut = 'Traceback (most recent call last):\n  File "train.py", line 3, in <module>\n'
    assert follow(tmp_path, cut) == [f"[node0] {line}" for line in cut.splitlines()]


def test_a_log_swapped_for_a_link_a_fifo_or_a_huge_file_is_never_followed_or_held(tmp_path):
    """The node's log is the node's: a container's user can swap it (issue 52, item 4)."""
    secret = tmp_path / "secret"
    secret.write_text("root only\n")
    log = tmp_path / "node.log"
    log.symlink_to(secret)
    out = io.StringIO()
    follower = LogFollower([FakeNode("node0", log)], out=out)
    follower.poll(final=True)
    log.unlink()
    os.mkfifo(log)  # opened non-blocking and refused: poll returns at once
    follower.poll(final=True)
    assert "root only" not in out.getvalue() and out.getvalue() == ""
    log.unlink()
    with open(log, "wb") as f:
        f.truncate(64 << 20)  # sparse: 64 MiB of output the lab must not hold at once
    follower.poll()
    shown = out.getvalue().splitlines()
    assert "bytes of output skipped" in shown[0]
    assert max(len(line) for line in shown) < 80 << 10  # one unending line, printed cut


def test_a_folder_above_the_log_swapped_for_a_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "node.log").write_text("not the node's\n")
    (tmp_path / "node0").symlink_to(elsewhere)
    out = io.StringIO()
    LogFollower([FakeNode("node0", tmp_path / "node0" / "node.log")], out=out).poll(final=True)
    assert out.getvalue() == ""


def test_a_cpp_stack_trace_is_one_line_after_the_warning_and_the_line_it_was_raised_from(tmp_path):
    frames = [line for line in CPP_TRACE.splitlines() if line.startswith(("frame #", "<omitting"))]
    shown = follow(tmp_path, CPP_TRACE + "after\n")
    assert [line for line in shown if "frame #" in line] == []
    assert shown == [
        "[node0] step 5",
        next(f"[node0] {line}" for line in CPP_TRACE.splitlines() if "sendBytes failed" in line),
        next(f"[node0] {line}" for line in CPP_TRACE.splitlines() if line.startswith("Exception raised from")),
        f"[node0] (a C++ stack trace of {len(frames)} frames left out: the node's log has it)",
        "[node0] ",
        "[node0] after",
    ]


def test_a_cpp_stack_trace_the_job_ended_in_is_still_said(tmp_path):
    cut = CPP_TRACE.split("<omitting")[0]
    assert follow(tmp_path, cut)[-1] == "[node0] (a C++ stack trace of 7 frames left out: the node's log has it)"
