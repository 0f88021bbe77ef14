"""k8s/ray: the KubeRay manifests, checked offline. RayCluster and RayJob are custom
resources no offline schema here knows, so their pod templates are validated as core
PodTemplates (strictly, Kubernetes 1.29-1.33) and the rest is checked field by field."""

from __future__ import annotations

import shlex

import pytest
import yaml
from conftest import REPO
from test_k8s import needs_kubectl, restricted_violations

from lab.cli import build_parser

pytestmark = needs_kubectl


def rendered() -> dict[str, dict]:
    import subprocess

    out = subprocess.run(
        ["kubectl", "kustomize", str(REPO / "k8s" / "ray")], capture_output=True, text=True, check=True
    )
    return {o["kind"]: o for o in yaml.safe_load_all(out.stdout) if o}


def pod_templates(objs: dict[str, dict]) -> dict[str, dict]:
    cluster, job = objs["RayCluster"]["spec"], objs["RayJob"]["spec"]
    found = {"head": cluster["headGroupSpec"]["template"], "submitter": job["submitterPodTemplate"]}
    found.update({g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]})
    return found


def test_every_pod_authenticates_and_mounts_no_service_account_token():
    """Ray's token auth from the Secret on the head, every worker and the job's driver; no pod
    carries an API token; only the cluster's own pods may connect to it."""
    objs = rendered()
    for name, template in pod_templates(objs).items():
        assert template["spec"]["automountServiceAccountToken"] is False, name
        env = {e["name"]: e for e in template["spec"]["containers"][0].get("env", [])}
        assert env["RAY_AUTH_MODE"]["value"] == "token", name
        assert env["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "torchrun-lab-ray-token", name
    policy = objs["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == {"ray.io/cluster": "torchrun-lab"}
    sources = [peer["podSelector"]["matchLabels"] for rule in policy["ingress"] for peer in rule["from"]]
    assert {"ray.io/cluster": "torchrun-lab"} in sources and all("namespaceSelector" not in str(s) for s in sources)


def test_pod_templates_and_the_claim_validate_as_core_objects():
    import kubernetes_validate

    objs = rendered()
    assert set(objs) == {"PersistentVolumeClaim", "RayCluster", "RayJob", "NetworkPolicy"}
    core = [objs["PersistentVolumeClaim"], objs["NetworkPolicy"]] + [
        {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name}, "template": template}
        for name, template in pod_templates(objs).items()
    ]
    for obj in core:
        for version in ("1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"):
            kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("name", ["head", "lab-machines", "submitter"])
def test_every_ray_pod_meets_the_restricted_profile(name):
    template = pod_templates(rendered())[name]
    assert restricted_violations(template["spec"]) == []
    for container in template["spec"]["containers"]:
        assert container["image"] == "torchrun-lab:ray"
        assert container["resources"]["limits"] == container["resources"]["requests"]


def test_the_cluster_runs_the_labs_ray_version_and_one_lab_node_per_worker():
    import ray

    objs = rendered()
    cluster = objs["RayCluster"]
    assert cluster["apiVersion"] == "ray.io/v1"
    assert cluster["spec"]["rayVersion"] == ray.__version__
    assert f"ray=={ray.__version__}" in (REPO / "docker" / "requirements-ray.txt").read_text()
    assert "AS ray" in (REPO / "docker" / "Dockerfile").read_text()
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0", "the head must hold no lab node"
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    assert workers["replicas"] == workers["minReplicas"] == workers["maxReplicas"]
    anti = workers["template"]["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"].items() <= workers["template"]["metadata"]["labels"].items()
    mounts = {
        t: [m["mountPath"] for m in tpl["spec"]["containers"][0]["volumeMounts"]]
        for t, tpl in pod_templates(objs).items()
        if t != "submitter"
    }
    assert all(paths == ["/var/lib/torchrun-lab"] for paths in mounts.values()), "every machine shares the run dir"


def test_the_rayjob_runs_a_lab_exercise_on_the_cluster():
    objs = rendered()
    job = objs["RayJob"]["spec"]
    assert job["clusterSelector"] == {"ray.io/cluster": objs["RayCluster"]["metadata"]["name"]}
    argv = shlex.split(job["entrypoint"])
    assert argv[:3] == ["python", "-m", "lab"]
    args = build_parser().parse_args(argv[3:])  # the lab's own parser accepts the command
    assert (args.command, args.verb, args.runtime, args.ray_address) == ("exercise", "run", "ray", "auto")
