"""Every kubectl command the k8s runtime, its log follower and its drills can run, through the
real kubectl client against an address nobody answers.

No API server runs here, so each call must fail; what is proven is how: on the connection
(kubectl accepted every flag and went to the server), never on kubectl's own argument
checks, which fail before any connection. That is the class of bug that hid
`kubectl logs -f job/NAME -l SELECTOR` ("only a selector (-l) or a POD name is allowed").
"""

import inspect
import shutil
import subprocess
from pathlib import Path

import pytest

from lab.errors import LabError
from lab.runtimes.k8s_node import PodNode
from lab.runtimes.kubectl import Kubectl

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (make host-deps)")

# kubectl's own complaints about its command line: none of these may appear.
ARGUMENT_ERRORS = ("unknown flag", "only a selector", "required flag", "Usage:", "see 'kubectl", "invalid argument",
                   "unknown command", "must specify", "error: flag", "accepts", "unknown shorthand")  # fmt: skip


@pytest.fixture
def nowhere(tmp_path, monkeypatch):
    """A kubeconfig whose only cluster is a port nothing listens on."""
    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
        "users: [{name: u, user: {token: none}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(config))
    return Kubectl(context="c", namespace="drills")


def example_calls(k: Kubectl) -> dict[str, tuple[list[str], str | None]]:
    """One call of every builder, with the stdin it is run with."""
    return {
        "version": (k.version(), None),
        "apply": (k.apply(), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"),
        "wait_pods_created": (k.wait_pods_created(5), None),
        "index_pods": (k.index_pods(1), None),
        "pod_state": (k.pod_state("torchrun-lab-1-abcde"), None),
        "job_conditions": (k.job_conditions(), None),
        "logs": (k.logs("torchrun-lab-1-abcde"), None),
        "exec": (k.exec("torchrun-lab-1-abcde", "python", "-c", "print(1)"), None),
        "evict": (k.evict("torchrun-lab-1-abcde"), k.eviction_body("torchrun-lab-1-abcde", 0)),
        "label_partitioned": (k.label_partitioned("torchrun-lab-1-abcde", True), None),
        "delete_job": (k.delete_job(60), None),
        "delete_manifests": (k.delete_manifests(str(Path(__file__).parent / "golden" / "k8s" / "chaos.yaml")), None),
    }


def builders() -> set[str]:
    return {
        name
        for name, member in inspect.getmembers(Kubectl, inspect.isfunction)
        if not name.startswith("_") and name not in ("run", "check_cluster", "eviction_body")
    }


def test_every_kubectl_call_reaches_for_the_server(nowhere):
    calls = example_calls(nowhere)
    assert set(calls) == builders(), "a new kubectl call needs its example here"
    calls["unpartition"] = (nowhere.label_partitioned("torchrun-lab-1-abcde", False), None)
    calls["logs since"] = (nowhere.logs("torchrun-lab-1-abcde", since_time="2026-12-01T00:00:00Z"), None)
    for name, (argv, stdin) in calls.items():
        done = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=60)
        said = done.stderr + done.stdout
        assert done.returncode != 0, f"{name}: kubectl succeeded with no server"
        assert not [e for e in ARGUMENT_ERRORS if e.lower() in said.lower()], f"{name}: {argv}\n{said}"
        assert "127.0.0.1:1" in said and ("refused" in said or "connect" in said), f"{name}: {said}"


def test_the_old_log_command_is_the_kind_of_call_this_catches(nowhere):
    """The check is not blind: the argv the runtime used to stream logs with fails it."""
    selector = "batch.kubernetes.io/job-completion-index=0"
    argv = nowhere._argv("logs", "-f", "job/torchrun-lab", "-c", "node", "-l", selector)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert "only a selector" in done.stderr and "127.0.0.1:1" not in done.stderr


def test_every_pod_fault_is_one_line_error_without_a_server(nowhere, tmp_path):
    """Each fault a drill can inject on a pod runs its kubectl calls and fails in one line."""
    node = PodNode(nowhere, 1, tmp_path)
    faults = {
        "worker_pids": (),
        "kill_worker": (0,),
        "pause_worker": (0,),
        "resume_worker": (0,),
        "kill_node": (),
        "preempt": (5,),
        "partition": (),
        "heal": (),
        "corrupt_checkpoint": ("/data/checkpoints",),
        "exit_code": (),
        "stop": (),
    }
    for fault, args in faults.items():
        with pytest.raises(LabError) as raised:
            getattr(node, fault)(*args)
        message = str(raised.value)
        assert "\n" not in message and "refused" in message, f"{fault}: {message}"


def test_the_log_follower_puts_echoed_events_back_into_files(tmp_path):
    """What a pod prints with LAB_EVENTS_ECHO=1 (a real EventLog's lines) becomes the run dir's
    event files the drills read; every other line stays in the node's log."""
    import io
    import os

    from lab.health import events as events_module
    from lab.health.events import EventLog, read_events
    from lab.runtimes.k8s_logs import copy_lines

    printed = io.StringIO()
    pod_files = tmp_path / "pod-data"
    os.environ["TORCHELASTIC_RESTART_COUNT"] = "0"
    log = EventLog(pod_files, rank=3, local_rank=1)
    real_stderr, real_echo = events_module.sys.stderr, events_module.ECHO
    events_module.sys.stderr, events_module.ECHO = printed, True
    try:
        log.write("start", world_size=4, steps=60)
        log.step(7, 0.25, 0.01)
    finally:
        events_module.sys.stderr, events_module.ECHO = real_stderr, real_echo
    stream = io.StringIO("[rank3]: loss 0.25\n" + printed.getvalue() + "@lab-event ../../etc {}\nlast line\n")
    node_log = io.StringIO()
    copy_lines(stream, node_log, tmp_path / "events")
    assert node_log.getvalue() == "[rank3]: loss 0.25\n@lab-event ../../etc {}\nlast line\n"
    assert list(read_events(tmp_path / "events")) == list(read_events(pod_files))
    assert [e["event"] for e in read_events(tmp_path / "events")] == ["start", "step"]
