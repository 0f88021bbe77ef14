"""Fault drills, one module each, registered in CATALOG; the lesson's exercises are in lab.lessons.

A drill is one module of this package, named in CATALOG, with:

- NAME ("kill-worker"), SUMMARY (one line) and a docstring: the hypothesis, the command,
  what to look for (`lab exercise explain NAME` prints it);
- DEFAULT_TARGET_RANK, DEFAULT_AT_STEP and STEPS (the run's length: --at-step must be
  below it);
- topology(options) -> Topology and trainer_args(options) -> list[str]: the job it breaks;
- run(drill, options) -> Report: the act, given a lab.exercises.drill.Drill: it waits,
  injects, and gathers what the job left (Drill.gather -> lab.exercises.seen.Seen), then
  returns judge(seen, options);
- judge(seen, options) -> Report: the verdict from the evidence alone, no process touched
  (tests/unit/test_judges.py runs every judge on runs recorded by scripts/record-fixtures.sh);
- optionally OPTIONS (its own flags, lab.options.Option; read back from options.own by
  name), WORKLOAD (a lab.workloads script other than "trainer") and NEEDS_PROMETHEUS;
- optionally break_script(drill, target, ckpt_dir, own) and SCRIPT_RECOVERY: the same fault on
  a user's own script (see lab.exercises.script); without them, NO_SCRIPT: why not (one line);
  SCRIPT_NEEDS_CKPT_DIR: the refusal when its script side needs --ckpt-dir and has none;
- optionally MIN_NODES: the fewest nodes its fault needs (--nodes below it is refused);
- optionally trainer_refusal(options) -> str: why these options cannot run on the lab's trainer
  ("" when they can), said before anything starts;
- optionally IN_PROCESS_JUDGED = True: its judge knows --recovery in-process (the lost rank
  replaced by a spare, state from a peer, or the keepers' fallback to a restart:
  lab.exercises.inprocess_verdict), and --recovery auto picks it where the job can run it
  (unless IN_PROCESS_FIRST = False: only when asked); others refuse it;
- optionally RECOVERY_NEEDS = (style, why): the recovery style (lab.recovery) its fault is
  about, where --recovery auto would otherwise pick another; a contrary --recovery is refused
  (in-process too, unless the drill judges it);
- INJECTS: the Node faults it uses (and injects(options) where a flag adds one): a runtime
  whose nodes cannot suffer one refuses the drill before it starts (lab.exercises.grid).

`options` is a frozen DrillOptions, never the command line itself. Each module is checked as
the catalogue loads it (lab.exercises.traits): a missing or misspelt trait is a one-line error.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from lab import recovery
from lab.errors import LabError
from lab.exercises import traits
from lab.options import Option
from lab.topology import Topology

# The catalogue, registered explicitly: a new fault is one module here plus its line. The
# other modules of this package (engine, observe, forensics, ...) are the machinery drills share.
CATALOG = (
    "kill_worker",
    "rank_exception",
    "kill_node",
    "kill_rendezvous_host",
    "hang_rank",
    "partition_node",
    "straggler",
    "preempt",
    "corrupt_checkpoint",
    "collective_mismatch",
    "crash_loop",
    "kill_in_save",
)


@dataclass(frozen=True)
class DrillOptions:
    """What a drill is told: whom to hit, when, and its own flags."""

    target_rank: int
    at_step: int
    target_rank_chosen: bool = False  # the user named the rank (a drill may move a default one)
    torch_defaults: bool = False
    own: Mapping[str, Any] = field(default_factory=dict)  # the drill's OPTIONS, by name
    # The job's size and restart budget when the user chose them (None: the drill's own).
    nodes: int | None = None
    nproc_per_node: int | None = None
    max_restarts: int | None = None
    rdzv_port: int | None = None  # --rdzv-port: the store's port, where the default is taken
    recovery: str = "auto"  # --recovery (lab.recovery): settled against the runtime in the engine
    parallel: str = "ddp"  # --parallel: the lab trainer's (ddp, or fsdp2: sharded, DCP, restart recovery)


def drills() -> dict[str, ModuleType]:
    """Every drill module of this package, by NAME."""
    found = {}
    for name in CATALOG:
        module = importlib.import_module(f"{__name__}.{name}")
        traits.check(module)
        found[module.NAME] = module
    return found


def all_exercises() -> dict[str, ModuleType]:
    """The drills, then the lesson exercises (lab.lessons)."""
    from lab import lessons

    return {**drills(), **{m.NAME: m for m in lessons.modules()}}


def load(name: str) -> ModuleType:
    """The exercise module called `name` (e.g. kill-worker)."""
    exercises = all_exercises()
    if name not in exercises:
        raise LabError(f"unknown exercise {name!r}; choose one of: {', '.join(exercises)}")
    return exercises[name]


def kind(module: ModuleType) -> str:
    """ "drill" (breaks one running job) or "lesson" (runs small jobs and compares them)."""
    return str(getattr(module, "KIND", "drill"))


def own_options(drill: ModuleType) -> tuple[Option, ...]:
    return tuple(getattr(drill, "OPTIONS", ()))


def recovery_needs(drill: ModuleType | None) -> tuple[str, str] | None:
    """The recovery style a drill's fault needs, and why (None: any the job can survive)."""
    return getattr(drill, "RECOVERY_NEEDS", None) if drill is not None else None


def drill_job(options: DrillOptions, **shape: Any) -> Topology:
    """The job a drill breaks: 2 nodes x 2 workers unless the drill says otherwise, torch's
    defaults when asked (--torch-defaults); exercises.topology then sizes it as the user chose."""
    return Topology(**{"nodes": 2, "nproc_per_node": 2, "torch_defaults": options.torch_defaults, **shape})


def topology(drill: ModuleType, options: DrillOptions) -> Topology:
    """The drill's job, at the size and restart budget the user chose (--nodes,
    --nproc-per-node, --max-restarts); a drill whose fault needs more nodes says so."""
    chosen = {
        "nodes": options.nodes,
        "nproc_per_node": options.nproc_per_node,
        "max_restarts": options.max_restarts,
        "rdzv_port": options.rdzv_port,
    }
    shaped = drill.topology(options).replace(**{k: v for k, v in chosen.items() if v is not None})
    if options.parallel != "ddp":
        if getattr(drill, "WORKLOAD", "trainer") != "trainer":
            raise LabError(f"--parallel {options.parallel} is the lab trainer's: {drill.NAME} runs its own workload")
        shaped = shaped.replace(parallel=options.parallel)
    least = getattr(drill, "MIN_NODES", 1)
    if shaped.nodes < least:
        raise LabError(f"{drill.NAME} needs at least {least} nodes; got --nodes {shaped.nodes}")
    if shaped.min_nodes is not None and shaped.min_nodes >= shaped.nodes:
        raise LabError(f"{drill.NAME} shrinks an elastic job of {shaped.nodes} node(s): it needs at least 2 nodes")
    return shaped


def job(
    exercise: ModuleType, options: DrillOptions, host: recovery.Host, *, on_script: bool = False
) -> tuple[Topology, recovery.Recovery]:
    """The drill's job at the size the user chose, recovering as --recovery asks (lab.recovery)
    within what the fault needs and the runtime (host) runs; auto picks in-process wherever the
    drill judges it (its fault is a death). on_script: the drill as it runs on a user's script
    (a ScriptRun says so itself)."""
    fault = getattr(exercise, "fault", exercise)  # a run on a user's script names its fault
    shaped = topology(exercise, options)
    return recovery.choose(
        shaped,
        options.recovery,
        host,
        drill_needs=recovery_needs(fault),
        in_process_refusal=in_process_refusal(exercise, on_script or hasattr(exercise, "fault"), options.parallel),
        in_process_first=getattr(fault, "IN_PROCESS_FIRST", True),
    )


def in_process_refusal(exercise: ModuleType, on_script: bool = False, parallel: str = "ddp") -> str:
    """Why a drill does not run under --recovery in-process ("" where its judge knows it:
    IN_PROCESS_JUDGED, on the lab's trainer, in DDP)."""
    if parallel != "ddp":
        return (
            f"not with --parallel {parallel}: a rank holds only its shard, so no peer can hand a replacement the model"
        )
    if on_script:
        return "not behind drills on your script yet (lab run --recovery in-process SCRIPT runs it)"
    if not getattr(exercise, "IN_PROCESS_JUDGED", False):
        judged = [d.NAME for d in drills().values() if getattr(d, "IN_PROCESS_JUDGED", False)]
        listed = ", ".join(judged[:-1]) + f" and {judged[-1]}" if len(judged) > 1 else "".join(judged)
        return f"{exercise.NAME} does not judge in-process recovery yet (only {listed} do)"
    return ""


def options_from_args(drill: ModuleType, args: argparse.Namespace) -> DrillOptions:
    """The drill's options from its command line, checked against its run: one-line errors."""
    chosen = args.target_rank is not None
    options = DrillOptions(
        target_rank=drill.DEFAULT_TARGET_RANK if args.target_rank is None else args.target_rank,
        at_step=drill.DEFAULT_AT_STEP if args.at_step is None else args.at_step,
        target_rank_chosen=chosen,
        torch_defaults=args.torch_defaults,
        own={o.name: getattr(args, o.name) for o in own_options(drill)},
        nodes=getattr(args, "nodes", None),
        nproc_per_node=getattr(args, "nproc_per_node", None),
        max_restarts=getattr(args, "max_restarts", None),
        rdzv_port=getattr(args, "rdzv_port", None),
        recovery=getattr(args, "recovery", "auto"),
        parallel=getattr(args, "parallel", "ddp"),
    )
    refused = drill.trainer_refusal(options) if hasattr(drill, "trainer_refusal") else ""
    if refused:
        raise LabError(refused)
    world = topology(drill, options).world_size
    if chosen is False and options.target_rank >= world:  # the drill's default rank, in a smaller job: the last
        options = dataclasses.replace(options, target_rank=world - 1)
    if not 0 <= options.target_rank < world:
        raise LabError(f"--target-rank must be in [0, {world}) for {drill.NAME}; got {options.target_rank}")
    if not 1 <= options.at_step < drill.STEPS:
        raise LabError(f"--at-step must be in [1, {drill.STEPS}) for {drill.NAME}; got {options.at_step}")
    return options
