"""The Kubernetes manifests, checked as closely as honest tests can without a cluster.

No Kubernetes API server can run on this machine, so nothing here applies the manifests
to one. Instead: every overlay renders with the real `kubectl kustomize`; every rendered
core object validates against the Kubernetes 1.29 and 1.33 OpenAPI schemas
(kubernetes-validate, strict); the Prometheus Operator objects, which have no schema
there, are checked for their required fields; every pod passes the Pod Security
"restricted" checks (chaos excepted, on purpose); golden renders catch unintended change;
and test_rendered_pod_template_trains_on_netns_hosts runs the rendered pod template
itself as a multi-node job. The k8s runtime's cluster path (apply, logs, faults through
the API) is not exercised here; its offline half (--dry-run, the errors) is, in
test_k8s_runtime.py.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import REPO, needs_netns

from lab.health import prometheus_rule
from lab.node import k8s_pod
from lab.node.restart_budget import CRASH_LOOP_EXIT

OVERLAYS = ("cpu-gloo", "cuda-nccl", "elastic", "monitoring", "chaos", "shared-checkpoints")
GOLDEN = Path(__file__).parent / "golden" / "k8s"
CRD_KINDS = {"PodMonitor", "PrometheusRule"}
needs_kubectl = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (make host-deps)")


def kustomize(overlay: str) -> str:
    done = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s" / "overlays" / overlay)], capture_output=True, text=True, check=True
    )
    return done.stdout


def objects(overlay: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(kustomize(overlay)) if o]


def pod_specs(objs: list[dict]) -> list[tuple[str, dict]]:
    return [
        (f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"]["spec"])
        for o in objs
        if o["kind"] in ("Job", "Deployment", "StatefulSet", "DaemonSet")
    ]


def restricted_violations(spec: dict) -> list[str]:
    """The Pod Security Standards' "restricted" profile, as the checks it lists."""
    bad = []
    pod_sc = spec.get("securityContext", {})
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            bad.append(f"{flag} is set")
    allowed_volumes = {
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    }
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= allowed_volumes:
            bad.append(f"volume {volume['name']} is {sorted(kinds)}")
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            bad.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{c['name']}: allowPrivilegeEscalation is not false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            bad.append(f"{c['name']}: capabilities do not drop ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{c['name']}: adds capabilities {caps['add']}")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            bad.append(f"{c['name']}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            bad.append(f"{c['name']}: runs as user 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{c['name']}: seccompProfile is {seccomp}")
    return bad


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_validates_against_kubernetes_1_29_to_1_33(overlay):
    import kubernetes_validate

    objs = objects(overlay)
    assert objs
    for obj in objs:
        if obj["kind"] in CRD_KINDS:
            assert obj["apiVersion"] == "monitoring.coreos.com/v1" and obj["spec"]
            continue
        for version in ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"):
            kubernetes_validate.validate(obj, version, strict=True)  # raises on any error


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_meets_the_restricted_profile(overlay):
    specs = pod_specs(objects(overlay))
    assert specs
    for name, spec in specs:
        assert restricted_violations(spec) == [], name


@needs_kubectl
def test_the_checker_catches_an_added_capability_and_no_overlay_adds_one():
    """No fault acts from inside a pod, so no overlay grants a capability (chaos included);
    the profile checker itself is shown to catch one."""
    ((name, spec),) = pod_specs(objects("chaos"))
    spec["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_ADMIN"]
    assert restricted_violations(spec) == ["node: adds capabilities ['NET_ADMIN']"]
    for overlay in OVERLAYS:
        assert "NET_ADMIN" not in kustomize(overlay) and "add:" not in kustomize(overlay)


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_no_pod_mounts_a_service_account_token(overlay):
    """The lab's pods never call the API server: a token in them would only be something to steal."""
    for name, spec in pod_specs(objects(overlay)):
        assert spec.get("automountServiceAccountToken") is False, name


@needs_kubectl
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_render_matches_the_golden_file(overlay):
    """An unintended change to what a cluster is given shows here. After an intended one, `make
    golden` rewrites the files (this test never does: it would then pass whatever it rendered),
    and the change is read in the diff before it is committed."""
    assert kustomize(overlay) == (GOLDEN / f"{overlay}.yaml").read_text()


@needs_kubectl
def test_the_base_is_a_gang_of_indexed_pods_with_stable_names():
    objs = objects("cpu-gloo")
    job = next(o for o in objs if o["kind"] == "Job")
    service = next(o for o in objs if o["kind"] == "Service")
    topology = json.loads(next(o for o in objs if o["kind"] == "ConfigMap")["data"]["LAB_TOPOLOGY"])
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == topology["nodes"]
    assert job["spec"]["template"]["spec"]["subdomain"] == service["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    assert topology["rdzv_host"] == f"{job['metadata']['name']}-0.{service['metadata']['name']}"
    assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > 30  # torchrun's SIGTERM wait


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_crash_loop_fails_the_job_so_no_new_pod_restarts_the_count(overlay):
    """The agent's crash-loop exit (lab.node.restart_budget) is a FailJob code in every overlay: a
    replaced pod would start a fresh agent with a fresh budget. Pod failures count per index
    (backoffLimitPerIndex), in the Job's status, which replacing a pod does not reset."""
    job = next(o for o in objects(overlay) if o["kind"] == "Job")["spec"]
    fail_job = [r["onExitCodes"]["values"] for r in job["podFailurePolicy"]["rules"] if r["action"] == "FailJob"]
    assert any(CRASH_LOOP_EXIT in codes for codes in fail_job), fail_job
    assert job["backoffLimitPerIndex"] >= 0 and job["maxFailedIndexes"] == 0


def test_the_prometheus_rule_is_generated_from_the_lab_rules():
    committed = (REPO / "k8s" / "overlays" / "monitoring" / "prometheusrule.yaml").read_text()
    assert committed == prometheus_rule.render()
    rules = yaml.safe_load(committed)["spec"]["groups"]
    assert rules == yaml.safe_load(prometheus_rule.RULES.read_text())["groups"]


def test_pod_entry_renders_the_node_command_from_the_configmap():
    env = {
        "LAB_TOPOLOGY": json.dumps(
            {"nodes": 2, "nproc_per_node": 2, "rdzv_host": "torchrun-lab-0.torchrun-lab", "metrics_ports": "fixed"}
        ),
        "JOB_COMPLETION_INDEX": "1",
        "LAB_WORKLOAD": "trainer",
        "LAB_WORKLOAD_ARGS": "--steps 5",
    }
    argv = k8s_pod.argv_from_env(env)
    assert "--rdzv-endpoint=torchrun-lab-0.torchrun-lab:29400" in argv
    assert "--rdzv-conf=join_timeout=120,is_host=0" in argv  # index 1 does not host the store
    assert "--env=LAB_AGENT_METRICS_PORT=9400" in argv and "--env=LAB_METRICS_PORT_BY=local_rank" in argv
    assert argv[-3:] == [str(REPO / "lab" / "workloads" / "trainer.py"), "--steps", "5"]
    with pytest.raises(SystemExit, match="JOB_COMPLETION_INDEX"):
        k8s_pod.argv_from_env({**env, "JOB_COMPLETION_INDEX": ""})
    with pytest.raises(SystemExit, match="sees no GPU"):
        k8s_pod.argv_from_env({**env, "LAB_TOPOLOGY": json.dumps({"nodes": 2, "nproc_per_node": "gpu"})})


@pytest.mark.slow
@needs_netns
@needs_kubectl
def test_rendered_pod_template_trains_on_netns_hosts(tmp_path):
    """The manifest-faithful run (tests/k8s_faithful.py): the rendered Job's container command,
    args and environment (the ConfigMap resolved as envFrom does), one netns host per completion
    index named as the pod would be (hostname torchrun-lab-<i>, DNS torchrun-lab-<i>.torchrun-lab),
    with JOB_COMPLETION_INDEX set as the Job controller sets it and each emptyDir mount a fresh
    folder. What a cluster adds (scheduling, the Service's DNS server) is not here."""
    from k8s_faithful import FaithfulJob

    objs = objects("cpu-gloo")
    with FaithfulJob(objs, tmp_path, "ee0b2") as job:
        job.start_all()
        codes = job.wait(300)
        name, count = job.name, job.count
    logs = [(tmp_path / f"pod{i}.0.log").read_text() for i in range(count)]
    assert codes == [0] * count, "\n".join(log[-2000:] for log in logs)

    sums = re.findall(r"rank (\d+) local_rank \d+ host (\S+) checksum \S+ \((\S+)\) at step 200", "".join(logs))
    assert sorted(int(r) for r, _, _ in sums) == [0, 1, 2, 3]
    assert len({exact for _, _, exact in sums}) == 1
    assert {host for _, host, _ in sums} == {f"{name}-0", f"{name}-1"}
