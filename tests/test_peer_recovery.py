"""Checkpoints with no shared storage: each node keeps its own copy, and a node that comes back
empty (a replaced pod, a wiped disk) receives the newest one from a peer and resumes bit-identical.

Two real nodes on loopback, each run as every runtime runs a node (`python -m lab.node.launch`
around torchrun, from Topology.launch_argv), each with a checkpoint directory of its own.
"""

import os
import shutil
import subprocess

import pytest
from conftest import loopback_labs

from lab import results
from lab.bench import free_port
from lab.health.events import read_events
from lab.topology import Topology
from lab.workloads import checkpoint, script_path

TRAINER = script_path("trainer")


def run_job(tmp_path, steps: int, events: str, ckpt: str = "ckpt", shared: bool = False) -> str:
    """Both nodes at once; returns their combined output. Node i keeps tmp_path/ckpt/node<i>."""
    topology = Topology(nodes=2, nproc_per_node=2, rdzv_port=free_port(), agent_metrics_port=0, rank_metrics_port=0)
    procs = []
    for i in range(2):
        env = {
            "LAB_CKPT_DIR": str(tmp_path / ckpt / ("all" if shared else f"node{i}")),
            "LAB_EVENTS_DIR": str(tmp_path / events),
            **({"LAB_CKPT_SHARED": "1"} if shared else {}),
        }
        args = ["--steps", str(steps), "--ckpt-every", "10"]
        argv = topology.launch_argv(i, TRAINER, args, log_dir=str(tmp_path / f"logs-{i}"), extra_env=env)
        procs.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                # TMPDIR: torchelastic's and multiprocessing's files stay in the test's own dir
                env={**os.environ, "TORCHRUN_LAB_NODE": f"node{i}", "TMPDIR": str(tmp_path)},
                start_new_session=True,
            )
        )
    outputs = []
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, 9)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-1500:] for o in outputs)
    return "".join(outputs)


def checksums(output: str) -> set[str]:
    return {r.exact for r in results.parse(output, node="")}


@pytest.mark.slow
@loopback_labs
@pytest.mark.parametrize("emptied", [1, 0], ids=["node1-comes-back-empty", "node0-the-store-host-comes-back-empty"])
def test_a_node_that_comes_back_empty_resumes_from_a_peer_bit_identical(tmp_path, emptied):
    reference = run_job(tmp_path, 30, "events-reference", ckpt="reference-ckpt")
    run_job(tmp_path, 20, "events-first")
    saved = [e for e in read_events(tmp_path / "events-first") if e["event"] == "checkpoint_saved"]
    assert {(e["node"], e["local_rank"]) for e in saved} == {("node0", 0), ("node1", 0)}, "each node writes its own"
    for i in range(2):
        assert [p.name for p in checkpoint.checkpoints(tmp_path / "ckpt" / f"node{i}")][0] == "step_00000020.ckpt"
    shutil.rmtree(tmp_path / "ckpt" / f"node{emptied}")

    resumed = run_job(tmp_path, 30, "events-resumed")
    events = list(read_events(tmp_path / "events-resumed"))
    received = [e for e in events if e["event"] == "checkpoint_received"]
    assert len(received) == 1 and received[0]["node"] == f"node{emptied}" and received[0]["step"] == 20
    source = received[0]["source_rank"]
    assert next(e["node"] for e in events if e["event"] == "start" and e["rank"] == source) != f"node{emptied}"
    loaded = [e for e in events if e["event"] == "checkpoint_loaded"]
    assert sorted(e["rank"] for e in loaded) == [0, 1, 2, 3] and {e["step"] for e in loaded} == {20}
    assert "step_00000020.ckpt" in [p.name for p in checkpoint.checkpoints(tmp_path / "ckpt" / f"node{emptied}")]
    assert checksums(resumed) == checksums(reference) and len(checksums(reference)) == 1


@pytest.mark.slow
@loopback_labs
def test_with_a_shared_directory_only_rank_0_writes_and_every_rank_resumes(tmp_path):
    """The shared-storage option (k8s/overlays/shared-checkpoints, and the local, docker and ray
    runtimes, whose nodes share the run dir): one writer, no copy received."""
    reference = run_job(tmp_path, 30, "events-reference", ckpt="reference-ckpt", shared=True)
    run_job(tmp_path, 20, "events-first", shared=True)
    saved = [e for e in read_events(tmp_path / "events-first") if e["event"] == "checkpoint_saved"]
    assert {e["rank"] for e in saved} == {0} and sorted(e["step"] for e in saved) == [10, 20]
    resumed = run_job(tmp_path, 30, "events-resumed", shared=True)
    events = list(read_events(tmp_path / "events-resumed"))
    assert not [e for e in events if e["event"] == "checkpoint_received"]
    assert {e["step"] for e in events if e["event"] == "checkpoint_loaded"} == {20}
    assert checksums(resumed) == checksums(reference)
