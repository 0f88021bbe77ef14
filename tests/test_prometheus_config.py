"""Rules, config and dashboard checked by the real promtool, and against what the exporters export."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.health import prometheus
from lab.health.agent_exporter import AgentMetrics
from lab.health.rank_exporter import RankMetrics

HEALTH = Path(prometheus.__file__).parent
RULES_TEST = Path(__file__).parent / "prometheus" / "rules_test.yml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (make host-deps installs it)")


def promtool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)


@needs_promtool
def test_rules_are_valid_and_their_unit_tests_pass():
    checked = promtool("check", "rules", str(prometheus.RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr


@needs_promtool
def test_every_alert_rule_has_a_unit_test():
    alerts = set(re.findall(r"^\s+- alert: (\w+)", prometheus.RULES.read_text(), re.M))
    tested = set(re.findall(r"alertname: (\w+)", RULES_TEST.read_text()))
    assert alerts and alerts <= tested, f"untested alerts: {alerts - tested}"


@needs_promtool
def test_generated_config_passes_promtool(tmp_path):
    server = prometheus.Prometheus(tmp_path)
    server.write_config()
    checked = promtool("check", "config", str(server.config_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def exported_names() -> set[str]:
    """Every series name the rank and agent exporters really expose, plus the recording rules."""
    names = set()
    for metrics in (RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0),
                    AgentMetrics(node="n", max_restarts=0)):
        for family in metrics.registry.collect():
            names |= {sample.name for sample in family.samples}
    names |= set(re.findall(r"record: (\S+)", prometheus.RULES.read_text()))
    return names | {"up"}


def test_dashboard_is_valid_and_queries_only_exported_metrics():
    dashboard = json.loads((HEALTH / "dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 5
    known = exported_names()
    for expr in exprs:
        used = set(re.findall(r"\b(lab[_:][a-z_:0-9]+|up)\b", expr))
        assert used, f"no metric in {expr!r}"
        assert used <= known, f"{expr!r} names metrics nobody exports: {used - known}"
    titles = " ".join(p["title"].lower() for p in dashboard["panels"])
    for topic in ("step rate", "step time", "all-reduce", "restarts", "loss"):
        assert topic in titles


def test_every_metric_has_the_lab_prefix_and_counters_end_in_total():
    metrics = RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0)
    for family in [*metrics.registry.collect(), *AgentMetrics(node="n", max_restarts=1).registry.collect()]:
        assert family.name.startswith("lab_")
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples)
        assert "duration" not in family.name or family.name.endswith("_seconds")
