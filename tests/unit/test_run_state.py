"""The run dir's state.json: one schema for every runtime, read back typed by status, up and the
live view; what one runtime alone needs stays its own, beside the common keys."""

from __future__ import annotations

import json

from lab.health.events import Event
from lab.rundir import RunDir
from lab.runtimes import state as runstate
from lab.runtimes.state import RunState
from lab.topology import Topology


def test_a_state_is_read_back_as_it_was_written(tmp_path):
    run = RunDir(tmp_path / "run")
    written = RunState(
        "docker",
        "containers",
        Topology(nodes=3, nproc_per_node=1, torchrun_extra=("--tee=3",)),
        "/w/train.py",
        ["--epochs", "2"],
        nodes=[{"name": "node0", "index": 0, "address": "10.0.0.2", "container": "c0"}],
        prometheus="http://127.0.0.1:9090",
        own={"image": "torchrun-lab:cpu", "subnet": "10.0.0.0/24"},
    )
    runstate.save(run, written)
    on_disk = json.loads((run.path / "state.json").read_text())
    assert on_disk["subnet"] == "10.0.0.0/24" and on_disk["topology"]["nodes"] == 3  # flat, as before
    assert runstate.load(run) == written


def test_a_half_written_or_foreign_state_is_no_lab_to_show(tmp_path):
    run = RunDir(tmp_path / "run")
    run.write_state({"runtime": "local", "nodes": []})  # a lab that died before it recorded its job
    assert runstate.load(run) is None
    run.write_state({"runtime": "local", "hosts": "netns", "script": "x", "topology": {"nodes": 0}})
    assert runstate.load(run) is None  # a topology the lab could not have run


def test_status_of_a_lab_whose_cluster_is_gone_says_so_and_how_far_the_ranks_got(tmp_path, capsys):
    """A ray lab whose head no longer answers (nothing listens on its address): the nodes cannot
    be asked, so `lab status` says why in one line and reads the ranks' progress from the run dir."""
    from conftest import lab_in_process

    from lab.bench import free_port
    from lab.health.events import EventLog, ExitReason

    run = RunDir(tmp_path / "run")
    gone = f"127.0.0.1:{free_port()}"
    nodes = [{"name": f"node{i}", "index": i, "address": f"10.0.0.{i + 2}"} for i in range(2)]
    state = RunState("ray", "machines", Topology(nodes=2, nproc_per_node=1), "/w/train.py", nodes=nodes)
    state.own = {"ray_address": gone}
    runstate.save(run, state)
    for rank in (0, 1):
        log = EventLog(run.path / "events", rank=rank, local_rank=0)
        for step in (1, 2, 3):
            log.step(step, 1.0, 0.05)
    EventLog(run.path / "events", rank=0, local_rank=0).write(Event.EXIT, reason=ExitReason.COMPLETED, step=3)
    out = lab_in_process(capsys, "status", "--run-dir", str(run.path))
    assert out.returncode == 1, out
    assert f"the nodes cannot be asked: no Ray cluster answers at {gone}" in out.stdout
    assert "the ranks, from their events: rank 0 ended (completed, step 3); rank 1 at step 3, " in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
