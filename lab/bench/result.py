"""What every `lab bench` run leaves behind: its command, its figures, a Markdown section.

Each run saves NAME.json in its output directory; `lab bench docs` assembles those into
docs/benchmarks.md, so the page always shows what was last measured, and how.
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lab import files


@dataclass
class BenchResult:
    name: str
    command: str
    markdown: list[str]  # the section's body: tables, goals, explanations
    figures: dict = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def save(self, out_dir: Path) -> Path:
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"{self.name}.json"
        files.write_text(path, json.dumps(asdict(self), indent=2) + "\n")
        return path

    @staticmethod
    def load(path: Path) -> BenchResult:
        return BenchResult(**json.loads(path.read_text()))


def this_command() -> str:
    """The command line as the user typed it, with `lab` for the console script."""
    argv = list(sys.argv)
    argv[0] = "lab" if argv[0].endswith("lab") or argv[0].endswith("__main__.py") else argv[0]
    return shlex.join(argv)


def goal_line(goal: str, met: bool, detail: str) -> str:
    return f"- Goal: {goal}: **{'met' if met else 'missed'}** ({detail})"
