"""A drill module's declarations, checked once when the catalogue loads it.

A drill declares what it is as module attributes (lab.exercises' docstring lists them), and the
lab reads the optional ones with a default. A misspelt one would read as that default, never as
an error, and a refusal or a verdict would be quietly wrong: `SCRIPT_RECOVRY` leaves the script
side broken, `IN_PROCES_JUDGED` refuses in-process recovery. So each module of CATALOG is
checked when it loads: the names every drill needs are there; an upper-case name it defines
that is close to a trait's, and that its own code never reads, is taken for a misspelling; the
script side is whole (break_script with its SCRIPT_RECOVERY); INJECTS names Node faults. Each
failure is one line naming the module and what to write instead.
"""

from __future__ import annotations

import ast
import difflib
import functools
from pathlib import Path
from types import ModuleType

from lab.errors import LabError
from lab.runtimes.faults import FAULTS

REQUIRED = (
    "NAME", "SUMMARY", "DEFAULT_TARGET_RANK", "DEFAULT_AT_STEP", "STEPS", "INJECTS",
    "topology", "trainer_args", "run", "judge",
)  # fmt: skip
OPTIONAL = (
    "OPTIONS", "WORKLOAD", "NEEDS_PROMETHEUS", "MIN_NODES", "IN_PROCESS_JUDGED", "IN_PROCESS_FIRST",
    "RECOVERY_NEEDS", "SCRIPT_RECOVERY", "NO_SCRIPT", "SCRIPT_NEEDS_CKPT_DIR", "SCRIPT_OPTIONS",
    "SCRIPT_REFUSES", "SCRIPT_FORENSICS", "SCRIPT_HANGS_FOR_GOOD", "break_script", "injects", "trainer_refusal",
)  # fmt: skip
TRAITS = REQUIRED + OPTIONAL
SCRIPT_RECOVERIES = ("restart", "rerun", "none")  # lab.exercises.script.judge knows these


@functools.cache
def check(module: ModuleType) -> None:
    """Raise a one-line LabError for the first thing wrong with the drill module's declarations."""
    where = f"drill module {Path(module.__file__ or module.__name__).name}"
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise LabError(f"{where} lacks {', '.join(missing)} (lab.exercises' docstring lists what a drill declares)")
    for name, meant in misspelt(module):
        raise LabError(f"{where} defines {name}, which nothing reads: did you mean the trait {meant}?")
    scripted = hasattr(module, "break_script")
    if scripted != hasattr(module, "SCRIPT_RECOVERY"):
        has, lacks = ("break_script", "SCRIPT_RECOVERY") if scripted else ("SCRIPT_RECOVERY", "break_script")
        raise LabError(f"{where} has {has} but not {lacks}: a script side needs both (lab.exercises.script)")
    if scripted and module.SCRIPT_RECOVERY not in SCRIPT_RECOVERIES:
        raise LabError(
            f"{where}: SCRIPT_RECOVERY is {module.SCRIPT_RECOVERY!r}; it is one of {', '.join(SCRIPT_RECOVERIES)}"
        )
    unknown = [fault for fault in module.INJECTS if fault not in FAULTS]
    if unknown:
        closest = difflib.get_close_matches(unknown[0], sorted(FAULTS), n=1)
        hint = f"did you mean {closest[0]}?" if closest else f"a Node has: {', '.join(sorted(FAULTS))}"
        raise LabError(f"{where}: INJECTS names {unknown[0]!r}, which no Node injects: {hint}")


def misspelt(module: ModuleType) -> list[tuple[str, str]]:
    """(name, the trait it is close to) for each module-level name, not a trait, that the module's
    code never reads."""
    tree = ast.parse(Path(module.__file__ or "").read_text())
    read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    defined = []
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef | ast.ClassDef):
            defined.append(statement.name)
        targets = statement.targets if isinstance(statement, ast.Assign) else []
        if isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        for target in targets:
            defined += [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]
    unread = [name for name in defined if name not in TRAITS and name not in read]
    return [(name, close[0]) for name in unread if (close := difflib.get_close_matches(name, TRAITS, n=1, cutoff=0.8))]
