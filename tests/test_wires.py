"""The controller-to-node wires, typed, held to it from the source: every event a writer or a
reader names goes through lab.health.events' enums, and every LAB_* variable a node reads or
a manifest sets is one lab.nodeenv declares (or one of the user's own settings)."""

from __future__ import annotations

import ast
import re

from conftest import REPO
from test_architecture import MODULES


def test_events_are_named_through_their_enum_never_as_text():
    """A misspelt event name must fail loudly: writers and readers name lab.health.events.Event
    (and ExitReason), so a literal compared with a record's "event" or "reason" is a defect."""
    literal = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                keyed = any(
                    (isinstance(s, ast.Subscript) and isinstance(s.slice, ast.Constant) and s.slice.value == "event")
                    or (isinstance(s, ast.Call) and getattr(s.func, "attr", "") == "get" and s.args
                        and isinstance(s.args[0], ast.Constant) and s.args[0].value in ("event", "reason"))
                    for s in sides
                )  # fmt: skip
                texts = [s for s in sides if isinstance(s, ast.Constant) and isinstance(s.value, str)]
                texts += [e for s in sides if isinstance(s, ast.Tuple) for e in s.elts if isinstance(e, ast.Constant)]
                if keyed and texts:
                    literal.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "write" and node.args:
                first = node.args[0]
                names = getattr(node.func.value, "id", getattr(node.func.value, "attr", ""))
                if "log" in names.lower() or names in ("events", "_log"):
                    if isinstance(first, ast.Constant):
                        literal.append(f"{path.relative_to(REPO)}:{node.lineno} writes {first.value!r}")
    assert not literal, literal


# The user's own settings (read where they act) and the pod's, beside the node wire (lab.nodeenv).
NOT_ON_THE_WIRE = {
    "LAB_RUN_DIR", "LAB_DEBUG", "LAB_IMAGE", "LAB_PROMETHEUS_IMAGE", "LAB_DOCKER_SUBNET", "LAB_RUNTIMES",
    "LAB_GPU_COUNT", "LAB_TOPOLOGY", "LAB_WORKLOAD", "LAB_WORKLOAD_ARGS", "LAB_TEST_ARTIFACTS",
    "LAB_PROMETHEUS_PORT", "LAB_GRAFANA_PORT",  # docker compose's published ports
}  # fmt: skip


def test_every_lab_variable_a_node_reads_is_declared_on_the_wire():
    """A LAB_* name read anywhere but lab.nodeenv, or set by a manifest, is one NodeEnv declares,
    or one of the user's own settings: a misspelt variable cannot be read as "unset"."""
    from lab import nodeenv

    declared = set(nodeenv.names())
    named = [
        (str(path.relative_to(REPO)), node.value)
        for path in MODULES.values()
        if path.name != "nodeenv.py"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and re.fullmatch(r"LAB_[A-Z_]+", node.value)
    ]
    for manifest in ("k8s/base/job.yaml", "docker/compose.yaml"):
        named += [(manifest, n) for n in re.findall(r"\bLAB_[A-Z][A-Z_]*[A-Z]\b", (REPO / manifest).read_text())]
    # A constant of the lab's own named in __all__ (LAB_ENTRIES) is a Python name, not a variable.
    identifiers = {
        n.id for p in MODULES.values() for n in ast.walk(ast.parse(p.read_text())) if isinstance(n, ast.Name)
    }
    unknown = {f"{where}: {name}" for where, name in named if name not in declared | NOT_ON_THE_WIRE | identifiers}
    assert not unknown, sorted(unknown)
    # Rendered and read back, every variable is itself.
    wire = nodeenv.NodeEnv(events_dir="/e", ckpt_shared=True, pg_timeout_s=7.5, agent_metrics_port=9400)
    assert nodeenv.NodeEnv.parse(wire.render()) == wire


def test_a_malformed_wire_variable_is_one_line_naming_it():
    from lab.errors import LabError
    from lab.nodeenv import NodeEnv

    for bad in ({"LAB_PG_TIMEOUT_S": "soon"}, {"LAB_CKPT_SHARED": "yes"}, {"LAB_AGENT_METRICS_PORT": "9.5"}):
        try:
            NodeEnv.parse(bad)
        except LabError as e:
            assert str(e).startswith(next(iter(bad))) and "\n" not in str(e)
        else:
            raise AssertionError(f"{bad} was read as valid")
