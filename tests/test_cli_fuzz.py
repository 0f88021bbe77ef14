"""Generated bad input (hypothesis) thrown at the CLI's parser and at Topology.

The CLI runs in this process with a private run dir, on verbs that start nothing (`up` and
`run` with --dry-run, `down`, `status`, `exercise list/explain`, and `exercise run` with
values it must refuse before starting). Whatever the arguments: never a traceback, and an
invalid value never exits 0."""

from __future__ import annotations

import contextlib
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.cli import main
from lab.errors import LabError
from lab.topology import Topology

FLAGS = [
    "--nodes",
    "--nproc-per-node",
    "--backend",
    "--rdzv-backend",
    "--rdzv-port",
    "--max-restarts",
    "--pg-timeout",
    "--metrics-port",
    "--prometheus-port",
    "--runtime",
    "--hosts",
    "--prometheus",
    "--worker-start",
    "--workload",
    "--image",
    "--namespace",
    "--overlay",
    "--torch-defaults",
    "--",
    "-x",
]
WORDS = [
    "gloo",
    "nccl",
    "c10d",
    "static",
    "etcd-v2",
    "local",
    "docker",
    "ray",
    "loopback",
    "netns",
    "on",
    "off",
    "auto",
    "preload",
    "spawn",
    "trainer",
    "ddp_train",
    "",
    " ",
    "\x00",
    "é",
    "../..",
    "-1",
    "0",
    "1",
    "2",
    "65535",
    "65536",
    "70000",
    "1e3",
    "2.5",
    "nan",
    "-0",
    "99999999999999999999",
]
token = st.one_of(
    st.sampled_from(FLAGS), st.sampled_from(WORDS), st.integers(-(10**6), 10**6).map(str), st.text(max_size=8)
)
INT_OPTIONS = {  # option -> values that are invalid for it
    "--nodes": ["0", "-1", "x", "1.5", ""],
    "--nproc-per-node": ["0", "-3", "two", "1e2"],
    "--rdzv-port": ["0", "-1", "65536", "70000", "port", "99999999999999999999"],
    "--prometheus-port": ["0", "65536", "70000", "-9090", "nine"],
    "--metrics-port": ["-1", "65536", "65500", "x"],  # 65500: its rank ports would run past 65535
    "--max-restarts": ["-1", "many"],
    "--pg-timeout": ["0", "-5", "soon"],
}


def run_cli(argv: list[str], run_dir) -> tuple[int, str]:
    """main(argv) in this process: (exit code, stderr). A traceback fails the test by propagating."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = main([*argv[:1], *argv[1:]])
        except SystemExit as e:  # argparse's usage errors and --help
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    return code, err.getvalue()


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("LAB_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("LAB_DOCKER_SUBNET", "172.29.87.0/24")  # a dry run need not ask a daemon
    return tmp_path / "run"


SAFE_VERBS = [
    ["up", "--dry-run", "--hosts", "loopback"],
    ["run", "--dry-run", "--hosts", "loopback"],
    ["down"],
    ["status"],
    ["exercise", "list"],
    ["exercise", "explain"],
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(SAFE_VERBS), args=st.lists(token, max_size=8))
def test_generated_arguments_never_raise_a_traceback(run_dir, verb, args):
    if verb[0] == "run":
        args = [*args[:4], "lab/workloads/ddp_train.py", *args[4:]] if len(args) % 2 else args
    code, err = run_cli([*verb, *args], run_dir)
    assert isinstance(code, int)
    assert "Traceback" not in err
    if code != 0:
        assert len(err.strip().splitlines()) <= 1, err


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    option=st.sampled_from(sorted(INT_OPTIONS)),
    data=st.data(),
    verb=st.sampled_from([["up", "--dry-run", "--hosts", "loopback"], ["run", "--dry-run", "--hosts", "loopback"]]),
)
def test_an_invalid_number_never_exits_zero(run_dir, option, data, verb):
    value = data.draw(st.sampled_from(INT_OPTIONS[option]))
    argv = [*verb, f"{option}={value}"] + (["lab/workloads/ddp_train.py"] if verb[0] == "run" else [])
    code, err = run_cli(argv, run_dir)
    assert code != 0, f"{argv} was accepted"
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not run_dir.exists(), "nothing may be made on bad input"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(["kill-worker", "kill-node", "hang-rank", "preempt"]),
    flag=st.sampled_from(["--target-rank", "--at-step"]),
    value=st.one_of(st.integers(-1000, -1), st.integers(10**4, 10**9)),
)
def test_an_exercise_refuses_ranks_and_steps_out_of_range_before_starting(run_dir, name, flag, value):
    """Only values no drill accepts (negative; past every world size and step count): a valid
    one would start a real drill."""
    code, err = run_cli(["exercise", "run", name, flag, str(value)], run_dir)
    assert code != 0 and flag in err and "Traceback" not in err, err
    assert not run_dir.exists()


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(-3, 300),
    nproc=st.integers(-3, 64),
    rdzv_port=st.integers(-10, 70000),
    agent=st.integers(-10, 70000),
    rank=st.integers(-10, 70000),
    min_nodes=st.one_of(st.none(), st.integers(-2, 10)),
    backend=st.sampled_from(["gloo", "nccl", "mpi", ""]),
    monitor=st.floats(allow_nan=True),
    restarts=st.integers(-5, 5),
)
def test_topology_either_builds_and_renders_or_says_which_field(
    nodes, nproc, rdzv_port, agent, rank, min_nodes, backend, monitor, restarts
):
    try:
        topology = Topology(
            nodes=nodes,
            nproc_per_node=nproc,
            rdzv_port=rdzv_port,
            agent_metrics_port=agent,
            rank_metrics_port=rank,
            min_nodes=min_nodes,
            backend=backend,
            monitor_interval_s=monitor,
            max_restarts=restarts,
        )
    except LabError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert 1 <= topology.rdzv_port <= 65535 and topology.nodes >= 1 and topology.nproc_per_node >= 1
    for node in range(min(topology.nodes, 3)):
        argv = topology.launch_argv(node, "train.py")
        assert argv[-1] == "train.py" and f"--nproc-per-node={nproc}" in argv
