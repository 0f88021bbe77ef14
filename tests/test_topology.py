"""Topology renders torchrun's flags from one spec and rejects bad values by field name."""

import dataclasses

import pytest

from lab.node.launch import split_lab_flags
from lab.topology import Topology, TopologyError


def test_c10d_names_node_zero_as_store_host_and_no_one_else():
    t = Topology(nodes=3, nproc_per_node=2, rdzv_host="node0", rdzv_port=29411)
    for rank in range(3):
        args = t.torchrun_args(rank)
        assert "--nnodes=3" in args and "--nproc-per-node=2" in args
        assert "--rdzv-endpoint=node0:29411" in args
        conf = next(a for a in args if a.startswith("--rdzv-conf="))
        assert f"is_host={1 if rank == 0 else 0}" in conf
        assert not any(a.startswith("--node-rank") for a in args)


def test_static_rendezvous_uses_master_addr_and_node_rank():
    args = Topology(rdzv_backend="static", rdzv_host="10.0.0.5").torchrun_args(1)
    assert "--node-rank=1" in args and "--master-addr=10.0.0.5" in args
    assert not any(a.startswith("--rdzv-") for a in args)


def test_elastic_job_renders_min_max_nodes():
    assert "--nnodes=1:4" in Topology(nodes=4, min_nodes=1).torchrun_args(0)


def test_launch_argv_puts_lab_flags_first_so_lab_launch_can_strip_them():
    t = Topology(pg_timeout_s=7, torch_defaults=True)
    argv = t.launch_argv(0, "/x/train.py", ["--lr", "1"], python="py")
    assert argv[:3] == ["py", "-m", "lab.node.launch"]
    flags, rest = split_lab_flags(argv[3:])
    assert flags.env == {
        "LAB_BACKEND": "gloo",
        "LAB_PG_TIMEOUT_S": "7",
        "LAB_AGENT_METRICS_PORT": "9400",
        "LAB_METRICS_PORT_BASE": "9500",
    }
    assert flags.torch_defaults is True
    assert flags.preload_workers is False  # torch's defaults: torchrun's own worker start
    assert rest == [*t.torchrun_args(0), "/x/train.py", "--lr", "1"]


def test_workers_are_preloaded_by_default_through_torchruns_own_flags():
    t = Topology()
    flags, rest = split_lab_flags(t.launch_argv(0, "/x/train.py", python="py")[3:])
    assert flags.preload_workers is True
    assert "--run-path" in rest and "--start-method=forkserver" in rest
    assert "--run-path" not in Topology(worker_start="spawn").torchrun_args(0)


def test_a_watched_script_is_preloaded_too_and_spawned_as_a_module_otherwise():
    wrapper = ("--workdir", "/w", "--")
    preloaded = Topology(script_wrapper=wrapper).launch_argv(0, "/x/train.py", ["--lr", "1"], python="py")
    flags, rest = split_lab_flags(preloaded[3:])
    # torchrun's --run-path target is the watcher, which lab.node.preload runs as a module
    assert flags.preload_workers and "--run-path" in rest and "--module" not in rest
    assert rest[-7:] == ["lab.node.user_script", *wrapper, "/x/train.py", "--lr", "1"]
    for spawned in (
        Topology(script_wrapper=wrapper, worker_start="spawn"),
        Topology(script_wrapper=wrapper, torch_defaults=True),
    ):
        rest = split_lab_flags(spawned.launch_argv(0, "/x/train.py", python="py")[3:])[1]
        assert "--run-path" not in rest and rest[-6:] == ["--module", "lab.node.user_script", *wrapper, "/x/train.py"]


@pytest.mark.parametrize(
    "field, value",
    [
        ("worker_start", "fork"),
        ("nodes", 0),
        ("nproc_per_node", -1),
        ("backend", "mpi"),
        ("rdzv_backend", "zk"),
        ("rdzv_port", 70000),
        ("max_restarts", -1),
        ("pg_timeout_s", 0),
        ("min_nodes", 5),
        ("parallel", "fsdp3"),
    ],
)
def test_bad_values_are_rejected_naming_the_field(field, value):
    with pytest.raises(TopologyError, match=field):
        Topology(**{field: value})


def test_a_sharded_job_is_no_in_process_job():
    """fsdp2 ranks hold only their shards: no peer can hand a replacement the whole model."""
    with pytest.raises(TopologyError, match="unsharded"):
        Topology(in_process=True, parallel="fsdp2")
    assert Topology(parallel="fsdp2").env(0)["LAB_PARALLEL"] == "fsdp2" and "LAB_PARALLEL" not in Topology().env(0)


def test_topology_is_frozen_and_keyword_only():
    t = Topology()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.nodes = 3
    with pytest.raises(TypeError):
        Topology(2, 2)


def test_node_rank_outside_the_job_is_rejected():
    with pytest.raises(TopologyError, match="node_rank"):
        Topology(nodes=2).torchrun_args(2)


def test_exporter_ports_are_per_node_and_per_rank():
    t = Topology(nodes=3, nproc_per_node=4, agent_metrics_port=9000, rank_metrics_port=9100)
    assert [t.env(i)["LAB_AGENT_METRICS_PORT"] for i in range(3)] == ["9000", "9001", "9002"]
    assert Topology(agent_metrics_port=0, rank_metrics_port=0).env(0).keys() == {"LAB_BACKEND", "LAB_PG_TIMEOUT_S"}


def test_overlapping_port_ranges_are_rejected_naming_both_fields():
    with pytest.raises(TopologyError, match="agent_metrics_port .* overlaps rank_metrics_port"):
        Topology(nodes=2, nproc_per_node=8, agent_metrics_port=9500, rank_metrics_port=9501)
    with pytest.raises(TopologyError, match="rdzv_port .* overlaps rank_metrics_port"):
        Topology(rdzv_port=9502)
