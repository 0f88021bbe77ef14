"""Drills on the user's own script: `lab exercise run NAME --script PATH ... -- ARGS` and
`lab exercise matrix --script PATH --faults a,b,c ... -- ARGS` (see lab.exercises.script)."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from types import ModuleType

from lab import exercises, output_paths, recovery, runtimes
from lab.cli.flags import AT_STEP, REPORT_DIR, TARGET_RANK, add_run_dir_option, add_verbose
from lab.errors import LabError
from lab.exercises import DrillOptions, grid
from lab.exercises.script import matrix as script_matrix
from lab.exercises.script import script_run, spec
from lab.options import RECOVERY, TORCH_DEFAULTS, Option, add_all, given, run_dir_from_args
from lab.topology import Topology

FAULTS = Option("--faults", "comma-separated drills to run on the script, e.g. kill-worker,preempt", metavar="LIST")


def script_drills() -> dict[str, ModuleType]:
    """The drills that can break a user's script (they define break_script)."""
    return {name: m for name, m in exercises.drills().items() if hasattr(m, "break_script")}


def add_script_options(parser: argparse.ArgumentParser, job_size: bool = True) -> None:
    """--script and what goes with it; the script's own arguments follow `--`. job_size: also
    --nodes, --nproc-per-node and --max-restarts (a drill's parser has them already: they size
    the trainer's job as a script's)."""
    if job_size:
        add_all(parser, spec.SCRIPT_TOPOLOGY)
    group = parser.add_argument_group("your own script (instead of the lab's trainer)")
    add_all(group, spec.OPTIONS, recorded=True)  # refused on the trainer when given, at any value
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS", help="arguments for --script")


def refuse_script_flags(args: argparse.Namespace) -> None:
    """A drill on the lab's trainer: the --script flags say nothing there, so refuse them (the
    job's size and restart budget, --nodes, --nproc-per-node and --max-restarts, it takes)."""
    gave = [o.flag for o in spec.OPTIONS if o.name in given(args)]
    if gave or args.script_args:
        raise LabError(f"{', '.join(gave) or 'arguments after --'}: only with --script (your own training script)")


def refuse_trainer_flags(args: argparse.Namespace, fault: ModuleType) -> None:
    """A drill's own flag that acts on the lab's trainer only (not in its SCRIPT_OPTIONS), given
    with --script: one line, never a flag accepted and then ignored."""
    for option in exercises.own_options(fault):
        if option.name in given(args) and option.name not in getattr(fault, "SCRIPT_OPTIONS", ()):
            raise LabError(
                f"{option.flag}: {fault.NAME} takes it on the lab's trainer, not on your script "
                f"({getattr(fault, 'SCRIPT_REFUSES', {}).get(option.name, 'the trainer does what it needs')}); "
                f"drop {option.flag}, or drop --script"
            )


def own_flags(args: argparse.Namespace, fault: ModuleType | None) -> dict:
    """The drill's own flags as given (the matrix has none: each drill's defaults)."""
    return {o.name: getattr(args, o.name, None) for o in exercises.own_options(fault)} if fault else {}


def size(given: int | None) -> int:
    """A script drill's nodes or processes per node: 2 unless given (0 is refused as it is parsed)."""
    return 2 if given is None else given


def topology_for(args: argparse.Namespace, fault: ModuleType | None) -> Topology:
    """The drill's job shape (restarts, timeouts) at the user's size (exercises.topology, which
    refuses a size the fault cannot use); workers preloaded as the trainer's are (a restarted
    worker forks from a server with torch imported), spawned with --torch-defaults."""
    sized = DrillOptions(
        target_rank=0,
        at_step=1,
        torch_defaults=args.torch_defaults,
        own=own_flags(args, fault),
        nodes=size(args.nodes),
        nproc_per_node=size(args.nproc_per_node),
        max_restarts=args.max_restarts,
        rdzv_port=args.rdzv_port,
    )
    if fault is not None:
        return exercises.topology(fault, sized)
    plain = Topology(
        nodes=size(args.nodes), nproc_per_node=size(args.nproc_per_node), torch_defaults=args.torch_defaults
    )
    chosen = {"max_restarts": args.max_restarts, "rdzv_port": args.rdzv_port}
    return plain.replace(**{k: v for k, v in chosen.items() if v is not None})


def options_for(args: argparse.Namespace, fault: ModuleType | None) -> DrillOptions:
    world = topology_for(args, fault).world_size
    target = script_run.target_rank(fault, args.target_rank, world) if fault else 0
    at_step = spec.DEFAULT_AT_STEP if args.at_step is None else args.at_step
    if at_step < 1:
        raise LabError(f"--at-step must be 1 or more; got {at_step}")
    chosen = args.target_rank is not None
    return DrillOptions(target, at_step, chosen, args.torch_defaults, own_flags(args, fault), recovery=args.recovery)


def refuse_early(args: argparse.Namespace, faults: list[ModuleType]) -> spec.ScriptSpec:
    """Every row's refusal, in one line, before anything starts (the run dir untouched): the
    runtime, --workdir, each fault's flags and its recovery style. Returns the script's spec."""
    runtime = runtimes.runtime_class(args.runtime)
    runtime.refuse_script_drill(args)
    the_spec = spec.spec_from_args(args, on_this_machine=runtime.HOST_FILES)
    if the_spec.workdir and not runtime.HOST_CODE:
        raise LabError(
            f"--workdir runs your script in a folder of this machine, where the {args.runtime} runtime's nodes do "
            "not run: use --runtime local, or drop --workdir"
        )
    host = runtime.rendezvous()
    for fault in faults:  # every row's flags checked before the first run starts
        refuse_trainer_flags(args, fault)
        if getattr(fault, "SCRIPT_NEEDS_CKPT_DIR", "") and not the_spec.ckpt_dir:
            raise LabError(fault.SCRIPT_NEEDS_CKPT_DIR)
        options_for(args, fault)
        recovery.choose(topology_for(args, fault), args.recovery, host, drill_needs=exercises.recovery_needs(fault))
    return the_spec


def run(args: argparse.Namespace, faults: list[ModuleType], out_dir: Path, reference: bool) -> script_matrix.Matrix:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from lab.exercises.engine import run_drill

    the_spec = refuse_early(args, faults)
    run_dir = run_dir_from_args(args)
    # A runtime that cannot run here now (no cluster answers, no netns) says so before a report dir exists.
    runtimes.from_args(args, run_dir, shared=runtimes.DRILL_FLAGS).check()
    run_dir.claim_for_report(out_dir)
    rows = len(faults) + (1 if reference else 0)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as bar:
        task = bar.add_task("runs", total=rows)

        def on_row(row: script_matrix.Row) -> None:
            if row.label == script_run.REPEAT:  # --compare: a result differed, and the reference runs once more
                bar.update(task, total=rows + 1)
            bar.advance(task)
            bar.console.print(f"{row.label}: {row.verdict}")

        runner = script_matrix.Runner(
            the_spec,
            topology_for=lambda fault: topology_for(args, fault),
            options_for=lambda fault: options_for(args, fault),
            make_runtime=lambda: runtimes.from_args(args, run_dir, shared=runtimes.DRILL_FLAGS),
            run_drill=functools.partial(run_drill, verbose=args.verbose),
            out_dir=out_dir,
            ray_address=args.ray_address,
            out=sys.stdout,  # rich's stand-in while the bar shows: the drills' lines print above it
        )
        return script_matrix.run_matrix(runner, faults, on_row=on_row, reference=reference)


def handle_script_drill(args: argparse.Namespace, out_dir: Path) -> int:
    """`lab exercise run NAME --script ...`: with --compare, the fault-free reference runs first."""
    if not hasattr(args.exercise, "break_script"):
        raise LabError(f"{grid.no_script(args.exercise)}; these can: {', '.join(script_drills())}")
    result = run(args, [args.exercise], out_dir, reference=bool(args.compare))
    last = result.rows[-1]
    if last.report is not None:
        last.report.summary()
    elif last.error:
        print(f"{last.label}: {last.error}")
    print(f"report: {out_dir / last.label / 'report.json'}")
    return 0 if result.passed else 1


def register_matrix(verbs: argparse._SubParsersAction) -> None:
    parser = verbs.add_parser(
        "matrix", help="your script under several faults: one verdict each, matrix.json/.md/.html"
    )
    add_all(parser, (FAULTS, TARGET_RANK, AT_STEP, TORCH_DEFAULTS, RECOVERY, REPORT_DIR))
    add_script_options(parser)
    runtimes.add_options(parser, drills_only=True, default="local")
    add_verbose(parser)
    add_run_dir_option(parser)
    parser.set_defaults(handler=handle_matrix, monitoring="off")


def script_faults(listed: str) -> list[ModuleType]:
    """The drills --faults names, each one that can break a script; else one line saying why."""
    available = script_drills()
    names = [n.strip() for n in listed.split(",") if n.strip()]
    for name in names:
        if name in exercises.drills() and name not in available:
            raise LabError(f"--faults: {grid.no_script(exercises.drills()[name])}")
    unknown = [n for n in names if n not in available]
    if unknown or not names:
        raise LabError(f"--faults: unknown {', '.join(unknown) or '(none)'}; choose from {', '.join(available)}")
    return [available[n] for n in names]


def handle_matrix(args: argparse.Namespace) -> int:
    if not args.script:
        raise LabError("lab exercise matrix needs --script PATH (your training script)")
    if not args.faults:
        raise LabError(f"--faults: name one or more of {', '.join(script_drills())}")
    faults = script_faults(args.faults)
    run_dir = run_dir_from_args(args)
    chosen = output_paths.output_dir(args.report_dir, "--report-dir")  # "" or a link: one line
    out_dir = chosen if chosen is not None else run_dir.reports / f"matrix-{time.strftime('%Y%m%d-%H%M%S')}"
    result = run(args, faults, out_dir, reference=True)
    print(script_matrix.markdown(result.to_json()), end="")
    print(f"matrix: {out_dir / 'matrix.html'} (and matrix.json, matrix.md)")
    return 0 if result.passed else 1
