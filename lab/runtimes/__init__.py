"""Where the lab's nodes run: a registry of runtimes by name, each keeping lab.runtimes.base's contract.

Every module of this package is imported once, and each `Runtime` subclass that sets a
`name` registers itself; $LAB_RUNTIMES (comma-separated module names) adds runtimes that
live outside the lab. A new runtime is one file (docs/architecture.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
from collections.abc import Callable, Sequence
from typing import Any

from lab.errors import LabError
from lab.options import Option, given
from lab.rundir import RunDir
from lab.runtimes.base import Log, Runtime

AUTO = "auto"


def registry() -> dict[str, type[Runtime]]:
    """Every runtime, by name, in name order."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    for extra in filter(None, (m.strip() for m in os.environ.get("LAB_RUNTIMES", "").split(","))):
        try:
            importlib.import_module(extra)
        except ImportError as e:
            raise LabError(f"LAB_RUNTIMES names {extra!r}, which cannot be imported: {e}") from None
    return dict(sorted(Runtime.registered.items()))


def names(drills_only: bool = False) -> tuple[str, ...]:
    """What --runtime accepts ("auto" is the runtime marked AUTO)."""
    found = [name for name, cls in registry().items() if cls.DRILLS or not drills_only]
    return (AUTO, *found) if not drills_only else tuple(found)


def runtime_class(name: str) -> type[Runtime]:
    found = registry()
    if name == AUTO:
        return next(cls for cls in found.values() if cls.AUTO)
    if name not in found:
        raise LabError(f"unknown runtime {name!r}; choose one of: {', '.join(names())}")
    return found[name]


def add_runtime_flag(parser: Any, choices: Sequence[str], default: str) -> None:
    """--runtime alone (`lab bench chaos` takes the runtimes a campaign runs on, none of their flags)."""
    parser.add_argument("--runtime", choices=choices, default=default, help="where the nodes run (default %(default)s)")


def chaos_runtimes() -> list[str]:
    """The runtimes whose nodes a chaos campaign is proven on (Runtime.CHAOS)."""
    return [name for name, cls in registry().items() if cls.CHAOS]


def add_options(parser: argparse.ArgumentParser, drills_only: bool = False, default: str = AUTO) -> None:
    """--runtime and every runtime's own flags, each once, its help naming the runtimes that take it."""
    group = parser.add_argument_group("runtime")
    add_runtime_flag(group, names(drills_only), default)
    takers: dict[Option, list[str]] = {}
    for name, cls in registry().items():
        if cls.DRILLS or not drills_only:
            for option in cls.OPTIONS:
                takers.setdefault(option, []).append(name)
    for option, runtime_names in takers.items():
        option.add_to(group, help_suffix=f" [{', '.join(runtime_names)}]", recorded=True)
    # from_args asks which of them the user gave (options.given), whatever their values.
    parser.set_defaults(runtime_parser=parser)


# A drill is driven from a Ray cluster (--ray-address) whatever runtime its nodes are on.
DRILL_FLAGS = ("ray_address",)


def from_args(args: argparse.Namespace, run_dir: RunDir, log: Log = print, shared: tuple[str, ...] = ()) -> Runtime:
    """The runtime --runtime names, built from its own flags; another runtime's flag, given
    to this one, is refused in one line naming who takes it (the help already says so).
    shared: flags the verb itself takes whatever the runtime (DRILL_FLAGS for drills)."""
    cls = runtime_class(args.runtime)
    refuse_foreign_flags(args, cls, shared)
    return cls.from_args(run_dir, args, log)


def refuse_foreign_flags(args: argparse.Namespace, cls: type[Runtime], shared: tuple[str, ...] = ()) -> None:
    parser = getattr(args, "runtime_parser", None)
    if parser is None:
        return
    own = {option.name for option in cls.OPTIONS} | set(shared)
    takers: dict[str, list[str]] = {}
    flags: dict[str, str] = {}
    for name, other in registry().items():
        for option in other.OPTIONS:
            takers.setdefault(option.name, []).append(name)
            flags[option.name] = option.flag
    for dest, runtime_names in takers.items():
        if dest not in own and dest in given(args):  # given, even at its default: never ignored in silence
            where = "|".join(runtime_names)
            raise LabError(
                f"{flags[dest]} is for --runtime {where}, not {cls.name}: drop it, or add --runtime {runtime_names[0]}"
            )


def create(name: str, run_dir: RunDir, log: Log = print, **options: object) -> Runtime:
    """The runtime called `name`, with its own options by name (its defaults for the rest: enough to
    attach to and stop a lab). Lessons and benchmarks build their runtimes here, as the CLI does."""
    return runtime_class(name)(run_dir, log=log, **options)


def for_run_dir(run_dir: RunDir, log: Log = print) -> Runtime:
    """The runtime that started the lab recorded in run_dir (the auto runtime when none is recorded)."""
    state = run_dir.read_state() or {}
    return create(state.get("runtime", AUTO), run_dir, log=log)


def begin_job(runtime: Runtime, log: Callable[[str], None]) -> None:
    """What every command that starts jobs does first (`lab up`, `lab run`, drills, lessons,
    script drills): claim and hold the run dir (a second such command is refused in one line),
    refuse while a lab of this run directory runs, on whatever runtime started it, and clean
    up what a crashed one left (the recorded runtime's, then this runtime's own leftovers)."""
    runtime.run_dir.hold()
    try:
        _take_over(runtime, log)
    except BaseException:
        runtime.run_dir.release()  # refused: the next command may try
        raise


def _take_over(runtime: Runtime, log: Callable[[str], None]) -> None:
    # Only a recorded lab can be another runtime's; with none, this runtime clears its own leftovers.
    previous = for_run_dir(runtime.run_dir, log=log) if runtime.run_dir.read_state() else runtime
    if any(node.exit_code() is None for node in previous.attach()):
        raise LabError(
            f"a lab is already running (run dir {runtime.run_dir.path}, runtime {previous.name}); "
            "stop it with `lab down`"
        )
    leftovers = previous.down(grace_s=2.0)
    if previous.name != runtime.name:
        leftovers += runtime.down(grace_s=2.0)
    if leftovers:
        log(f"removed leftovers of an earlier lab: {', '.join(leftovers)}")
    runtime.run_dir.claim()  # the clean-up may have removed an empty run dir: the job's is made (and held) anew
