"""`lab chaos` for real: a netns 2 x 2 trainer job struck by a seeded schedule (the command
docs/chaos.md shows), some faults inside a recovery, judged from the job's own events; and a
campaign interrupted mid-way, beside a busy process, that leaves nothing and still tells what ran."""

from __future__ import annotations

import json
import shlex
import signal
from pathlib import Path

import pytest
from conftest import needs_netns, wait_for_output
from doc_commands import commands
from test_exercises import assert_nothing_left

from lab.chaos.on_script import TRAINER_ONLY
from lab.chaos.schedule import DEFAULT_MIX, KINDS
from lab.rundir import MARKER

pytestmark = [pytest.mark.slow, needs_netns]


def ledger_of(stdout: str) -> dict:
    line = next(line for line in stdout.splitlines() if line.startswith("ledger: "))
    return json.loads(Path(line.split()[1].rstrip(",")).read_text())


def report_dir_of(stdout: str) -> Path:
    return Path(next(line for line in stdout.splitlines() if line.startswith("ledger: ")).split()[1].rstrip(",")).parent


def busy_of(run_dir: Path) -> list[int]:
    """The pids of the campaign's busy processes: marked with the run dir (lab.chaos.load)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv, environ = (proc / "cmdline").read_bytes(), (proc / "environ").read_bytes()
        except OSError:
            continue
        if b"itertools.count" in argv and f"{MARKER}={run_dir}".encode() in environ.split(b"\0"):
            found.append(int(proc.name))
    return found


def test_the_docs_campaign_recovers_every_fault(lab):
    shown = next(c.text for c in commands("docs/chaos.md") if "--runtime" not in c.text)
    out = lab(*shlex.split(shown)[1:], timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    record = ledger_of(out.stdout)
    assert record["faults_injected"] == 10 and record["faults_inside_a_recovery"] >= 3
    assert {f["kind"] for f in record["faults"]} == set(DEFAULT_MIX)  # every kind, a partition and the store's loss too
    assert record["stuck"] == 0 and record["findings"] == []
    assert all(f["recovered_s"] is not None and f["recovered_s"] < f["bound_s"] for f in record["faults"])
    assert record["final_weights"]["identical"] is True, record["final_weights"]
    assert 0 < record["ettr"] <= 1 and record["productive_s"] < record["wall_s"]
    logs = report_dir_of(out.stdout) / "nodes"  # what each node said, kept after the lab came down
    assert {p.name for p in logs.iterdir()} == {"node0.log", "node1.log"}
    assert "keeper" in (logs / "node0.log").read_text()
    assert_nothing_left(lab)


def test_the_docs_campaign_on_an_ordinary_script_resumes_it_each_time_and_ends_where_a_run_without_faults_does(lab):
    """plain_train, no lab import: every kind a script can take, its final weights against a
    fault-free run of it in a working dir of its own, within --rtol (4 ranks resumed from a
    snapshot sum one step's gradients in another order: docs/chaos.md)."""
    shown = next(c.text for c in commands("docs/chaos.md") if "--script" in c.text)
    out = lab(*shlex.split(shown)[1:], timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    record = ledger_of(out.stdout)
    assert {f["kind"] for f in record["faults"]} == set(DEFAULT_MIX) - set(TRAINER_ONLY)
    assert record["faults_injected"] == 6 and record["stuck"] == 0 and record["recovery_style"] != "in-process"
    assert record["final_weights"]["identical"] is True, record["final_weights"]
    # Bitwise equal when every resume happened to sum in the uninterrupted run's order (a clean
    # clone's CI once saw it), else within --rtol: either way what was compared is said.
    how = record["final_weights"]["how"]
    assert record["final_weights"]["compared"] == "result.txt" and ("within" in how or how.startswith("bitwise equal"))
    assert record["steps_redone"] > 0
    assert_nothing_left(lab)


def test_the_kinds_named_by_hand_recover_under_a_restart_and_end_bit_identical(lab):
    """The kinds --mix must name (not in the default), on the tuned restart: each fault judged, each
    its own way back (a rank's exception, its replacement killed as it starts, a node lost while
    the job recovers, the newest checkpoint damaged before a rank is killed)."""
    named = ["rank-exception", "kill-replacement", "lose-node-in-restart", "corrupt-checkpoint"]
    assert not set(named) & set(DEFAULT_MIX) and set(named) <= set(KINDS)
    out = lab(
        "chaos", "--count", "4", "--mtbf", "4s", "--seed", "26", "--recovery", "restart", "--mix", ",".join(named)
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    record = ledger_of(out.stdout)
    assert record["faults_injected"] == 4 and record["stuck"] == 0 and record["findings"] == []
    assert {f["kind"] for f in record["faults"]} <= set(named) and record["faults_inside_a_recovery"] >= 1
    assert record["final_weights"]["identical"] is True, record["final_weights"]
    assert_nothing_left(lab)


def test_an_interrupted_campaign_beside_a_busy_process_leaves_nothing_and_writes_its_ledger(lab):
    proc = lab.popen("chaos", "--count", "10", "--mtbf", "3s", "--seed", "7", "--load", "1")
    try:
        assert wait_for_output(proc, "every rank back", count=1, timeout_s=300)
        # The load runs now, beside the job (once, every campaign's load was killed by the lab's own
        # sweep of leftovers as it started, and the ledger still said "1 busy process").
        assert len(busy_of(lab.run_dir)) == 1
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, rest[-3000:]
    record = ledger_of(rest)
    assert 1 <= record["faults_injected"] < 10 and record["load"] == 1
    assert record["final_weights"] == {"identical": False, "why": "interrupted"}
    assert (report_dir_of(rest) / "nodes" / "node1.log").stat().st_size > 0
    assert busy_of(lab.run_dir) == []
    assert_nothing_left(lab)
