"""`lab why` and the card `lab run` prints when a job fails, on real failures: one rank of a
2 x 2 job on netns hosts is SIGKILLed, or killed by the kernel's OOM killer in a memory
cgroup the test makes. The card must name rank 1 and say how. A rank that raises, exits with
a status or hangs is judged on recorded runs: tests/unit/test_why_card.py."""

import subprocess

import pytest
from conftest import REPO, SCRIPTS, needs_netns, wait_for

from lab.bench.cages import memory_cgroup
from lab.errors import LabError
from lab.why import card as why

pytestmark = [pytest.mark.slow, needs_netns]
SCRIPT = SCRIPTS / "fail_one_rank.py"


def test_a_killed_rank_is_named_and_the_card_and_its_evidence_outlive_the_lab(lab):
    """The representative real run (the other ways to fail are judged on recorded runs in
    tests/unit/test_why_card.py): the card in `lab run`'s stream, then from `lab why` after
    the teardown, and the evidence it was drawn from kept beside it."""
    out = lab("run", str(SCRIPT), "--rank", "1", "--how", "kill", "--timeout", "5", timeout=300)
    assert out.returncode != 0, out.stdout[-3000:]
    card = out.stdout[out.stdout.index("first failure:") :]
    assert card.startswith("first failure: rank 1 on node"), card
    assert "killed by SIGKILL" in card and "SIGKILL from outside the job" in card, card
    assert "then rank" in card  # what the others did next
    # torchrun's own ChildFailedError summary is left out of the stream, and that is said. The
    # failing node always prints one; its peer may instead end on a lost store (node0 hosts it
    # and may exit first), whose traceback is printed whole: at least one, at most one per node.
    assert "Root Cause (first observed failure)" not in out.stdout
    assert 1 <= out.stdout.count("ChildFailedError summary left out") <= 2, out.stdout[-3000:]
    # The run dir's logs went with `lab run`'s teardown; the saved card and its evidence did not.
    again = lab("why")
    assert again.returncode == 0 and again.stdout.count("first failure: rank 1 on node") == 1, again.stdout
    (kept,) = (p for p in (lab.run_dir / "reports").glob("why-*") if p.is_dir())
    assert why.card(kept).first.rank == 1 and (kept / "nodes" / "node0" / "node.log").is_file()


@pytest.fixture
def oom_cgroup():
    """A memory cgroup with a 512 MiB limit that the test makes (v1 or v2) and removes afterwards;
    the failing rank joins it itself (tests/scripts/fail_one_rank.py --how oom)."""
    try:
        with memory_cgroup("test-oom", limit_mib=512) as path:
            yield path
    except LabError as e:
        pytest.skip(str(e))


def test_an_oom_killed_rank_is_named_with_the_kernels_line(lab, oom_cgroup, tmp_path):
    pidfile = tmp_path / "oom.pid"
    job = subprocess.Popen(
        lab.cmd("run", str(SCRIPT), "--rank", "1", "--how", "oom"),
        env={**lab.env(), "FAIL_OOM_PIDFILE": str(pidfile)},
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), 120, "the rank to write its pid")
        (oom_cgroup / "cgroup.procs").write_text(pidfile.read_text())
        stdout, _ = job.communicate(timeout=300)
    finally:
        if job.poll() is None:
            job.terminate()
            job.communicate(timeout=120)
    assert job.returncode != 0, stdout[-3000:]
    card = stdout[stdout.index("first failure:") :]
    assert card.startswith("first failure: rank 1 on node"), card
    assert "killed by the kernel's OOM killer (SIGKILL)" in card
    assert "note: kernel log: Memory cgroup out of memory: Killed process" in card, card
