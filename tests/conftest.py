"""Shared test helpers: run the real `lab` CLI with a private run directory, always take it down."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lab import procs
from lab.runtimes import netns
from lab.runtimes.tempdirs import ray_session_prefix

pytest_plugins = ["suite_schedule"]  # the system tier's order, and when each test ran (tests/suite_schedule.py)
REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "scripts"

ARTIFACTS = Path(os.environ.get("LAB_TEST_ARTIFACTS", REPO / "test-artifacts"))
needs_chromium = pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium is not installed (make host-deps)"
)
# Loopback labs share the machine's ports (rendezvous, exporters): the system tier runs their
# tests in one worker, one at a time (pytest-xdist's loadgroup).
loopback_labs = pytest.mark.xdist_group("loopback")
needs_netns = pytest.mark.skipif(
    netns.unavailable_reason() is not None, reason=f"netns hosts unavailable: {netns.unavailable_reason()}"
)


@pytest.fixture(scope="session", autouse=True)
def reference_cache(tmp_path_factory):
    """The drills' reference checksums (lab.exercises.reference_cache) shared by this run's
    tests, and only theirs: never the user's ~/.cache, never an earlier run's. Under xdist the
    run's workers share one (their basetemps' parent is the run's): a reference one worker ran
    is not run again by the other (entries are written atomically, lab.files)."""
    before = os.environ.get("XDG_CACHE_HOME")
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "xdg-cache"
        shared.mkdir(mode=0o700, exist_ok=True)
    else:
        shared = tmp_path_factory.mktemp("xdg-cache")
    os.environ["XDG_CACHE_HOME"] = str(shared)
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before


@dataclass
class Lab:
    run_dir: Path

    @property
    def lab_id(self) -> str:
        """The id in the run dir's mark (lab down keeps the mark; a test that needs the id after
        the dir is gone reads it first)."""
        from lab.rundir import RunDir

        mark = RunDir(self.run_dir).mark()
        assert mark is not None, f"{self.run_dir} carries no lab mark"
        return mark.lab_id

    def env(self) -> dict[str, str]:
        return {**os.environ, "LAB_RUN_DIR": str(self.run_dir)}

    def cmd(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "lab", *args]

    def __call__(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.cmd(*args), env=self.env(), capture_output=True, text=True, timeout=timeout, cwd=REPO
        )

    def popen(self, *args: str) -> subprocess.Popen:
        # As from a terminal: a test run started in the background (`make test &`) has SIGINT
        # ignored, and the child would inherit that and never see the Ctrl-C a test sends.
        return subprocess.Popen(
            self.cmd(*args),
            env=self.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )


@pytest.fixture
def lab(tmp_path):
    """The lab CLI bound to a fresh run dir; `lab down` runs afterwards even if the test failed,
    unless the test made nothing: no run dir (every command that starts anything claims it
    first) and no process carrying its mark. Most refusal tests make nothing, and a `lab down`
    each cost the fast tier 16 s."""
    handle = Lab(run_dir=tmp_path / "run")
    try:
        yield handle
    finally:
        if os.path.lexists(handle.run_dir) or procs.marked_pids(str(handle.run_dir.resolve())):
            handle("down", timeout=120)


@pytest.fixture
def short_tmpdir():
    """A TMPDIR of the test's own for processes it starts bare, where no lab gives them one
    (torchrun's torchelastic_* log dir, multiprocessing's pymp-* socket folder, which a SIGKILLed
    process cannot remove). Short and in the system temp dir: a socket's path must stay under
    108 bytes, which one under a pytest tmp_path can pass. Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="tlab-t-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def left_behind(run_dir: Path, lab_id: str) -> list[str]:
    """What one lab still has running or lying about: its marked processes, hosts, firewall
    rules, Ray session and Ray's processes. Only that lab's: the system tier runs several tests
    at a time, so another test's lab may well be up."""
    found = [f"process {pid}" for pid in procs.marked_pids(str(run_dir.resolve()))]
    found += netns.leftovers(lab_id)
    session = ray_session_prefix(lab_id)
    ray = subprocess.run(["pgrep", "-f", session], capture_output=True, text=True).stdout.split()
    found += [f"ray process {pid}" for pid in ray]
    found += [f"dir {d}" for d in Path(tempfile.gettempdir()).glob(f"{session}*")]
    return found


@contextlib.contextmanager
def bench_leaves_nothing(bench: str):
    """`lab bench BENCH` run inside: afterwards no process of its cells' labs runs and no temp dir
    of theirs (lab-bench-BENCH-*, lab.bench.side_by_side.run_in_temp) is left."""
    prefix = str(Path(tempfile.gettempdir()) / f"lab-bench-{bench}-")
    dirs = lambda: set(Path(tempfile.gettempdir()).glob(f"lab-bench-{bench}-*"))  # noqa: E731
    before = dirs()
    yield
    from lab.rundir import MARKER

    assert [p for p in procs.marked_pids() if procs.environ(p).get(MARKER, "").startswith(prefix)] == []
    assert dirs() <= before


def chromium(*args: str) -> subprocess.CompletedProcess:
    """Headless Chromium as the machine allows it: no sandbox as root, no network of its own."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    profile = Path(tempfile.mkdtemp(prefix=".chromium-profile-", dir=ARTIFACTS))  # one per call: tests run side by side
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1100,700"]  # fmt: skip
    try:
        return subprocess.run(["chromium", *flags, *args], capture_output=True, text=True, timeout=90)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def torchrun(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Bare torchrun (no lab), the way the lesson runs its scripts.

    --log-dir keeps torchrun from leaving a /tmp/torchelastic_* directory behind.
    """
    with tempfile.TemporaryDirectory(prefix="lab-test-") as logs:
        return subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", f"--log-dir={logs}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
        )


def wait_for(condition, timeout_s: float, what: str):
    """condition()'s first truthy value within timeout_s, polled every 0.5 s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def wait_for_output(proc, text: str, count: int, timeout_s: float) -> bool:
    """Read proc's output until `text` has appeared `count` times; never block past the deadline."""
    deadline, seen, buffer = time.monotonic() + timeout_s, 0, ""
    while seen < count and time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536).decode(errors="replace")
            if not chunk:
                break
            buffer += chunk
            seen = buffer.count(text)
    return seen >= count


def report_of(out) -> dict:
    """The report.json an exercise run printed the path of (`report: PATH[, timeline: ...]`)."""
    line = next(line for line in out.stdout.splitlines() if line.startswith("report: "))
    return json.loads(open(line.split()[1].rstrip(",")).read())


@pytest.fixture(scope="session")
def images():
    """The cpu node image and Debian's Prometheus image, built once a session as CI builds them
    (tests/docker_support.py); a missing daemon fails the Docker tests, it does not skip them."""
    from docker_support import images_or_fail

    return images_or_fail()


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


def lab_in_process(capsys, *args: str) -> Ran:
    """The `lab` CLI's main() in this process: the same code as the command, without a Python
    start-up per call (for the many one-line-refusal cases; the command itself is tested too)."""
    from lab.cli import main

    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:  # argparse's own refusals
        code = e.code if isinstance(e.code, int) else 2
    out = capsys.readouterr()
    return Ran(code, out.out, out.err)
