"""Bad input: one line on stderr, a non-zero exit, no traceback, and nothing started."""

import os
import socket
import subprocess
import sys

import pytest
from conftest import REPO, lab_in_process, loopback_labs

from lab.workloads import script_path


def assert_one_line_error(out, *words):
    assert out.returncode != 0
    assert "Traceback" not in out.stderr + out.stdout
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for word in words:
        assert word in lines[0]


BAD_INPUT = [
    (["up", "--nodes", "0"], ["nodes", "0"]),
    (["bench", "diagnosis", "--classes", "kill,nosuch"], ["--classes", "choose from kill", "nosuch"]),
    (["up", "--nproc-per-node", "-1"], ["--nproc-per-node", "-1"]),
    (["up", "--runtime", "nosuch"], ["--runtime", "nosuch"]),
    (["run", "no/such/script.py"], ["script not found", "no/such/script.py"]),
    (["exercise", "run", "kill-node", "--nodes", "1"], ["kill-node", "2 nodes", "--nodes 1"]),
    (["exercise", "run", "kill-rendezvous-host", "--nodes", "1"], ["kill-rendezvous-host", "2 nodes"]),
    (["exercise", "run", "hang-rank", "--runtime", "k8s"], ["hang-rank", "Prometheus", "k8s runtime does not"]),
    (
        ["exercise", "run", "kill-worker", "--torch-defaults", "--runtime", "docker"],
        ["docker runtime cannot delay its restarted workers"],
    ),
    (
        ["exercise", "run", "kill-worker", "--nodes", "3", "--nproc-per-node", "1", "--target-rank", "3"],
        ["--target-rank", "[0, 3)", "3"],
    ),
    (
        [
            "exercise",
            "run",
            "corrupt-checkpoint",
            "--script",
            str(REPO / "tests/user_scripts/snapshot_every_epoch.py"),
        ],
        ["corrupt-checkpoint on your script needs --ckpt-dir"],
    ),
    # --recovery on each entry point: a style the job, the drill or the runtime cannot run
    (["up", "--recovery", "in-process"], ["--recovery in-process", "ddp_train.py does not train in lab.inprocess"]),
    (
        ["up", "--runtime", "k8s", "--recovery", "in-process", "--dry-run"],
        ["--recovery in-process: the k8s runtime cannot run it", "use --recovery restart"],
    ),
    (["run", "--recovery", "torchrun", "--rdzv-backend", "lab", script_path("ddp_train")], ["drop one"]),
    (
        ["up", "--runtime", "k8s", "--overlay", "elastic", "--recovery", "restart", "--dry-run"],
        ["elastic overlay's pods rendezvous on etcd-v2", "use --recovery torchrun"],
    ),
    (
        ["up", "--runtime", "k8s", "--overlay", "elastic", "--rdzv-backend", "lab", "--dry-run"],
        ["--rdzv-backend lab", "etcd-v2"],
    ),
    (["up", "--runtime", "k8s", "--overlay", "elastic", "--rdzv-backend", "c10d", "--dry-run"], ["runs etcd-v2"]),
    (["up", "--runtime", "docker", "--rdzv-backend", "etcd-v2", "--dry-run"], ["docker runtime runs c10d or lab"]),
    (["exercise", "run", "kill-node", "--recovery", "restart"], ["kill-node", "use --recovery torchrun"]),
    (["exercise", "run", "kill-worker", "--torch-defaults", "--recovery", "restart"], ["--torch-defaults"]),
    (
        ["exercise", "run", "kill-worker", "--runtime", "k8s", "--overlay", "elastic", "--recovery", "restart"],
        ["elastic overlay's pods"],
    ),
    (
        [
            "exercise",
            "matrix",
            "--script",
            str(REPO / "tests/user_scripts/snapshot_every_epoch.py"),
            "--faults",
            "kill-worker,kill-node",
            "--recovery",
            "restart",
        ],
        ["kill-node drills a node's loss"],
    ),  # fmt: skip
    # --parallel fsdp2: the lab trainer's, restart recovery, one checkpoints folder every node sees
    (
        ["exercise", "run", "kill-worker", "--parallel", "fsdp2", "--recovery", "in-process"],
        ["--recovery in-process", "not with --parallel fsdp2", "holds only its shard"],
    ),
    (["exercise", "run", "kill-worker", "--parallel", "fsdp2", "--runtime", "k8s"], ["--parallel fsdp2 on k8s"]),
    (["exercise", "run", "collective-mismatch", "--parallel", "fsdp2"], ["collective-mismatch runs its own workload"]),
    (["exercise", "run", "hello-ddp", "--parallel", "fsdp2"], ["hello-ddp is a lesson exercise", "--parallel"]),
    (
        ["exercise", "run", "kill-worker", "--parallel", "fsdp2", "--script", script_path("plain_train")],
        ["--parallel is the lab trainer's"],
    ),
    (["exercise", "run", "kill-worker", "--parallel", "fsdp3"], ["--parallel", "invalid choice: 'fsdp3'"]),
    # A flag before the name it belongs to: its value would be read as the name.
    (
        ["exercise", "run", "--runtime", "docker", "kill-worker"],
        ["--runtime goes after the name: lab exercise run NAME"],
    ),
    (["--run-dir", "/tmp/x", "up"], ["--run-dir goes after the command: lab COMMAND --run-dir ..."]),
    (["image", "--tag", "r/x:1", "build"], ["--tag goes after 'build': lab image build --tag ..."]),
    (["exercise", "run", "nosuch", "--runtime", "docker"], ["invalid choice: 'nosuch'"]),  # the name first: as before
]


@pytest.mark.parametrize("args, words", BAD_INPUT)
def test_bad_input_is_one_line(lab, capsys, monkeypatch, args, words):
    """main() in this process, as the command runs it (a `lab` process per case cost the fast tier
    about 5 CPU-s); the command itself, on three of them, in the next test."""
    monkeypatch.setenv("LAB_RUN_DIR", str(lab.run_dir))
    monkeypatch.chdir(REPO)
    out = lab_in_process(capsys, *args)
    assert_one_line_error(out, *words)
    assert not lab.run_dir.exists(), "nothing may be started on bad input"


@pytest.mark.parametrize("args, words", [BAD_INPUT[i] for i in (3, 4, 5)])  # argparse's refusal, the lab's, a drill's
def test_bad_input_is_one_line_from_the_command_too(lab, args, words):
    out = lab(*args)
    assert_one_line_error(out, *words)
    assert not lab.run_dir.exists(), "nothing may be started on bad input"


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2"])
def test_a_rendezvous_port_in_use_is_named(lab, address):
    """Node 0's store binds every address: a listener on any one of them (another lab's etcd on
    its gateway) takes the port, and is refused before a node starts, not by torchrun after."""
    with socket.socket() as busy:
        busy.bind((address, 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = lab("run", "--hosts", "loopback", "--rdzv-port", str(port), script_path("ddp_train"))
    # The holder is named as what it is: this test's own process, not a lab.
    assert_one_line_error(out, "port", str(port), "--rdzv-port", f"pid {os.getpid()}, not a lab")
    assert "a lab is running" not in out.stderr


def test_down_with_nothing_running_says_so_and_succeeds(lab):
    out = lab("down")
    assert out.returncode == 0
    assert "nothing to stop" in out.stdout


def test_status_with_nothing_running_exits_3(lab):
    out = lab("status")
    assert out.returncode == 3 and "no lab is running" in out.stdout


def test_dry_run_prints_every_nodes_command_and_starts_nothing(lab):
    out = lab("up", "--nodes", "3", "--hosts", "loopback", "--dry-run")
    assert out.returncode == 0, out.stderr
    commands = [line for line in out.stdout.splitlines() if " -m lab.node.launch " in line and not line.startswith("#")]
    assert len(commands) == 3
    assert all("--rdzv-endpoint=127.0.0.1:29400" in c for c in commands)
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in out.stdout
    assert "OMP_NUM_THREADS" not in out.stdout  # two workers a node: torchrun's own 1 applies
    assert not lab.run_dir.exists()
    # One worker a node, three nodes on this machine: they share its cores.
    single = lab("up", "--nodes", "3", "--nproc-per-node", "1", "--hosts", "loopback", "--dry-run")
    cores = max(1, (os.cpu_count() or 1) // 3)
    assert single.stdout.count(f"--env=OMP_NUM_THREADS={cores}") == 3, single.stdout


def test_a_taken_exporter_port_is_named_by_the_trainer():
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = subprocess.run(
            [sys.executable, script_path("trainer"), "--steps", "1", "--metrics-port-base", str(port)],
            capture_output=True,
            text=True,
            cwd=REPO,
        )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert f"port {port} is already in use" in out.stderr.strip().splitlines()[-1]


def test_lab_refuses_a_taken_exporter_port_before_starting(lab):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = lab("up", "--hosts", "loopback", "--prometheus", "off", "--metrics-port", str(port))
    assert_one_line_error(out, f":{port} is already in use", "--metrics-port")


def test_missing_prometheus_gives_a_one_line_install_hint(lab):
    env = {**lab.env(), "PATH": os.path.dirname(sys.executable)}
    out = subprocess.run(
        lab.cmd("up", "--hosts", "loopback", "--prometheus", "on"), env=env, capture_output=True, text=True, cwd=REPO
    )
    assert_one_line_error(out, "prometheus is not installed", "apt-get install prometheus")


def test_an_unknown_exercise_lists_the_valid_names(lab):
    out = lab("exercise", "run", "no-such-drill")
    assert_one_line_error(out, "no-such-drill", "kill-worker", "corrupt-checkpoint")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--target-rank", "4"], ["--target-rank", "[0, 4)", "4"]),
        (["--at-step", "500"], ["--at-step", "500"]),
    ],
)
def test_exercise_targets_outside_the_run_are_one_line_errors(lab, args, words):
    out = lab("exercise", "run", "kill-worker", *args)
    assert_one_line_error(out, *words)


def test_exercise_explain_names_the_command(lab):
    for name in ("kill-worker", "corrupt-checkpoint"):
        out = lab("exercise", "explain", name)
        assert out.returncode == 0 and f"lab exercise run {name}" in out.stdout


@pytest.mark.slow
@loopback_labs
def test_a_port_another_lab_holds_names_that_lab(tmp_path):
    """Loopback nodes of two labs cannot share a rendezvous port: the refusal names the other lab."""
    from conftest import SCRIPTS, Lab, wait_for_output

    first, second = Lab(run_dir=tmp_path / "a"), Lab(run_dir=tmp_path / "b")
    proc = first.popen(
        "run",
        "--hosts",
        "loopback",
        "--prometheus",
        "off",
        "--nodes",
        "1",
        "--nproc-per-node",
        "1",
        "--rdzv-port",
        "29488",
        str(SCRIPTS / "hold.py"),
    )
    try:
        assert wait_for_output(proc, " ready on ", count=1, timeout_s=120), "the first lab never came up"
        out = second("run", "--hosts", "loopback", "--rdzv-port", "29488", script_path("ddp_train"))
        assert_one_line_error(out, "29488", "--rdzv-port", str(tmp_path / "a"))
    finally:
        proc.kill()
        proc.stdout.close()
        first("down")


def test_a_topology_this_machine_cannot_hold_is_refused_before_anything_starts(lab):
    """240 nodes x 8 workers need hundreds of GiB (lab.runtimes.memory): refused with a size that fits."""
    for runtime in ("local", "docker"):
        out = lab("up", "--runtime", runtime, "--nodes", "240", "--nproc-per-node", "8", "--metrics-port", "0",
                  "--prometheus", "off")  # fmt: skip
        assert_one_line_error(out, "MiB available", "--nodes")
        assert not lab.run_dir.exists(), "nothing may be started"
