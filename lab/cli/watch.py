"""`lab status --watch`: a live terminal view of a lab, redrawn every second (rich).

Read from the run directory, so it needs no Prometheus and works from any shell, also
while a drill runs: the nodes from state.json and their runtime, each rank's step, pace
and restarts from the tail of its event log, and the firing alerts when the lab runs a
Prometheus. It waits for a lab to appear and keeps watching until Ctrl-C.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from lab import runtimes
from lab.health import prometheus, stragglers
from lab.health.events import Event
from lab.health.stragglers import RATIO
from lab.rundir import RunDir
from lab.runtimes import state as runstate

TAIL_BYTES = 64 * 1024  # a rank's last records: enough for its last steps and its last restart


@dataclass
class RankNow:
    rank: int
    node: str = "?"
    step: int = 0
    restarts: int = 0
    last_step_time: float = 0.0
    steps_per_s: float | None = None
    steps: list[tuple[float, int]] = field(default_factory=list)
    score: float | None = None  # as a straggler, over the last steps every rank recorded (lab.health.stragglers)
    ended: str | None = None  # its EXIT record's reason, when that is its latest word (a later step clears it)


def tail_records(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        lines = f.read().decode(errors="replace").splitlines()[1 if size > TAIL_BYTES else 0 :]
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn last line, or the cut at the start of the tail
    return records


def ranks_now(events_dir: Path) -> list[RankNow]:
    ranks: dict[int, RankNow] = {}
    everyone: list[dict] = []
    for path in sorted(events_dir.glob("rank*.jsonl")) if events_dir.is_dir() else []:
        records = tail_records(path)
        everyone += records
        for record in records:
            now = ranks.setdefault(record["rank"], RankNow(record["rank"]))
            now.node = record.get("node", now.node)
            now.restarts = max(now.restarts, record.get("restart", 0))
            if record.get("event") == Event.STEP:
                now.step, now.last_step_time, now.ended = record["step"], record["time"], None
                now.steps.append((record["time"], record["step"]))
            elif record.get("event") == Event.EXIT:
                now.ended = str(record.get("reason"))
    for now in ranks.values():
        recent = [s for s in now.steps if s[0] >= now.last_step_time - 5.0]
        if len(recent) >= 2 and recent[-1][0] > recent[0][0]:
            now.steps_per_s = (len(recent) - 1) / (recent[-1][0] - recent[0][0])
    for rank, score in stragglers.latest_scores(everyone).items():
        if rank in ranks:
            ranks[rank].score = score
    return sorted(ranks.values(), key=lambda r: r.rank)


def firing_alerts(url: str | None) -> list[str] | None:
    """Names of the firing alerts (with their rank or node); None without a Prometheus."""
    if not url:
        return None
    try:
        alerts = prometheus.Prometheus(Path("."), port=int(url.rsplit(":", 1)[1])).alerts()
    except OSError:
        return None
    found = []
    for alert in alerts:
        if alert.get("state") == "firing":
            labels = alert.get("labels", {})
            where = labels.get("rank") and f"rank {labels['rank']}" or labels.get("node", "")
            found.append(f"{labels.get('alertname', '?')} ({where})" if where else labels.get("alertname", "?"))
    return found


def view(run_dir: RunDir) -> Group:
    state = runstate.load(run_dir)
    if state is None:
        return Group(Text(f"waiting for a lab in {run_dir.path} (Ctrl-C to stop)"))
    title = (
        f"{state.runtime} lab, {state.topology.nodes} nodes x {state.topology.nproc_per_node} workers: "
        f"{Path(state.script).name} {' '.join(state.script_args)}"
    )
    nodes = Table(title="nodes", title_justify="left")
    for column in ("node", "address", "status"):
        nodes.add_column(column)
    for node in runtimes.create(state.runtime, run_dir).attach():
        code = node.exit_code()
        nodes.add_row(node.name, node.address, "running" if code is None else f"exited {code}")
    ranks = Table(title="ranks", title_justify="left")
    for column in ("rank", "node", "step", "steps/s", "last step", "restarts", "straggler score"):
        ranks.add_column(column, justify="left" if column == "node" else "right")
    now = time.time()
    for r in ranks_now(run_dir.path / "events"):
        age = now - r.last_step_time if r.last_step_time else None
        ranks.add_row(
            str(r.rank),
            r.node,
            str(r.step),
            "-" if r.steps_per_s is None else f"{r.steps_per_s:.1f}",
            "-" if age is None else Text(f"{age:.1f}s ago", style="bold red" if age > 10 else ""),
            Text(str(r.restarts), style="bold yellow" if r.restarts else ""),
            "-" if r.score is None else Text(f"{r.score:.1f}", style="bold red" if r.score >= RATIO else ""),
        )
    alerts = firing_alerts(state.prometheus)
    alert_line = (
        Text("alerts: no Prometheus for this lab", style="dim")
        if alerts is None
        else Text("alerts firing: " + (", ".join(alerts) or "none"), style="bold red" if alerts else "")
    )
    return Group(Text(title, style="bold"), nodes, ranks, alert_line)


def watch(run_dir: RunDir, interval_s: float = 1.0, console: Console | None = None) -> int:
    """Redraw every interval_s until Ctrl-C (exit 0: watching is not a job that failed)."""
    try:
        with Live(view(run_dir), console=console or Console(), refresh_per_second=4, screen=False) as live:
            while True:
                time.sleep(interval_s)
                live.update(view(run_dir))
    except KeyboardInterrupt:
        return 0
