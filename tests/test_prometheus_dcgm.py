"""The GPU alerts on dcgm-exporter's series, before and after its 4.9 renames, by the real promtool.

dcgm-exporter 4.9 renamed its default fields to DCGM 4.7's names and moved some to base
units (memory MiB -> bytes, utilisation percent -> 0-1 ratio). The lab's rules read either.
Two promtool tests feed the same readings, one per naming scheme, and must expect the same
alerts; the names below are each version's, as its collectors export them (the ground truth
these tests hold the rules to, not read from the rules).
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from lab.health import prometheus

TESTS = Path(__file__).parent / "prometheus"
LEGACY = TESTS / "dcgm_legacy_test.yml"
V4_9 = TESTS / "dcgm_4_9_test.yml"
NAMES = {
    LEGACY: {
        "DCGM_FI_DEV_GPU_UTIL",  # percent
        "DCGM_FI_DEV_FB_USED",  # MiB, as are FREE and RESERVED
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_RESERVED",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    },
    V4_9: {
        "DCGM_FI_DEV_GPU_UTIL_RATIO",  # 0-1
        "DCGM_FI_DEV_FB_USED_BYTES",
        "DCGM_FI_DEV_FB_FREE_BYTES",
        "DCGM_FI_DEV_FB_RESERVED_BYTES",
        "DCGM_FI_DEV_FB_CAPACITY_BYTES",  # collected by default from 4.9 on
        "DCGM_FI_DEV_XID_ERROR",
        "DCGM_FI_DEV_ROW_REMAP_FAILED",
    },
}
pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (make host-deps)")


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("path", [LEGACY, V4_9], ids=["up to 4.8", "4.9"])
def test_the_gpu_alerts_fire_as_expected_on_each_naming_scheme(path):
    tested = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert tested.returncode == 0, tested.stdout + tested.stderr


@pytest.mark.parametrize("path", [LEGACY, V4_9], ids=["up to 4.8", "4.9"])
def test_each_test_feeds_only_its_versions_names(path):
    fed = {re.match(r"\w+", s["series"])[0] for test in load(path)["tests"] for s in test["input_series"]}
    assert fed == NAMES[path]


def test_both_schemes_expect_the_same_alerts_and_test_every_dcgm_alert():
    expected = [[test["alert_rule_test"] for test in load(path)["tests"]] for path in (LEGACY, V4_9)]
    assert expected[0] == expected[1]
    group = next(g for g in load(prometheus.RULES)["groups"] if g["name"] == "torchrun-lab-dcgm")
    alerts = {rule["alert"] for rule in group["rules"] if "alert" in rule}
    tested = {case["alertname"] for cases in expected[0] for case in cases}
    assert alerts and alerts == tested
