"""No test puts an upper bound on a measured time: on a shared 2-core machine such a line
measures the machine, not the code (CI once failed on a 64 s against 60, and on 26 s against 20).
A test asserts the behaviour itself (from the events: what ended the wait, which came first);
times go to the benches. Allowed: a lower bound (nothing happened too early), an order of two
measured times (`abort_s < collective_s`), a deadline a polling loop gives up at, and a
product's own verdict that judges time (a drill's check says its bound)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
MEASURED = re.compile(r"(seconds|elapsed|took|wall|_s\b|_s['\"]|monotonic\(\)|time\(\))")
CLOCKS = ("time.monotonic", "time.time", "time.perf_counter")
ALLOWED = {"plan[-1].at_s <= 4000.0": "a time the schedule planned from its seed, not one measured"}


def constant(node: ast.expr) -> bool:
    """A number, a CONSTANT (module.CONSTANT) or arithmetic of them: a line, not a measurement."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int | float) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        return name.isupper()
    if isinstance(node, ast.BinOp):
        return constant(node.left) and constant(node.right)
    return False


def computed(node: ast.expr, source: str) -> bool:
    """A function of what the test gave it (recorded events, a seed): not a clock read."""
    return isinstance(node, ast.Call) and (ast.get_source_segment(source, node.func) or "") not in CLOCKS


def compares(test: ast.expr):
    """The comparisons an assert states (not those inside a lambda it passes: a loop's condition)."""
    if isinstance(test, ast.Lambda):
        return
    if isinstance(test, ast.Compare):
        yield test
    for child in ast.iter_child_nodes(test):
        if isinstance(child, ast.expr):
            yield from compares(child)


def upper_bounds(tree: ast.AST, source: str) -> list[str]:
    found = []
    for test in (n.test for n in ast.walk(tree) if isinstance(n, ast.Assert)):
        for compare in compares(test):
            operands = [compare.left, *compare.comparators]
            for i, op in enumerate(compare.ops):
                small, large = operands[i], operands[i + 1]
                if isinstance(op, ast.Gt | ast.GtE):
                    small, large = large, small
                elif not isinstance(op, ast.Lt | ast.LtE):
                    continue
                said = ast.get_source_segment(source, small) or ""
                whole = ast.get_source_segment(source, compare) or ""
                if MEASURED.search(said) and not computed(small, source) and constant(large) and whole not in ALLOWED:
                    found.append(f"line {compare.lineno}: {whole}")
    return found


def test_no_test_bounds_a_measured_time_from_above():
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if "fixtures" in path.parts or "user_scripts" in path.parts:
            continue
        source = path.read_text()
        found += [f"{path.relative_to(TESTS)} {line}" for line in upper_bounds(ast.parse(source), source)]
    assert not found, "\n".join(found)


def test_the_rule_finds_the_lines_that_failed_ci_and_leaves_the_allowed_ones():
    """Each case is what an assert states: the rule is run on `assert <case>`."""
    failed = [
        'cell["seconds"] < 20',
        "time.monotonic() - started < 120",
        "took <= hang_rank.PG_TIMEOUT_S + 5",
        "60 > result['elapsed']",
    ]
    allowed = [
        'result["abort_s"] < result["collective_s"]',
        "time.monotonic() < deadline",
        'result["collective_s"] >= TIMEOUT_S - 0.5',
        'report["lost_steps"] <= 1',
        "lookout.stranded(thread, lambda: time.monotonic() - began < 10, {})",
        "5 <= signals.seconds_running(events, at_time_s=15) < 6",
    ]
    for case in failed + allowed:
        line = f"assert {case}"
        assert bool(upper_bounds(ast.parse(line), line)) == (case in failed), case
