"""The lab's Prometheus: a real server, scraping every rank and agent found by file_sd.

Ranks and agents write their own target files into `targets/` as they start (see
rank_exporter.register_target), so Prometheus follows them as they come, go and
move between nodes after a restart. The alert rules are lab/health/rules.yml, the
one file used everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from lab import procs
from lab.errors import LabError
from lab.rundir import MARKER

RULES = Path(__file__).resolve().parent / "rules.yml"
# The live view (consoles/lab.html): console templates Prometheus serves itself at /consoles/.
CONSOLES = Path(__file__).resolve().parent / "consoles"
LIVE_PAGE = "consoles/lab.html"


def console_flags(consoles: Path = CONSOLES) -> list[str]:
    return [f"--web.console.templates={consoles}", f"--web.console.libraries={consoles}"]


INSTALL_HINT = "prometheus is not installed: `apt-get install prometheus` (or `make host-deps`) to watch the ranks"


def binary() -> str | None:
    return shutil.which("prometheus")


def wanted(mode: str, missing: str | None, log) -> bool:
    """Whether a lab starts Prometheus. mode: auto|on|off; missing: why it cannot (None: it can).
    "on" and missing is an error; "auto" and missing is a note."""
    if mode == "off":
        return False
    if missing:
        if mode == "on":
            raise LabError(missing)
        log(f"note: {missing}")
        return False
    return True


def config(targets_dir: Path, scrape_interval_s: float = 2.0, rules: Path = RULES) -> dict:
    """prometheus.yml as a dict (written as JSON, which is YAML)."""

    def job(name: str, pattern: str) -> dict:
        return {
            "job_name": name,
            # The exporters label every series with where it comes from (lab.health.labelled).
            "honor_labels": True,
            "file_sd_configs": [{"files": [str(targets_dir / pattern)], "refresh_interval": "2s"}],
        }

    return {
        "global": {
            "scrape_interval": f"{scrape_interval_s:g}s",
            "scrape_timeout": "1s",
            "evaluation_interval": f"{scrape_interval_s:g}s",
        },
        "rule_files": [str(rules)],
        "scrape_configs": [job("lab-ranks", "rank*.json"), job("lab-agents", "agent-*.json")],
    }


DEFAULT_PORT = 9090


def last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"


def first_free_port(start: int = DEFAULT_PORT, host: str = "127.0.0.1", tries: int = 100) -> int:
    """The first port from start on that nothing listens on: two labs each get a Prometheus."""
    import socket

    for port in range(start, min(start + tries, 65536)):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
                return port
            except OSError:
                continue
    raise LabError(f"no free port for Prometheus in {start}-{start + tries - 1}; pick one with --prometheus-port")


class Prometheus:
    def __init__(self, directory: Path, port: int | None = DEFAULT_PORT):
        """port None: the first free one from DEFAULT_PORT on."""
        self.dir = directory
        self.chosen_port = port is None  # then another free one will do, should this one be taken first
        self.port = port if port is not None else first_free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def live_url(self) -> str:
        return f"{self.url}/{LIVE_PAGE}"

    @property
    def targets_dir(self) -> Path:
        return self.dir / "targets"

    @property
    def config_path(self) -> Path:
        return self.dir / "prometheus.yml"

    def write_config(self, rules: Path = RULES) -> None:
        self.targets_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(config(self.targets_dir, rules=rules), indent=2))

    def start(self, run_dir: str, timeout_s: float = 30.0) -> None:
        """Start it and wait until it is the server answering on its port. A port found free can
        be taken before Prometheus binds it (another lab starting at the same moment): then, when
        the lab chose the port, the next free one is tried."""
        exe = binary()
        if exe is None:
            raise LabError(INSTALL_HINT)
        self.write_config()
        log = self.dir / "prometheus.log"
        for _ in range(5):
            argv = [
                exe,
                f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
                *console_flags(),
            ]
            server = procs.spawn(argv, log_path=log, env={**os.environ, MARKER: run_dir})
            self.wait_ready(timeout_s, lambda: log.read_text(errors="replace"), server)
            if server.poll() is None:
                return
            if not self.chosen_port or "address already in use" not in log.read_text(errors="replace"):
                raise LabError(f"prometheus exited at start: {last_line(log.read_text(errors='replace'))}")
            self.port = first_free_port(self.port + 1)
        raise LabError("prometheus found every port it tried taken; pick one with --prometheus-port")

    def wait_ready(self, timeout_s: float, read_log, server: subprocess.Popen | None = None) -> None:
        """Until /-/ready answers, from server's own process when the lab started it (not from
        whatever else listens on the port); returns early if server exits. Else a one-line
        error with the last line of read_log()."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if server is not None and server.poll() is not None:
                return
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200 and (server is None or server.pid in procs.listener_pids(self.port)):
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise LabError(f"prometheus did not become ready on :{self.port}: {last_line(read_log())}")

    def query(self, expr: str) -> list[dict]:
        """Instant query; [{'metric': {...}, 'value': float}, ...]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in body["data"]["result"]]

    def alerts(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=5) as response:
            return json.load(response)["data"]["alerts"]
