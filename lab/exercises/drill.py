"""The handle an exercise's timeline works with (lab.exercises.engine builds it, one per run):
the nodes' agents (Ray actors that own each node's faults), the events, the clock, the wait
for the job's end and what it left, and the uninterrupted reference to compare against. Also
the two helpers most drills share: the paced trainer's arguments and a fault marked with its
rank."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

from lab import files
from lab.errors import LabError
from lab.exercises import forensics, observe, reference_cache
from lab.exercises.seen import Seen
from lab.exercises.whereabouts import Whereabouts
from lab.health.events import read_events
from lab.report import Report
from lab.runtimes.base import Runtime
from lab.runtimes.ray_calls import ray_get
from lab.topology import Topology
from lab.workloads import script_path

T = TypeVar("T")


def paced_trainer(steps: int, ckpt_every: int, step_time: float = 0.1) -> list[str]:
    """The trainer arguments most drills use: a short run, paced so a drill can act mid-way."""
    return ["--steps", str(steps), "--ckpt-every", str(ckpt_every), "--step-time", str(step_time)]


def aimed(fault: dict[str, Any], rank: int) -> dict[str, Any]:
    """The fault record (as kept in Drill.faults), marked with the rank it hit."""
    fault["rank"] = rank
    return fault


REFERENCE_STALL_S = 120  # a reference with no new step this long has stopped (its start: well under)


class TimedOut(LabError):
    """A wait of the drill's ran past its bound (the message says what for)."""


@dataclass
class Drill:
    """What an exercise's timeline works with: the nodes' agents, the events, the clock."""

    runtime: Runtime  # the runtime the lab runs on (one with DRILLS: local, docker, ray)
    topology: Topology
    agents: dict[str, Any]  # node name -> Ray actor handle of its NodeAgent, in node-index order
    events_dir: Path
    ckpt_dir: str  # the checkpoints' folder as a node sees it (corrupt-checkpoint reaches in there)
    ray: Any  # the ray module
    started: float = field(default_factory=time.time)
    faults: list[dict[str, Any]] = field(default_factory=list)
    out: TextIO = sys.stdout
    workload: str = ""  # the job's script (a lab workload, or a user's); "": the trainer
    _seen: Whereabouts | None = field(default=None, repr=False)

    @property
    def store_host(self) -> str:
        """The node that hosts the c10d rendezvous store: node 0 (node0; a pod: torchrun-lab-0)."""
        return next(iter(self.agents))  # agents are in node-index order

    def new_report(self, exercise: str) -> Report:
        """The exercise's report; it shares the drill's list of injected faults."""
        return Report(exercise, self.runtime.name, self.topology.world_size, faults=self.faults)

    def progress(self, message: str) -> None:
        try:
            self.out.write(f"[{time.time() - self.started:6.1f}s] {message}\n")
            self.out.flush()
        except BrokenPipeError:  # the reader went away (`| head`): the drill, and its teardown, go on
            self.out = open(os.devnull, "w")

    def events(self) -> list[dict]:
        return list(read_events(self.events_dir)) if self.events_dir.exists() else []

    def wait_for(self, condition: Callable[[], T | None], timeout_s: float, what: str) -> T:
        self.progress(f"waiting for {what}")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = condition()
            if value:
                return value
            time.sleep(0.05)
        raise TimedOut(f"timed out after {timeout_s:.0f}s waiting for {what}")

    def last_step(self, rank: int) -> int:
        return self._whereabouts().last_step(rank)

    def reach(self, rank: int, step: int, timeout_s: float = 120) -> tuple[str, int]:
        """Wait until `rank` has completed `step`; return where it runs: (node name, local rank)."""
        self.wait_for(lambda: self.last_step(rank) >= step, timeout_s, f"rank {rank} at step {step}")
        return self.locate(rank)

    def locate(self, rank: int) -> tuple[str, int]:
        """(node name, local rank) where a global rank runs now."""
        return self._whereabouts().locate(rank)

    def _whereabouts(self) -> Whereabouts:
        """The ranks' starts and steps read as the logs grow (kept per events folder)."""
        if self._seen is None or self._seen.events_dir != self.events_dir:
            self._seen = Whereabouts(self.events_dir)
        return self._seen

    def inject(self, node: str, fault: str, **kwargs: Any) -> dict[str, Any]:
        try:
            record = ray_get(self.agents[node].inject.remote(fault, **kwargs), 120, f"{fault} on {node}")
        except self.ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, LabError):  # a fault this runtime cannot inject, say: one line
                raise LabError(f"{fault} on {node}: {e.cause}") from None
            raise
        self.faults.append(record)
        self.progress(f"injected {fault} on {node} {kwargs or ''}".rstrip())
        return record

    def exit_codes(self) -> dict[str, int | None]:
        """Each node's exit status now (None: still running)."""
        return {
            name: ray_get(agent.exit_code.remote(), 60, f"{name}'s exit status") for name, agent in self.agents.items()
        }

    def ended(self) -> dict[str, int] | None:
        """Each node's exit status once every node has ended; None while one still runs."""
        found = self.exit_codes()
        return found if all(c is not None for c in found.values()) else None  # type: ignore[return-value]

    def wait_job(self, timeout_s: float) -> dict[str, int]:
        try:
            return self.wait_for(self.ended, timeout_s, "the job to end")
        except TimedOut as e:  # asked before the teardown ends them
            raise TimedOut(f"{e}: {self.standing()}") from None

    def standing(self, events_dir: Path | None = None) -> str:
        """Where each rank stands now, in one line (lab.exercises.forensics.where_they_stand), of
        the job whose events go to events_dir (default: the drill's own job)."""
        events_dir = events_dir or self.events_dir
        events = list(read_events(events_dir)) if events_dir.exists() else []
        return forensics.where_they_stand(events_dir, self.topology.world_size, events, self.runtime.gather)

    def wait_job_while_stepping(self, events_dir: Path, stall_s: float) -> dict[str, int]:
        """Until the job ends, however long it runs, while its ranks keep stepping: an unpaced
        run of a long campaign's steps takes minutes on a slow or busy machine (one outlived a
        fixed 240 s bound, three times its quiet time, and took the campaign's ledger with it).
        A job with no new step for stall_s is stopped waiting for, saying where it stands."""
        seen, front, moved = Whereabouts(events_dir), -1, time.monotonic()
        while (codes := self.ended()) is None:
            now = max(seen.look().highest.values(), default=0)
            if now > front:
                front, moved = now, time.monotonic()
            elif time.monotonic() - moved > stall_s:
                stood = self.standing(events_dir)
                raise TimedOut(f"no step for {stall_s:.0f}s waiting for the job to end (at step {front}): {stood}")
            time.sleep(0.5)
        return codes

    def wait_failed(self, timeout_s: float) -> dict[str, int | None]:
        """Wait until a node has failed, or every node ended: a fixed-size job with a failed node
        cannot finish, while its other nodes may wait out a long timeout before they notice."""

        def codes() -> dict[str, int | None] | None:
            found = self.exit_codes()
            ended = [c for c in found.values() if c is not None]
            return found if len(ended) == len(found) or any(c != 0 for c in ended) else None

        return self.wait_for(codes, timeout_s, "a node to fail")

    def wait_end(self, timeout_s: float, alone_s: float, gone: frozenset[str] = frozenset()) -> dict[str, int | None]:
        """Each node's exit status once all have ended, or as they stand after timeout_s (None:
        still running; lab down stops it). Once a node has ended, the others get alone_s to end
        on their own and are then stopped, as a scheduler ends a fixed-size job that lost a node
        (it cannot finish without it: a preempted node's peers wait for it in the rendezvous).
        gone: nodes lost for good from an elastic job, which goes on without them: not such an end."""
        deadline = time.monotonic() + timeout_s
        self.progress(f"waiting up to {timeout_s:g} s for the job to end")
        first_end = None
        while True:
            codes = self.exit_codes()
            if all(c is not None for c in codes.values()) or time.monotonic() > deadline:
                return codes
            if first_end is None and any(c is not None for n, c in codes.items() if n not in gone):
                first_end = time.monotonic()
            if first_end is not None and time.monotonic() - first_end > alone_s:
                for node in self.runtime.attach():
                    if codes.get(node.name) is None:
                        node.stop(grace_s=5.0)
                first_end = None
            time.sleep(0.1)

    def node_logs(self) -> dict[str, str]:
        # The nodes write their logs: read through no link, no FIFO, the last 8 MiB at most.
        return {n.name: files.read_text(n.log_path, 8 << 20, tail=True) or "" for n in self.runtime.attach()}

    def gather(
        self,
        exercise: str,
        wait_s: float | None,
        *,
        logs: bool = False,
        reference: list[str] | None = None,
        **extra: Any,
    ) -> Seen:
        """Wait for the job to end (wait_s None: not at all), then gather what it left: events,
        agents' records, exit codes, node logs (when the judge reads them) and, given the trainer's
        arguments, the reference's checksums (not after a failed job: no final weights to compare)."""
        codes: dict[str, int | None] = dict(self.wait_job(wait_s)) if wait_s is not None else self.exit_codes()
        seen = self.snapshot(exercise, codes, logs=logs, **extra)
        if reference is not None and any(code not in (0, None) for code in codes.values()):
            seen.reference_source = "not run: the job failed, and left no final weights to compare"
        elif reference is not None:
            checksums, seen.reference_source = self.reference_checksums(reference)
            seen.reference = sorted(checksums)
        return seen

    def snapshot(self, exercise: str, codes: dict[str, int | None], *, logs: bool = False, **extra: Any) -> Seen:
        """What the job shows now, with the exit codes the caller waited for."""
        seen = Seen(exercise, self.runtime.name, self.topology, faults=self.faults, codes=codes, extra=extra)
        seen.events, seen.agents = self.events(), observe.agent_events(self.events_dir)
        seen.logs = self.node_logs() if logs else {}
        return seen

    def reference_checksums(self, trainer_args: list[str]) -> tuple[set[str], str]:
        """Final weights of an uninterrupted, unpaced run of the same job, in its own directories,
        and where they came from: "ran", or "cached" (an identical job's, lab.exercises.reference_cache)."""
        args = [*trainer_args, "--step-time", "0"]
        key = reference_cache.job_key(self.topology, "trainer", args) if self.runtime.HOST_CODE else None
        cached = reference_cache.recall(key) if key else None
        if cached:
            self.progress(f"the uninterrupted reference: an identical job's, from {reference_cache.cache_dir()}")
            return cached, "cached"
        found = observe.final_checksums(list(read_events(self.run_reference(trainer_args))))
        if key:
            reference_cache.remember(key, found)
        return found, "ran"

    def run_reference(self, trainer_args: list[str]) -> Path:
        """Run the uninterrupted, unpaced reference of the same job to its end; where its events are."""
        self.progress("running the uninterrupted reference")
        events = self.rerun([*trainer_args, "--step-time", "0"], fresh="reference")
        self.wait_job_while_stepping(events, REFERENCE_STALL_S)
        return events

    def rerun(self, trainer_args: list[str], fresh: str | None = None, topology: Topology | None = None) -> Path:
        """Start the job's script again on the same hosts (they stay up between runs); see Runtime.rerun.
        topology: the job's own unless given (a user's script run in another working dir)."""
        script = self.workload or script_path("trainer")
        return self.runtime.rerun(topology or self.topology, script, trainer_args, fresh)
