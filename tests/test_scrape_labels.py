"""Every scrape config the lab ships gives the same labels (node, rank, local_rank), so every alert
summary reads the same wherever it fires.

A real 2 x 2 trainer job on netns hosts, with each node's exporters on the fixed ports pods
and containers use, scraped at once by three real Prometheus servers:

- the lab's own config (host and Docker runtimes: file_sd targets the exporters write);
- docker/prometheus/prometheus.yml (compose), its node names replaced by the hosts' addresses;
- k8s/overlays/monitoring/podmonitor.yaml as the Prometheus Operator turns it into a scrape
  config: one job per endpoint with the endpoint's relabelings and honorLabels, over targets
  carrying the meta labels kubernetes_sd gives a pod (its completion-index label, its port's
  name). The Operator and the Kubernetes API are not here; Prometheus' own relabelling is.

Each alert's summary is then rendered by `promtool test rules` over the series each server holds.
"""

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest
import yaml
from conftest import REPO, needs_netns

from lab.health import prometheus
from lab.rundir import RunDir
from lab.runtimes.local import LocalRuntime
from lab.topology import Topology
from lab.workloads import script_path

pytestmark = [
    pytest.mark.slow,
    needs_netns,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus is not installed (make host-deps)"),
]


def query(url: str, expr: str) -> list[dict]:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=5) as r:
        return json.load(r)["data"]["result"]


def compose_config(addresses: dict[str, str]) -> dict:
    text = (REPO / "docker" / "prometheus" / "prometheus.yml").read_text()
    for name, address in addresses.items():
        text = text.replace(f'"{name}:', f'"{address}:')
    config = yaml.safe_load(text)
    config["rule_files"] = [str(prometheus.RULES)]
    return config


def podmonitor_config(addresses: dict[str, str]) -> dict:
    """The PodMonitor as scrape jobs: each endpoint's port on every pod, the pod's meta labels."""
    monitor = yaml.safe_load((REPO / "k8s" / "overlays" / "monitoring" / "podmonitor.yaml").read_text())
    job = yaml.safe_load((REPO / "k8s" / "base" / "job.yaml").read_text())
    ports = {p["name"]: p["containerPort"] for p in job["spec"]["template"]["spec"]["containers"][0]["ports"]}
    jobs = []
    for i, endpoint in enumerate(monitor["spec"]["podMetricsEndpoints"]):
        targets = [
            {
                "targets": [f"{address}:{ports[endpoint['port']]}"],
                "labels": {
                    "__meta_kubernetes_pod_label_batch_kubernetes_io_job_completion_index": node.removeprefix("node"),
                    "__meta_kubernetes_pod_container_port_name": endpoint["port"],
                },
            }
            for node, address in addresses.items()
        ]
        relabel = [
            {
                **({"source_labels": r["sourceLabels"]} if "sourceLabels" in r else {}),
                "target_label": r["targetLabel"],
                "replacement": r["replacement"],
            }
            for r in endpoint.get("relabelings", [])
        ]
        jobs.append(
            {
                "job_name": f"podMonitor/default/torchrun-lab/{i}",
                "honor_labels": endpoint.get("honorLabels", False),
                "scrape_interval": "1s",
                "static_configs": targets,
                "relabel_configs": relabel,
            }
        )
    return {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(prometheus.RULES)],
        "scrape_configs": jobs,
    }


def start_prometheus(tmp_path, name: str, config: dict) -> tuple[subprocess.Popen, str]:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "prometheus.yml").write_text(json.dumps(config))
    port = prometheus.first_free_port(9190)
    proc = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    prometheus.Prometheus(folder, port=port).wait_ready(30, lambda: "")
    return proc, url


def labels_seen(url: str) -> dict[str, list[dict]]:
    """What each kind of series carries, job and instance aside."""

    def strip(result):
        return [{k: v for k, v in r["metric"].items() if k not in ("instance", "__name__")} for r in result]

    return {
        "rank": strip(query(url, "lab_step")),
        "up": strip(query(url, 'up{job="lab-ranks"} == 1')),
        "agent": strip(query(url, "lab_agent_info")),
    }


def rules_test(path, seen: dict[str, list[dict]]) -> str:
    """promtool's unit test of two alerts over these series: the expected summaries name the
    labels each config gives (an empty label would render as a blank)."""

    def series(name: str, labels: dict) -> str:
        return name + "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"

    down, stalled = seen["up"][0], seen["rank"][0]
    test = {
        "rule_files": [str(prometheus.RULES)],
        "evaluation_interval": "5s",
        "tests": [
            {
                "interval": "5s",
                "input_series": [
                    {"series": series("up", down), "values": "1 1 0x8"},
                    {"series": series("lab_last_step_timestamp_seconds", stalled), "values": "0 5 10x20"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "25s",
                        "alertname": "LabRankDown",
                        "exp_alerts": [
                            {
                                "exp_labels": {**down, "severity": "critical"},
                                "exp_annotations": {
                                    "summary": f"the exporter of local rank {down['local_rank']} on "
                                    f"{down['node']} is not answering scrapes",
                                    "description": "Its process died, hangs without serving, or its node is cut "
                                    "off. A job that just finished also shows this.",
                                },
                            }
                        ],
                    },
                    {
                        "eval_time": "60s",
                        "alertname": "LabTrainingStalled",
                        "exp_alerts": [
                            {
                                "exp_labels": {**stalled, "severity": "critical"},
                                "exp_annotations": {
                                    "summary": f"rank {stalled['rank']} has completed no step for 50s",
                                    "description": "A hung peer or a stuck collective; the process-group timeout "
                                    "will turn it into a failure.",
                                },
                            }
                        ],
                    },
                ],
            }
        ],
    }
    path.write_text(json.dumps(test))
    done = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr if done.returncode else ""


def test_host_compose_and_podmonitor_configs_give_every_series_the_same_labels(tmp_path):
    runtime = LocalRuntime(RunDir(tmp_path / "run"), hosts="netns", monitoring="on", log=lambda m: None)
    topology = Topology(nodes=2, nproc_per_node=2, metrics_ports="fixed")
    servers = []
    try:
        topology, nodes = runtime.up(topology, script_path("trainer"), ["--steps", "400", "--step-time", "0.1"])
        addresses = {n.name: n.address for n in nodes}
        urls = {"host": runtime.prometheus.url}
        for name, config in (("compose", compose_config(addresses)), ("podmonitor", podmonitor_config(addresses))):
            proc, urls[name] = start_prometheus(tmp_path, name, config)
            servers.append(proc)
        deadline = time.monotonic() + 60
        seen = {}
        while time.monotonic() < deadline:
            seen = {name: labels_seen(url) for name, url in urls.items()}
            if all(len(s["rank"]) == 4 and len(s["up"]) == 4 and len(s["agent"]) == 2 for s in seen.values()):
                break
            time.sleep(1)
        for name, s in seen.items():
            assert len(s["rank"]) == 4 and len(s["up"]) == 4 and len(s["agent"]) == 2, (name, s)
            assert all(r["node"] and r["rank"] and r["local_rank"] and r["job"] == "lab-ranks" for r in s["rank"]), s
            assert all(u["node"] and u["local_rank"] for u in s["up"]), (name, s["up"])
            assert all(a["node"] and a["job"] == "lab-agents" for a in s["agent"]), (name, s["agent"])
        # The same rank at the same place, whichever config scraped it.
        where = {name: sorted((r["node"], r["local_rank"], r["rank"]) for r in s["rank"]) for name, s in seen.items()}
        assert where["host"] == where["compose"] == where["podmonitor"], where
        for name, s in seen.items():
            failed = rules_test(tmp_path / f"{name}-rules-test.json", s)
            assert not failed, f"{name}: {failed}"
        # A pod's six rank ports that no worker serves are down, and never answered: no alert.
        assert len(query(urls["podmonitor"], 'up{job="lab-ranks"} == 0')) == 12
        assert not query(urls["podmonitor"], 'ALERTS{alertname="LabRankDown"}')
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        runtime.down(grace_s=5.0)
