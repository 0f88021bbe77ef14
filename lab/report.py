"""An exercise's result: checks, a verdict, report.json, timeline.png and a terminal summary."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab import files
from lab.health.events import Event


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class Report:
    exercise: str
    runtime: str
    world_size: int
    checks: list[Check] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    facts: dict = field(default_factory=dict)  # restarts, lost_steps, recovery, ...
    explanation: str = ""
    skipped: str = ""  # why the exercise could not run here (a GPU-only lesson on a CPU machine)
    evidence: Any = None  # what the verdict was drawn from (lab.exercises.seen.Seen), kept as seen.json

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        return bool(ok)

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skip"
        return "pass" if self.checks and all(c.ok for c in self.checks) else "fail"

    def to_json(self) -> dict:
        return {
            "exercise": self.exercise,
            "runtime": self.runtime,
            "verdict": self.verdict,
            "world_size": self.world_size,
            "faults": self.faults,
            **self.facts,
            "checks": [c.__dict__ for c in self.checks],
            "explanation": self.explanation,
            **({"skipped": self.skipped} if self.skipped else {}),
        }

    def write(self, directory: Path, events: list[dict]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        files.write_text(directory / "report.json", json.dumps(self.to_json(), indent=2, default=str) + "\n")
        if self.evidence is not None:  # the judge can draw the verdict again from it, with no run
            files.write_text(directory / "seen.json", json.dumps(self.evidence.to_json(), default=str) + "\n")
        if events:  # a drill's job; lessons run several short jobs and compare their output
            timeline(events, self.faults, directory / "timeline.png", title=f"{self.exercise}: {self.verdict}")

    def summary(self, out=sys.stdout) -> None:
        out.write(f"\n{self.exercise} on {self.runtime}, {self.world_size} ranks\n")
        for c in self.checks:
            out.write(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}{': ' + c.detail if c.detail else ''}\n")
        style = self.facts.get("recovery_style")
        if style:
            out.write(f"  recovery style: {style['style']} ({style['why']})\n")
        fell = self.facts.get("fell_back")
        if fell:  # in-process recovery met what it cannot survive (lab.exercises.inprocess_verdict)
            out.write(f"  fell back to: {fell['to']} ({fell['why']})\n")
        recovery = self.facts.get("recovery")
        if recovery:
            out.write(
                "  recovery, seconds: " + ", ".join(f"{k} {v:.2f}" for k, v in recovery.items() if v is not None) + "\n"
            )
        if self.skipped:
            out.write(f"  skipped: {self.skipped}\n")
        if self.explanation:
            out.write(f"  why: {self.explanation}\n")
        out.write(f"verdict: {self.verdict.upper()}\n")


def timeline(events: list[dict], faults: list[dict], path: Path, title: str) -> None:
    """Per-rank step against time, with faults (red) and worker-group restarts (orange)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t0 = min((e["time"] for e in events), default=0.0)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for rank in sorted({e["rank"] for e in events}):
        points = [(e["time"] - t0, e["step"]) for e in events if e["event"] == Event.STEP and e["rank"] == rank]
        if points:
            xs, ys = zip(*points, strict=True)
            ax.plot(xs, ys, ".", markersize=3, label=f"rank {rank}")
    for restart in sorted({e["restart"] for e in events if e["restart"] > 0}):
        first = min(e["time"] for e in events if e["restart"] == restart)
        ax.axvline(first - t0, color="orange", linestyle="--", label=f"restart {restart} starts")
    for fault in faults:
        ax.axvline(fault["time"] - t0, color="red", label=f"{fault['fault']} on {fault['node']}")
    ax.set_xlabel("seconds since the first event")
    ax.set_ylabel("training step")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:  # a run with no step, fault or restart draws none (and says so)
        ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    files.replace_with(path, lambda f: fig.savefig(f, dpi=100, format="png"))
    plt.close(fig)
