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
        self.port = port if port is not None else first_free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.live_url = f"{self.url}/{LIVE_PAGE}"

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
        exe = binary()
        if exe is None:
            raise LabError(INSTALL_HINT)
        self.write_config()
        argv = [
            exe,
            f"--config.file={self.config_path}",
            f"--storage.tsdb.path={self.dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
            *console_flags(),
        ]
        procs.spawn(argv, log_path=self.dir / "prometheus.log", env={**os.environ, MARKER: run_dir})
        self.wait_ready(timeout_s, lambda: (self.dir / "prometheus.log").read_text(errors="replace"))

    def wait_ready(self, timeout_s: float, read_log) -> None:
        """Until /-/ready answers; else a one-line error with the last line of read_log()."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        log = read_log().strip().splitlines()
        raise LabError(f"prometheus did not become ready on :{self.port}: {log[-1] if log else 'no output'}")

    def query(self, expr: str) -> list[dict]:
        """Instant query; [{'metric': {...}, 'value': float}, ...]."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        with urllib.request.urlopen(url, timeout=5) as response:
            body = json.load(response)
        return [{"metric": r["metric"], "value": float(r["value"][1])} for r in body["data"]["result"]]

    def alerts(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/alerts", timeout=5) as response:
            return json.load(response)["data"]["alerts"]
