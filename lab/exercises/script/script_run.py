"""One run of the user's script as a drill of the engine: the fault-free reference, or one fault.

Each run brings the lab up, runs the script in a working dir of its own (a fresh
`work/<label>` under the run dir, which `lab down` removes), and takes the lab down: no
checkpoint, relative or in /tmp of a node, survives from one run into the next. An
absolute --ckpt-dir is the user's to clear; a checkpoint found there at the start is
reported, not judged as a recovery.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from lab.errors import LabError
from lab.exercises import DrillOptions, forensics
from lab.exercises.script import judge, signals
from lab.exercises.script.compare import compare, keep
from lab.exercises.script.spec import PATTERN, ScriptSpec
from lab.exercises.seen import Seen
from lab.report import Report
from lab.topology import Topology

REFERENCE = "reference"
REPEAT = "reference-again"  # with --compare: is a second fault-free run's result the first's?
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
    host_files: bool = True  # the nodes' files are this machine's (Runtime.HOST_FILES); not in pods
    workdir_note: str = ""  # where the nodes do not share the working dir (Runtime.script_workdir_note)
    repeat: bool = False  # the fault-free run once more, its result compared with the reference's
    NEEDS_PROMETHEUS = False

    def __post_init__(self) -> None:
        self.NAME = self.fault.NAME if self.fault else REPEAT if self.repeat else REFERENCE
        self.SUMMARY = self.fault.SUMMARY if self.fault else "your script, no fault"
        self.SCRIPT = self.spec.path
        ckpt = self.spec.ckpt_path(self.workdir)
        # Looked at before the lab starts: only an absolute --ckpt-dir, or the user's --workdir, can
        # hold anything yet. A pod's volumes start empty.
        self.found_at_start = signals.listing(ckpt) if self.host_files else []

    @property
    def kept_result(self) -> Path | None:
        if not self.spec.compare:
            return None
        return self.keep_dir / f"result-{PATTERN.sub('_', Path(self.spec.compare).name)}"

    def topology(self, options: DrillOptions) -> Topology:
        return self.base_topology.replace(script_wrapper=self.spec.wrapper(self.workdir))

    def trainer_args(self, options: DrillOptions) -> list[str]:
        return list(self.spec.args)

    def run(self, drill: Any, options: DrillOptions) -> Report:
        """The act: fire the fault (or not: the reference), wait for the end, keep the result;
        then lab.exercises.script.judge draws the verdict from what was seen."""
        apart = drill.runtime.apart()
        if apart:
            raise LabError(
                f"a drill on your script: its ranks resume from what it saved in its working dir, and "
                f"{', '.join(apart)} does not share that disk with this machine; give the machines one disk at the run "
                f"dir's path (docs/ray.md), or drill the lab's trainer, which keeps a copy per node"
            )
        setup = {
            "script": self.spec.path,
            "script_args": list(self.spec.args),
            "deadline_s": self.spec.deadline_s,
            "workdir": str(self.workdir),
            "ckpt_dir": self.spec.ckpt_dir,
            "found_at_start": self.found_at_start,
            "own_workdir": bool(self.spec.workdir),
            "workdir_note": self.workdir_note,
            "repeat": self.repeat,
            "at_time_s": self.spec.at_time_s,
        }
        if self.fault is None:
            codes = drill.wait_end(self.spec.deadline_s + signals.FIRE_POINT_TIMEOUT_S, RERUN_WAIT_S)
            fire_point = {"at_step": options.at_step, "at_time_s": self.spec.at_time_s}  # where faults will fire
            seen = drill.snapshot(self.NAME, codes, fire_point=fire_point, **setup)
        else:
            seen = self._fault(drill, options, setup)
        seen.extra["compared"] = self._keep_result()
        seen.extra["result_written"] = bool(self.kept_result and self.kept_result.is_file())
        return judge.judge(seen)

    def _fault(self, drill: Any, options: DrillOptions, setup: dict) -> Seen:
        assert self.fault is not None
        ckpt = self.spec.ckpt_path(self.workdir)
        target = options.target_rank
        recovery = self.fault.SCRIPT_RECOVERY
        # With no step signal the fire point waits for a checkpoint file, where this machine sees them.
        seen_ckpt = ckpt if self.host_files else None
        fire = signals.wait_fire_point(drill, target, options.at_step, self.spec.at_time_s, seen_ckpt)
        if fire is None:
            unfired = {"fire": None, "target": target, "at_step": options.at_step, "recovery": recovery}
            return drill.snapshot(self.NAME, drill.exit_codes(), **unfired, **setup)
        drill.progress(f"fire point: {fire['source']} {fire['unit']} {fire['value']}")
        try:
            fault = self.fault.break_script(drill, target, str(ckpt) if ckpt else None, dict(options.own))
        except LabError as refused:  # nothing left to hit: the script died on its own first?
            if not judge.errors(drill.events(), 0):
                raise
            drill.progress(f"the fault found nothing to hit ({refused}): the script had failed already")
            unfired = {"fire": None, "target": target, "at_step": options.at_step, "recovery": recovery}
            return drill.snapshot(self.NAME, drill.exit_codes(), **unfired, **setup)
        found = fault.pop("forensics", None)  # taken by the fault itself, during it (partition-node)
        if found is None and getattr(self.fault, "SCRIPT_FORENSICS", False):  # a hang: ask every rank, now
            time.sleep(max(0.0, FORENSICS_AFTER_S - (time.time() - fault["time"])))
            found = forensics.collect(drill.events_dir, drill.topology.world_size, relay=drill.runtime.gather)
            drill.progress(f"forensics: {found['finding']}")
        waited_s, pg_timeout_s = self.spec.deadline_s, None
        if getattr(self.fault, "SCRIPT_HANGS_FOR_GOOD", False):
            waited_s, pg_timeout_s = signals.hang_wait_s(drill.events(), self.spec.deadline_s)
        gone = frozenset({fault["node"]} if fault.get("lost_for_good") else ())  # an elastic job goes on without it
        codes = drill.wait_end(waited_s, RERUN_WAIT_S, gone)
        rerun = recovery == "rerun" and all(c is not None for c in codes.values())
        if rerun:
            drill.progress("starting the job again, as after a preemption")
            drill.runtime.rerun(drill.topology, self.spec.path, list(self.spec.args))
            codes = drill.wait_end(self.spec.deadline_s, RERUN_WAIT_S)
        extra = {"fire": fire, "target": target, "recovery": recovery, "rerun": rerun, "forensics": found}
        extra.update(waited_s=waited_s, pg_timeout_s=pg_timeout_s)
        return drill.snapshot(self.NAME, codes, fault=fault, **extra, **setup)

    def _keep_result(self) -> list | None:
        """Copy the result file out of the working dir (which `lab down` removes), and compare:
        [equal, how], or None with nothing to compare."""
        if not self.spec.compare or self.kept_result is None:
            return None
        keep(self.spec.compare_path(self.workdir), self.kept_result)
        if self.reference_result is None:
            return None
        return list(compare(self.kept_result, self.reference_result, self.spec.rtol))


def target_rank(fault: ModuleType, chosen: int | None, world_size: int) -> int:
    """The drill's default rank, or the last one when the script's world is smaller."""
    rank = min(fault.DEFAULT_TARGET_RANK, world_size - 1) if chosen is None else chosen
    if not 0 <= rank < world_size:
        raise LabError(f"--target-rank must be in [0, {world_size}) for this topology; got {rank}")
    return rank
