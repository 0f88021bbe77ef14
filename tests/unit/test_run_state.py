"""The run dir's state.json: one schema for every runtime, read back typed by status, up and the
live view; what one runtime alone needs stays its own, beside the common keys."""

from __future__ import annotations

import json

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
