"""The grid every change keeps whole: fault x target x runtime, each cell runs (with the recovery
style --recovery auto picks there) or refuses. The targets: the lab's trainer (DDP), the trainer
sharded (`--parallel fsdp2`: FSDP2, DCP checkpoints) and a user's script.

A cell is refused, in one line saying why, when the drill has no script side (NO_SCRIPT), the
runtime's nodes cannot suffer a fault the drill injects (its INJECTS, read against Node.refusal), or the
drill reads its verdict from Prometheus on a runtime that runs none for drills. The drills
ask `refusal` before anything starts; `lab exercise grid` prints the table docs/exercises.md
holds (tests/test_docs_path.py checks they agree).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from lab import exercises
from lab.errors import LabError
from lab.runtimes import runtime_class
from lab.runtimes.base import Runtime
from lab.runtimes.monitored import MonitoredRuntime

TARGETS = ("trainer", "trainer fsdp2", "script")
SHARDED = "trainer fsdp2"  # the trainer with --parallel fsdp2
RUNTIMES = ("local", "docker", "ray", "k8s")


def injected(drill: ModuleType, options: Any = None) -> tuple[str, ...]:
    """The Node faults the drill uses with these options (its defaults when None)."""
    variant = getattr(drill, "injects", None)
    return tuple(variant(options)) if variant and options is not None else tuple(drill.INJECTS)


def no_script(drill: ModuleType) -> str:
    """Why the drill cannot break a user's script, in one line; "" when it can."""
    if hasattr(drill, "break_script") or getattr(drill, "SCRIPT_TARGET", False):
        return ""
    return f"{drill.NAME} cannot run on your script: {getattr(drill, 'NO_SCRIPT', 'it has no script side')}"


def refusal(drill: ModuleType, runtime: type[Runtime], target: str, options: Any = None) -> str:
    """Why this drill cannot run on that runtime for that target, in one line; "" when it can."""
    if not runtime.DRILLS:
        return f"the {runtime.name} runtime takes no drills"
    if target == "script" and no_script(drill):
        return no_script(drill)
    if getattr(drill, "NEEDS_PROMETHEUS", False) and not issubclass(runtime, MonitoredRuntime):
        return f"{drill.NAME} reads its verdict from Prometheus, which the {runtime.name} runtime does not run"
    parallel = getattr(options, "parallel", "ddp")
    if parallel != "ddp" and not runtime.SHARED_CHECKPOINTS:
        return (
            f"--parallel {parallel} on {runtime.name}: DCP's step is one folder of every rank's shards, and each "
            f"node keeps its own checkpoints there; use --runtime local or docker"
        )
    node = runtime.NODE
    for fault in injected(drill, options):
        why = node.refusal(fault) if node is not None else f"the {runtime.name} runtime has no nodes to inject into"
        if why:
            return f"{drill.NAME} on {runtime.name}: {why}"
    return ""


def default_options(drill: ModuleType, target: str) -> exercises.DrillOptions:
    """The drill's defaults, on the target's trainer (sharded for SHARDED)."""
    parallel = "fsdp2" if target == SHARDED else "ddp"
    return exercises.DrillOptions(drill.DEFAULT_TARGET_RANK, drill.DEFAULT_AT_STEP, parallel=parallel)


def cell(drill: ModuleType, runtime: type[Runtime], target: str) -> str:
    """The grid's cell: why the drill with its defaults cannot run there, or ""."""
    if target != SHARDED:
        return refusal(drill, runtime, target)
    options = default_options(drill, target)
    try:
        exercises.topology(drill, options)  # what the drill's job refuses of --parallel, whatever the runtime
    except LabError as refused:
        return str(refused)
    return refusal(drill, runtime, "trainer", options)


def cells() -> list[tuple[str, str, dict[str, str]]]:
    """(drill, target, {runtime: refusal or ""}) for every drill of the catalogue."""
    return [
        (name, target, {r: cell(drill, runtime_class(r), target) for r in RUNTIMES})
        for name, drill in exercises.drills().items()
        for target in TARGETS
    ]


def recovery_style(drill: ModuleType, runtime: type[Runtime], target: str) -> str:
    """The recovery style `--recovery auto` gives the drill's job on that runtime (lab.recovery)."""
    options = default_options(drill, target)
    return exercises.job(drill, options, runtime.rendezvous(), on_script=target == "script")[1].style


def markdown() -> str:
    """The grid as docs/exercises.md shows it: "runs" and the recovery style --recovery auto
    picks there, or a numbered reason below the table."""
    drills = exercises.drills()
    reasons: list[str] = []
    lines = ["| drill | target | " + " | ".join(RUNTIMES) + " |", "|---|---|" + "---|" * len(RUNTIMES)]
    for name, target, row in cells():
        shown = []
        for runtime in RUNTIMES:
            why = row[runtime]
            if why and why not in reasons:
                reasons.append(why)
            style = "" if why else recovery_style(drills[name], runtime_class(runtime), target)
            shown.append(f"no ({reasons.index(why) + 1})" if why else f"runs: {style}")
        lines.append(f"| {name} | {target} | " + " | ".join(shown) + " |")
    lines.append("")
    lines += [f"{i}. {why}" for i, why in enumerate(reasons, 1)]
    needs = [runtime_class(r) for r in RUNTIMES if runtime_class(r).SCRIPT_DRILLS_NEED]
    lines += ["", *(f"On {r.name}, a drill on your script needs {r.SCRIPT_DRILLS_NEED}." for r in needs)]
    return "\n".join(lines) + "\n"
