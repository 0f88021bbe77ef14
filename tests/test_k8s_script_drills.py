"""Drills on a user's own script with --runtime k8s, offline: the script is the one baked into
--image (lab image build), at its path there. What is refused in one line before anything
starts (no report dir, no cluster asked), and the command the pods of such a drill run. The
drill itself runs on the faithful pods in test_k8s_script_faithful.py."""

import json

import pytest
import yaml
from conftest import REPO, lab_in_process
from test_cli_errors import assert_one_line_error
from test_k8s import needs_kubectl

from lab import recovery
from lab.exercises import DrillOptions, kill_worker
from lab.exercises.script.script_run import ScriptRun
from lab.exercises.script.spec import ScriptSpec
from lab.node import k8s_pod
from lab.node.user_script import DEFAULT_REGEX
from lab.rundir import RunDir
from lab.runtimes.k8s import KubernetesRuntime
from lab.topology import Topology

SCRIPT = str(REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py")
IMAGE = ("--image", "registry.example/team/train:1")


@needs_kubectl
@pytest.mark.parametrize(
    ("verb", "args", "words"),
    [
        # A script on this machine is baked and pushed (below): with nowhere to push it, said.
        (["run", "kill-worker"], ["--script", SCRIPT], ["a pod cannot see", "--registry", "lab image build"]),
        (["matrix"], ["--faults", "kill-worker", "--script", SCRIPT], ["a pod cannot see", "--registry"]),
        (["run", "kill-worker"], ["--image", "my:1", "--script", SCRIPT], ["a pod cannot see", "--registry"]),
        (["run", "kill-worker"], [*IMAGE, "--script", "train.py"], ["absolute path inside the image"]),
        (["run", "kill-worker"], [*IMAGE, "--registry", "r.example", "--script", "/app/t.py"], ["drop --registry"]),
        # With a registry, nothing is refused for the script: the cluster is asked next, and answers not.
        (["run", "kill-worker"], [*IMAGE, "--script", SCRIPT, "--context", "nowhere"], ["no reachable"]),
        (["run", "preempt"], [*IMAGE, "--script", "/app/t.py", "--compare", "r.pt"], ["--compare", "in the pods"]),
        (["run", "kill-worker"], [*IMAGE, "--script", "/app/t.py", "--workdir", str(REPO)], ["--workdir", "drop"]),
        (["run", "corrupt-checkpoint"], [*IMAGE, "--script", "/app/t.py"], ["--ckpt-dir"]),
        (["run", "kill-worker"], [*IMAGE, "--script", "/app/t.py", "--context", "nowhere"], ["no reachable"]),
    ],
)
def test_what_a_k8s_drill_on_a_script_cannot_take_is_one_line_and_makes_nothing(lab, capsys, verb, args, words):
    out = lab_in_process(capsys, "exercise", *verb, "--runtime", "k8s", "--run-dir", str(lab.run_dir), *args)
    assert_one_line_error(out, *words)
    assert not lab.run_dir.exists(), "no report dir, no run dir"


@needs_kubectl
@pytest.mark.parametrize(
    ("overlay", "workdir"),
    [("cpu-gloo", "/data/work/kill-worker"), ("shared-checkpoints", "/shared/work/kill-worker-")],
)
def test_the_pods_run_the_script_from_the_image_in_the_runs_working_dir(tmp_path, overlay, workdir):
    """As the drill renders it (ScriptRun's topology, the runtime's working dir): every pod runs
    the lab's watcher on the script at its path in the image, in a working dir on its volume:
    its own emptyDir, or the volume every pod shares."""
    runtime = KubernetesRuntime(RunDir(tmp_path / "run"), overlay=overlay, image=IMAGE[1])
    spec = ScriptSpec(path="/opt/user/team/train.py", args=("--config", "a b.yaml"), ckpt_dir="ckpt")
    run = ScriptRun(spec, kill_worker, Topology(), runtime.script_workdir("kill-worker"), tmp_path, host_files=False)
    topology, _ = recovery.choose(run.topology(DrillOptions(1, 3)), "auto", runtime.job_rendezvous())
    objects = [o for o in yaml.safe_load_all(runtime.plan(topology, spec.path, list(spec.args)).text()) if o]
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    container = next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE[1]
    assert json.loads(config["LAB_TOPOLOGY"])["rdzv_backend"] == "lab"
    for index in (0, 1):
        argv = k8s_pod.argv_from_env({**config, "JOB_COMPLETION_INDEX": str(index)})
        watcher = argv.index("--workdir")
        assert argv[watcher + 1].startswith(workdir)
        assert argv[watcher + 2 : watcher + 4] == ["--progress-regex", DEFAULT_REGEX]
        assert argv[-3:] == ["/opt/user/team/train.py", "--config", "a b.yaml"]
    assert bool(runtime.script_workdir_note()) == (overlay == "cpu-gloo")


@needs_kubectl
def test_a_script_on_this_machine_is_rendered_from_the_image_the_drill_would_bake(tmp_path):
    """As a drill renders it before the cluster is asked: the pods run the watcher on the script's
    path in the image the lab would push (tests/test_registry.py runs the bake), and no path of
    this machine's is in any object."""
    runtime = KubernetesRuntime(RunDir(tmp_path / "run"), registry="127.0.0.1:5000")
    spec = ScriptSpec(path=SCRIPT, args=("--epochs", "3"))
    run = ScriptRun(spec, kill_worker, Topology(), runtime.script_workdir("kill-worker"), tmp_path, host_files=False)
    topology, _ = recovery.choose(run.topology(DrillOptions(1, 3)), "auto", runtime.job_rendezvous())
    text = runtime.plan(topology, spec.path, list(spec.args)).text()
    objects = [o for o in yaml.safe_load_all(text) if o]
    container = next(o for o in objects if o["kind"] == "Job")["spec"]["template"]["spec"]["containers"][0]
    assert runtime.bake is not None and container["image"] == runtime.bake.tag
    assert container["image"].startswith("127.0.0.1:5000/torchrun-lab-user-user-scripts:")
    config = next(o for o in objects if o["kind"] == "ConfigMap")["data"]
    argv = k8s_pod.argv_from_env({**config, "JOB_COMPLETION_INDEX": "1"})
    assert argv[-3:] == ["/opt/user/user_scripts/snapshot_every_epoch.py", "--epochs", "3"]
    assert str(REPO) not in yaml.safe_dump_all(objects) and text.startswith("# would build ")
