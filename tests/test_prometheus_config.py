"""Rules, config and dashboard checked by the real promtool, and against what the exporters export."""

import json
import os
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
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (make host-deps installs it)"
)


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
    texts = [test.read_text() for test in RULES_TEST.parent.glob("*.yml")]
    tested = {name for text in texts for name in re.findall(r"alertname: (\w+)", text)}
    assert alerts and alerts <= tested, f"untested alerts: {alerts - tested}"


@needs_promtool
def test_generated_config_passes_promtool(tmp_path):
    server = prometheus.Prometheus(tmp_path)
    server.write_config()
    checked = promtool("check", "config", str(server.config_path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


class FakeGpu:
    """Stands in for a CUDA device and NVML (test double: no GPU on this machine)."""

    def read(self):
        from lab.health.gpu_metrics import GpuReading

        return GpuReading(
            allocated_bytes=1.0,
            reserved_bytes=2.0,
            total_bytes=4.0,
            utilization_ratio=0.5,
            temperature_celsius=40.0,
            power_watts=100.0,
            ecc_corrected=0.0,
            ecc_uncorrected=0.0,
        )


def exported_names() -> set[str]:
    """Every series name the rank and agent exporters really expose, plus the recording rules."""
    names = set()
    # A rank on a GPU (the source is a double: no GPU here) exports the GPU families too.
    on_gpu = RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0, gpu_source=FakeGpu())
    for metrics in (on_gpu, AgentMetrics(node="n", max_restarts=0)):
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
    metrics = RankMetrics(rank=0, local_rank=0, node="n", world_size=1, restart=0, gpu_source=FakeGpu())
    for family in [*metrics.registry.collect(), *AgentMetrics(node="n", max_restarts=1).registry.collect()]:
        assert family.name.startswith("lab_")
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples)
        assert "duration" not in family.name or family.name.endswith("_seconds")


@pytest.mark.skipif(prometheus.binary() is None, reason="prometheus not installed (make host-deps installs it)")
def test_a_port_taken_between_choosing_and_binding_moves_to_the_next_free_one(tmp_path):
    """Two labs starting at one moment can both find the same port free. The one that loses the
    bind must neither fail nor take the other's server (which answers /-/ready too) for its own."""
    import http.server
    import threading

    from lab import procs

    server = prometheus.Prometheus(tmp_path / "prometheus", port=None)
    chosen = server.port

    class AlwaysReady(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  # http.server's name
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    other = http.server.HTTPServer(("127.0.0.1", chosen), AlwaysReady)  # the other lab's, first
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        server.start(str(tmp_path / "run"))
        try:
            assert server.port != chosen and server.url.endswith(f":{server.port}")
            assert procs.listener_pids(server.port) - {os.getpid()}, "a Prometheus of its own listens there"
            answer = prometheus.Prometheus(tmp_path, port=server.port).query("vector(1)")
            assert answer == [{"metric": {}, "value": 1.0}]
        finally:
            procs.terminate(procs.marked_pids(str(tmp_path / "run")), 5)
    finally:
        other.shutdown()
        other.server_close()
