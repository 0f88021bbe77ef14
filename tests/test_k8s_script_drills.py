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
        (["run", "kill-worker"], ["--script", SCRIPT], ["a pod cannot see", "lab image build", "--image REF"]),
        (["matrix"], ["--faults", "kill-worker", "--script", SCRIPT], ["a pod cannot see"]),
        (["run", "kill-worker"], [*IMAGE, "--script", "train.py"], ["absolute path inside the image"]),
        (["run", "kill-worker"], [*IMAGE, "--script", SCRIPT], ["is a file on this machine", "lab image build"]),
        (["matrix"], [*IMAGE, "--faults", "kill-worker", "--script", SCRIPT], ["is a file on this machine"]),
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
