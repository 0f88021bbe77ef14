"""The Kubernetes PrometheusRule for the monitoring overlay, generated from rules.yml.

    python -m lab.health.prometheus_rule > k8s/overlays/monitoring/prometheusrule.yaml

rules.yml stays the one source of the alert rules; a test fails when the committed
PrometheusRule differs from what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

RULES = Path(__file__).with_name("rules.yml")
HEADER = "# GENERATED from lab/health/rules.yml by `python -m lab.health.prometheus_rule`: edit the rules there.\n"


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (PromQL expressions) as literal blocks, as rules.yml writes them."""


_Dumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


def render() -> str:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "torchrun-lab", "labels": {"release": "prometheus"}},
        "spec": {"groups": groups},
    }
    return HEADER + yaml.dump(rule, Dumper=_Dumper, sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
