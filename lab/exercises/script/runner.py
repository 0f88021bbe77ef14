"""One run of the user's script as a drill of the engine: the fault-free reference, or one fault.

Each run brings the lab up, runs the script in a working dir of its own (a fresh
`work/<label>` under the run dir, which `lab down` removes), and takes the lab down: no
checkpoint, relative or in /tmp of a node, survives from one run into the next. An
absolute --ckpt-dir is the user's to clear; a checkpoint found there at the start is
reported, not judged as a recovery.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from lab.errors import LabError
from lab.exercises import DrillOptions, forensics
from lab.exercises.script import judge, signals
from lab.exercises.script.compare import compare
from lab.exercises.script.spec import ScriptSpec
from lab.report import Report
from lab.topology import Topology

REFERENCE = "reference"
RERUN_WAIT_S = 60.0  # after a preemption, how long the other nodes get to notice before they are stopped
FORENSICS_AFTER_S = 2.0  # after a hang starts: the others are in the collective by then


@dataclass
class ScriptRun:
    """Duck-types a drill module for lab.exercises.engine.run_drill (NAME, SCRIPT, topology,
    trainer_args, run). fault: the drill module whose break_script it uses; None: the reference."""

    spec: ScriptSpec
    fault: ModuleType | None
    base_topology: Topology
    workdir: Path  # as the nodes see it
    keep_dir: Path  # where its report, timeline and result file are kept
    reference_result: Path | None = None
    NEEDS_PROMETHEUS = False

    def __post_init__(self) -> None:
        self.NAME = self.fault.NAME if self.fault else REFERENCE
        self.SUMMARY = self.fault.SUMMARY if self.fault else "your script, no fault"
        self.SCRIPT = self.spec.path
        ckpt = self.spec.ckpt_path(self.workdir)
        # Looked at before the lab starts: only an absolute --ckpt-dir can hold anything yet.
        self.found_at_start = signals.listing(ckpt)

    @property
    def kept_result(self) -> Path | None:
        return self.keep_dir / f"result-{Path(self.spec.compare).name}" if self.spec.compare else None

    def topology(self, options: DrillOptions) -> Topology:
        return self.base_topology.replace(script_wrapper=self.spec.wrapper(self.workdir))

    def trainer_args(self, options: DrillOptions) -> list[str]:
        return list(self.spec.args)

    def run(self, drill: Any, options: DrillOptions) -> Report:
        report = drill.new_report(self.NAME)
        report.facts.update(script=self.spec.path, script_args=list(self.spec.args), deadline_s=self.spec.deadline_s)
        report.facts["workdir"] = str(self.workdir)
        if self.found_at_start:
            report.check(
                "it started from a clean slate",
                False,
                f"{self.spec.ckpt_dir} already held {', '.join(self.found_at_start)} before the run: an absolute "
                "--ckpt-dir reused across runs (clear it, or make it relative); this is not judged as a recovery",
            )
        if self.fault is None:
            self._reference(drill, report)
        else:
            self._fault(drill, options, report)
        self._keep_result(report)
        report.facts["finding"] = judge.finding(report)
        report.explanation = report.facts["finding"]
        return report

    def _reference(self, drill: Any, report: Report) -> None:
        codes = wait_end(drill, self.spec.deadline_s + signals.FIRE_POINT_TIMEOUT_S)
        events = drill.events()
        found = signals.step_source(events)
        report.facts["progress"] = {"source": found[0] if found else "none", "unit": found[1] if found else None}
        if found:
            values = [e["step"] for e in signals.series(events, 0, *found)]
            report.facts["progress"].update(first=values[0] if values else None, last=values[-1] if values else None)
        report.facts["restarts"] = 0
        report.check(
            "the fault-free run finished with exit 0",
            all(c == 0 for c in codes.values()),
            f"node exit codes {codes}" + "".join(f"; {e}" for e in judge.errors(events, 0)[:1]),
        )

    def _fault(self, drill: Any, options: DrillOptions, report: Report) -> None:
        assert self.fault is not None
        ckpt = self.spec.ckpt_path(self.workdir)
        target = options.target_rank
        fire = signals.wait_fire_point(drill, target, options.at_step, self.spec.at_time_s, ckpt)
        if fire is None:
            report.check(
                "the fault fired while the job ran",
                False,
                f"the job ended (exit codes {drill.exit_codes()}) before rank {target} reached step "
                f"{options.at_step}: choose a lower --at-step",
            )
            return
        drill.progress(f"fire point: {fire['source']} {fire['unit']} {fire['value']}")
        fault = self.fault.break_script(drill, target, str(ckpt) if ckpt else None)
        recovery = self.fault.SCRIPT_RECOVERY
        if "forensics" in fault:  # taken by the fault itself, during it (partition-node)
            report.facts["forensics"] = fault.pop("forensics")
        elif getattr(self.fault, "SCRIPT_FORENSICS", False):  # a hang: ask every rank where it stands, now
            time.sleep(max(0.0, FORENSICS_AFTER_S - (time.time() - fault["time"])))
            report.facts["forensics"] = forensics.collect(drill.events_dir, drill.topology.world_size)
            drill.progress(f"forensics: {report.facts['forensics']['finding']}")
        codes = wait_end(drill, self.spec.deadline_s)
        if recovery == "rerun" and all(c is not None for c in codes.values()):
            drill.progress("starting the job again, as after a preemption")
            report.facts["rerun"] = True
            drill.runtime.rerun(drill.topology, self.spec.path, list(self.spec.args))
            codes = wait_end(drill, self.spec.deadline_s)
        judge.judge_fault(report, drill, recovery, fault, codes, fire)

    def _keep_result(self, report: Report) -> None:
        """Copy the result file out of the working dir (which `lab down` removes), and compare."""
        if not self.spec.compare or self.kept_result is None:
            return
        produced = self.spec.compare_path(self.workdir)
        self.keep_dir.mkdir(parents=True, exist_ok=True)
        if produced is not None and produced.is_file() and not produced.is_symlink():
            shutil.copyfile(produced, self.kept_result)
        if self.reference_result is not None:
            ok, detail = compare(self.kept_result, self.reference_result, self.spec.rtol)
            report.facts["compared"] = detail
            report.check("the result equals the fault-free reference's", ok, detail)


def wait_end(drill: Any, timeout_s: float) -> dict[str, int | None]:
    """Each node's exit status once all have ended, or as they stand after timeout_s (None:
    still running; lab down stops it). After a preemption-like end of one node, the others
    get RERUN_WAIT_S and are then stopped, as the job's end."""
    deadline = time.monotonic() + timeout_s
    drill.progress(f"waiting up to {timeout_s:g} s for the job to end")
    first_end = None
    while True:
        codes = drill.exit_codes()
        if all(c is not None for c in codes.values()):
            return codes
        if any(c is not None for c in codes.values()) and first_end is None:
            first_end = time.monotonic()
        if first_end is not None and time.monotonic() - first_end > RERUN_WAIT_S:
            for node in drill.runtime.attach():  # a fixed-size job cannot finish without the node
                if codes.get(node.name) is None:
                    node.stop(grace_s=5.0)
            first_end = None
        if time.monotonic() > deadline:
            return codes
        time.sleep(0.5)


def target_rank(fault: ModuleType, chosen: int | None, world_size: int) -> int:
    """The drill's default rank, or the last one when the script's world is smaller."""
    rank = min(fault.DEFAULT_TARGET_RANK, world_size - 1) if chosen is None else chosen
    if not 0 <= rank < world_size:
        raise LabError(f"--target-rank must be in [0, {world_size}) for this topology; got {rank}")
    return rank
