"""A drill's command line read into its options and its job: the size and restart budget a
user chooses apply to the lab's trainer as to a script; what a fault cannot do is refused."""

from __future__ import annotations

import pytest

from lab import exercises
from lab.cli import build_parser
from lab.errors import LabError


def job(*argv: str):
    args = build_parser().parse_args(["exercise", "run", *argv])
    options = exercises.options_from_args(args.exercise, args)
    return options, exercises.topology(args.exercise, options)


def test_a_drill_on_the_trainer_runs_at_the_size_asked_for():
    options, topology = job("kill-worker", "--nodes", "3", "--nproc-per-node", "1", "--max-restarts", "4")
    assert (topology.nodes, topology.nproc_per_node, topology.world_size, topology.max_restarts) == (3, 1, 3, 4)
    assert options.target_rank == 1  # the drill's default rank, which this job has


def test_without_flags_the_drill_keeps_its_own_job():
    _, topology = job("kill-node", "--elastic")
    assert (topology.nodes, topology.nproc_per_node, topology.min_nodes, topology.max_restarts) == (2, 2, 1, 2)


def test_the_default_rank_moves_to_the_last_one_a_smaller_job_has():
    options, topology = job("kill-worker", "--nodes", "1", "--nproc-per-node", "1")
    assert topology.world_size == 1 and options.target_rank == 0 and not options.target_rank_chosen


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["kill-node", "--nodes", "1"], ["kill-node needs at least 2 nodes", "--nodes 1"]),
        (["partition-node", "--nodes", "1"], ["partition-node needs at least 2 nodes"]),
        (["kill-worker", "--nodes", "2", "--nproc-per-node", "1", "--target-rank", "2"], ["[0, 2)", "got 2"]),
        (["kill-worker", "--at-step", "60"], ["--at-step", "[1, 60)"]),
        (["corrupt-checkpoint", "--damage", "no-metadata"], ["--damage no-metadata damages a DCP step", "fsdp2"]),
        (["corrupt-checkpoint", "--damage", "mixed-steps"], ["--damage mixed-steps", "--damage truncate"]),
        (["kill-node", "--rejoin"], ["--rejoin is an elastic job's: add --elastic"]),
        (["kill-worker", "--save", "async"], ["--save async is how DCP saves", "add --parallel fsdp2"]),
        (
            ["kill-worker", "--parallel", "fsdp2", "--save", "async", "--at-step", "10"],
            ["first save begins at step 10", "--at-step 11 or later"],
        ),
    ],
)
def test_what_the_job_cannot_do_is_one_line(argv, words):
    with pytest.raises(LabError) as refused:
        job(*argv)
    assert all(word in str(refused.value) for word in words), refused.value


@pytest.mark.parametrize("damage", ["truncate", "no-metadata", "mixed-steps"])
def test_every_damage_runs_on_the_sharded_trainer_and_is_the_drills_own_option(damage):
    options, topology = job("corrupt-checkpoint", "--parallel", "fsdp2", "--damage", damage)
    assert options.own == {"damage": damage} and topology.parallel == "fsdp2"


def test_a_kill_during_an_async_save_runs_the_sharded_trainer_saving_asynchronously():
    from lab.exercises import kill_worker

    options, topology = job("kill-worker", "--parallel", "fsdp2", "--save", "async", "--at-step", "11")
    assert options.own == {"save": "async"} and topology.parallel == "fsdp2"
    assert " --save async" in " " + " ".join(kill_worker.trainer_args(options))
    sync, _ = job("kill-worker", "--parallel", "fsdp2")
    assert "--save" not in kill_worker.trainer_args(sync)  # the trainer's own default: sync


def test_every_drill_runs_on_a_script_or_says_why_not():
    for name, drill in exercises.drills().items():
        has_script_side = hasattr(drill, "break_script") and hasattr(drill, "SCRIPT_RECOVERY")
        assert has_script_side != bool(getattr(drill, "NO_SCRIPT", "")), name


def test_a_script_runs_in_the_users_folder_with_workdir_else_in_a_fresh_one(tmp_path):
    from pathlib import Path

    from lab.exercises.script import spec
    from lab.exercises.script.script_run import ScriptRun
    from lab.topology import Topology

    script = Path(__file__).resolve().parents[1] / "user_scripts" / "snapshot_every_epoch.py"
    args = build_parser().parse_args(
        ["exercise", "run", "kill-worker", "--script", str(script), "--workdir", str(tmp_path)]
    )
    given = spec.spec_from_args(args)
    assert given.workdir == str(tmp_path.resolve())
    run = ScriptRun(given, None, Topology(), workdir=Path(given.workdir), keep_dir=tmp_path / "keep")
    wrapper = run.topology(None).script_wrapper
    assert wrapper[wrapper.index("--workdir") + 1] == str(tmp_path.resolve())


def test_ranks_that_share_the_machine_share_its_cores():
    """torchrun sets OMP_NUM_THREADS=1 only for several workers a node: the lab does it for
    one-worker nodes on one machine (lab.node.launch keeps a value the user set)."""
    from lab.runtimes.memory import threads_per_rank
    from lab.topology import Topology

    assert threads_per_rank(Topology(nodes=2, nproc_per_node=1), cpus=2) == {"OMP_NUM_THREADS": "1"}
    assert threads_per_rank(Topology(nodes=2, nproc_per_node=1), cpus=8) == {"OMP_NUM_THREADS": "4"}
    assert threads_per_rank(Topology(nodes=3, nproc_per_node=1), cpus=2) == {"OMP_NUM_THREADS": "1"}
    assert threads_per_rank(Topology(nodes=2, nproc_per_node=2), cpus=2) == {}  # torchrun's own 1
