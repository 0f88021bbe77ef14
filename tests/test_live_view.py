"""The live views during a real job: the page the lab's own Prometheus serves, loaded in a real
headless browser (Debian's Chromium); what every exporter serves, through Prometheus' own metric
lint (`promtool check metrics`); and `lab status --watch` under a real pseudo-terminal while a
kill-worker drill restarts the job."""

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from conftest import ARTIFACTS, REPO, Lab, chromium, needs_chromium, wait_for

from lab.health.prometheus import LIVE_PAGE, Prometheus, first_free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed (make host-deps)"),
    pytest.mark.xdist_group("live-view"),  # one worker starts the module's running job, once
]
ROW = re.compile(r'<tr class="rank[^"]*" data-rank="(\d+)">.*?<td class="step">([\d-]+)</td>', re.S)


@pytest.fixture(scope="module")
def running_job(tmp_path_factory):
    """A 2 x 2 trainer job with the lab's Prometheus, for the module's tests."""
    lab = Lab(run_dir=tmp_path_factory.mktemp("live") / "run")
    port = first_free_port(9290)
    up = lab("up", "--detach", "--prometheus", "on", "--prometheus-port", str(port), "--workload", "trainer",
             "--", "--steps", "3000", "--step-time", "0.1")  # fmt: skip
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        prom = Prometheus(lab.run_dir / "prometheus", port=port)
        assert f"live view: {prom.url}/{LIVE_PAGE}" in up.stdout
        wait_for(lambda: len(prom.query("lab_steps_total > 0")) == 4, 120, "four ranks scraped")
        wait_for(lambda: len(prom.query('up{job="lab-agents"} == 1')) == 2, 60, "both agents scraped")
        yield prom
    finally:
        lab("down", timeout=120)


@needs_chromium
def test_the_live_page_shows_one_row_per_rank_with_live_numbers(running_job):
    url = running_job.live_url
    first = chromium("--dump-dom", url)
    assert first.returncode == 0, first.stderr[-2000:]
    rows = {int(rank): int(step) for rank, step in ROW.findall(first.stdout)}
    assert sorted(rows) == [0, 1, 2, 3], first.stdout[-3000:]
    assert 'id="agents"' in first.stdout and first.stdout.count('class="agent"') == 2
    time.sleep(3)
    later = {int(rank): int(step) for rank, step in ROW.findall(chromium("--dump-dom", url).stdout)}
    assert all(later[r] > rows[r] for r in rows), (rows, later)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = chromium(f"--screenshot={ARTIFACTS / 'live-view.png'}", url)
    assert shot.returncode == 0 and (ARTIFACTS / "live-view.png").stat().st_size > 10_000


def test_every_exporter_passes_promtools_metric_lint(running_job):
    """Names follow Prometheus' conventions: units, _total counters, no reserved suffix on a gauge."""
    targets = running_job.query("up == 1")
    assert sorted(t["metric"]["job"] for t in targets).count("lab-ranks") == 4
    for target in targets:
        with urllib.request.urlopen(f"http://{target['metric']['instance']}/metrics", timeout=5) as response:
            text = response.read()
        lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, timeout=30)
        assert lint.returncode == 0 and not lint.stdout.strip(), (target["metric"], lint.stdout.decode())


def test_status_watch_shows_the_restart_count_rise_during_a_kill_worker_drill(tmp_path):
    import pexpect

    run_dir = tmp_path / "run"
    env = {**os.environ, "LAB_RUN_DIR": str(run_dir), "COLUMNS": "120", "LINES": "60"}
    # As from a terminal: a suite started in the background has SIGINT ignored, which the watch
    # would inherit, and then no Ctrl-C this test sends would reach it (as Lab.popen, conftest.py).
    # The terminal echoes the Ctrl-C as "^C" wherever the watch's output stands, which may be
    # inside a box-drawing character's three bytes (a CI run read b"\xe2" "^C" b"\x94\x80"):
    # undecodable bytes read as U+FFFD rather than ending the test.
    watch = pexpect.spawn(sys.executable, ["-m", "lab", "status", "--watch"], env=env, cwd=str(REPO),
                          dimensions=(60, 120), encoding="utf-8", codec_errors="replace", timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    drill = subprocess.Popen([sys.executable, "-m", "lab", "exercise", "run", "kill-worker"], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        watch.expect("waiting for a lab")
        # A rank row: │ rank │ node │ step │ steps/s │ last step │ restarts │, where a count above 0
        # is drawn bold (and coloured): terminal style codes may surround it.
        style = r"(?:\x1b\[[0-9;]*m)*"
        row = rf"│\s+(\d)\s+│\s+node\d\s+│\s+(\d+)\s+│[^│]*│[^│]*│\s*{style}\s*{{}}\s*{style}\s*│"
        watch.expect(row.format(0))  # the job's ranks on screen, no restart yet
        watch.expect(row.format(1), timeout=180)  # the same screen, redrawn after the kill: restart 1
        # Ctrl-C now, while this test still reads the terminal: a watch whose terminal nobody
        # reads (this test waiting on the drill) blocks in its redraw, as on a paused terminal.
        watch.sendintr()
        watch.expect(pexpect.EOF, timeout=60)
        output, _ = drill.communicate(timeout=400)
        assert drill.returncode == 0, output[-3000:]
    finally:
        if drill.poll() is None:
            drill.terminate()
            drill.wait(60)
        if watch.isalive():
            watch.sendintr()
            watch.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=60)
        watch.close(force=True)
    assert watch.exitstatus == 0
