"""What a drill saw: the evidence its verdict is drawn from, apart from the run that gathered it.

A drill acts (waits, injects, waits for the job) and gathers a `Seen`; its judge turns a
`Seen` into a Report and touches nothing else. So a verdict can be re-drawn without any
process: every drill's report dir holds `seen.json`, and tests/fixtures/drills/ keeps ones
recorded from real runs (scripts/record-fixtures.sh) for the judges' unit tests.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.report import Report
from lab.topology import Topology


@dataclass
class Seen:
    exercise: str
    runtime: str
    topology: Topology
    faults: list[dict] = field(default_factory=list)  # what was injected, when, where (Drill.faults)
    codes: dict[str, int | None] = field(default_factory=dict)  # each node's exit status (None: running)
    events: list[dict] = field(default_factory=list)  # the ranks' event logs, merged
    agents: list[dict] = field(default_factory=list)  # the agents' event logs, merged
    logs: dict[str, str] = field(default_factory=dict)  # node logs, for judges that read them
    reference: list[str] | None = None  # final checksums of the uninterrupted reference run
    reference_source: str | None = None  # "ran" or "cached"
    extra: dict[str, Any] = field(default_factory=dict)  # a drill's own measurements, by name

    def injected(self, fault: str) -> dict:
        """The first fault of that name (a Node method: kill_worker, pause_worker, ...)."""
        return next(f for f in self.faults if f["fault"] == fault)

    def new_report(self) -> Report:
        report = Report(self.exercise, self.runtime, self.topology.world_size, faults=self.faults)
        report.evidence = self
        return report

    def to_json(self) -> dict:
        body = dataclasses.asdict(self)
        body["topology"] = dataclasses.asdict(self.topology)
        return body

    @classmethod
    def from_json(cls, body: dict) -> Seen:
        return cls(**{**body, "topology": Topology.from_json(body["topology"])})

    @classmethod
    def load(cls, path: Path) -> Seen:
        return cls.from_json(json.loads(path.read_text()))
