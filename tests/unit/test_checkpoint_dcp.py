"""A DCP step is a checkpoint only once committed whole (lab.workloads.checkpoint_dcp): the
manifest catches every way a folder of shards can be wrong, and the step before is used.
Files stand in for DCP's shards here: what is judged is the folder, not what DCP put in it
(tests/test_fsdp2.py saves and resumes real ones)."""

from __future__ import annotations

import json
import os

import pytest

from lab.workloads import checkpoint_dcp as dcp_files
from lab.workloads import checkpoint_files, sharded
from lab.workloads.checkpoint_files import CheckpointError, corrupt_newest
from lab.workloads.trainer_args import parse_args


def written(directory, step: int, shards: int = 2) -> None:
    """What every rank's DCP writes leave in the step's .tmp folder before rank 0 commits it."""
    tmp = directory / f".dcp_{step:08d}.tmp"
    tmp.mkdir(parents=True)
    (tmp / ".metadata").write_bytes(b"plan of step %d" % step)
    for rank in range(shards):
        (tmp / f"__{rank}_0.distcp").write_bytes(bytes([rank, step % 256]) * 1000)


def committed(directory, *steps: int):
    for step in steps:
        written(directory, step)
        dcp_files.commit(directory, step, {"world_size": 2})
    return directory


def test_a_committed_step_verifies_and_carries_its_meta(tmp_path):
    committed(tmp_path, 10, 20)
    assert [p.name for p in dcp_files.steps(tmp_path)] == ["dcp_00000020", "dcp_00000010"]
    dcp_files.verify(tmp_path / "dcp_00000020")
    assert json.loads((tmp_path / "dcp_00000020" / "meta.json").read_text()) == {"world_size": 2, "step": 20}
    assert not list(tmp_path.glob(".*.tmp"))


def test_only_the_newest_two_steps_are_kept_and_an_uncommitted_save_is_never_a_step(tmp_path):
    committed(tmp_path, 10, 20, 30)
    written(tmp_path, 40)  # a save that a kill interrupted: its .tmp folder stays
    assert [p.name for p in dcp_files.steps(tmp_path)] == ["dcp_00000030", "dcp_00000020"]
    assert dcp_files.newest_valid(tmp_path, lambda *_: None) == tmp_path / "dcp_00000030"


def truncate_a_shard(step):
    shard = step / "__1_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])


def drop_the_metadata(step):
    (step / ".metadata").unlink()


def mix_in_another_steps_shard(step):
    (step / "__1_0.distcp").write_bytes((step.parent / "dcp_00000020" / "__1_0.distcp").read_bytes())


def add_a_stray_file(step):
    (step / "__2_0.distcp").write_bytes(b"a third rank's, from another world size")


def lose_the_manifest(step):
    (step / "manifest.json").unlink()


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (truncate_a_shard, "__1_0.distcp differs from what was saved"),
        (drop_the_metadata, "missing .metadata"),
        (mix_in_another_steps_shard, "__1_0.distcp differs from what was saved"),
        (add_a_stray_file, "files it did not write: __2_0.distcp"),
        (lose_the_manifest, "no readable manifest.json"),
    ],
)
def test_a_damaged_step_is_named_set_aside_and_the_one_before_used(tmp_path, damage, words):
    committed(tmp_path, 20, 30)
    damage(tmp_path / "dcp_00000030")
    with pytest.raises(CheckpointError, match=words):
        dcp_files.verify(tmp_path / "dcp_00000030")
    seen = []
    assert (
        dcp_files.newest_valid(tmp_path, lambda path, why: seen.append((path.name, why))) == tmp_path / "dcp_00000020"
    )
    assert seen and seen[0][0] == "dcp_00000030" and words in seen[0][1]
    assert (tmp_path / "dcp_00000030.bad").is_dir() and not (tmp_path / "dcp_00000030").exists()


def test_a_manifest_that_is_not_a_whole_steps_is_refused(tmp_path):
    committed(tmp_path, 10)
    (tmp_path / "dcp_00000010" / "manifest.json").write_text(json.dumps({"meta.json": [1, "x"]}))
    with pytest.raises(CheckpointError, match="names no .metadata"):
        dcp_files.verify(tmp_path / "dcp_00000010")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--save", "async"], "--save async is DCP's and needs --parallel fsdp2"),
        (["--parallel", "fsdp2", "--ckpt-dir", "/tmp/x"], "add --ckpt-shared"),
        (["--parallel", "fsdp3"], "invalid choice: 'fsdp3'"),
    ],
)
def test_the_trainer_refuses_what_it_cannot_do_in_one_line(argv, words, capsys, monkeypatch):
    monkeypatch.delenv("LAB_CKPT_SHARED", raising=False)
    with pytest.raises(SystemExit) as exit_:
        parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert words in err[-1]


def test_fsdp2_refuses_in_process_recovery_and_ddp_keeps_it():
    """The rule the trainer applies to each attempt (an in-process one has a keeper's store)."""
    fsdp2 = parse_args(["--parallel", "fsdp2"])
    assert "cannot recover in-process" in sharded.refused(fsdp2, in_process=True)
    assert sharded.refused(fsdp2, in_process=False) == ""
    assert sharded.refused(parse_args([]), in_process=True) == ""


def test_the_drills_no_metadata_removes_the_newest_steps_and_its_check_then_fails(tmp_path):
    committed(tmp_path, 10, 20)
    assert corrupt_newest(tmp_path, "no-metadata") == tmp_path / "dcp_00000020" / ".metadata"
    with pytest.raises(CheckpointError, match=r"^missing \.metadata$"):
        dcp_files.verify(tmp_path / "dcp_00000020")
    dcp_files.verify(tmp_path / "dcp_00000010")  # the step before, untouched


def test_the_drills_mixed_steps_puts_the_step_befores_shard_in_the_newest(tmp_path):
    committed(tmp_path, 10, 20)
    before = (tmp_path / "dcp_00000010" / "__1_0.distcp").read_bytes()
    assert corrupt_newest(tmp_path, "mixed-steps") == tmp_path / "dcp_00000020" / "__1_0.distcp"
    assert (tmp_path / "dcp_00000020" / "__1_0.distcp").read_bytes() == before
    with pytest.raises(CheckpointError, match=r"^__1_0\.distcp differs from what was saved"):
        dcp_files.verify(tmp_path / "dcp_00000020")
    dcp_files.verify(tmp_path / "dcp_00000010")


def a_scripts_steps(folder, *names: str):
    """A script's DCP folders under names of its own, oldest first (by when .metadata was written)."""
    for age, name in enumerate(reversed(names)):
        step = folder / name
        step.mkdir(parents=True)
        (step / "__0_0.distcp").write_bytes(name.encode() * 10)
        (step / ".metadata").write_bytes(b"plan")
        os.utime(step / ".metadata", (1000 - age, 1000 - age))
    return folder


def test_on_a_scripts_folders_the_newest_written_step_is_damaged_whatever_its_name(tmp_path):
    ckpt = a_scripts_steps(tmp_path / "ckpt", "epoch_10", "epoch_9")  # epoch_9 written last: names order nothing
    assert corrupt_newest(ckpt, "mixed-steps") == ckpt / "epoch_9" / "__0_0.distcp"
    assert (ckpt / "epoch_9" / "__0_0.distcp").read_bytes() == b"epoch_10" * 10
    assert corrupt_newest(ckpt, "no-metadata") == ckpt / "epoch_9" / ".metadata"
    assert (ckpt / "epoch_10" / ".metadata").exists()


@pytest.mark.parametrize(
    ("steps", "how", "words"),
    [
        ((), "no-metadata", r"^no DCP step \(a folder with \.metadata\) in .* to damage$"),
        (("only",), "mixed-steps", r"^mixed-steps needs two DCP steps in .*; found only only$"),
    ],
)
def test_what_cannot_be_damaged_so_is_one_line(tmp_path, steps, how, words):
    ckpt = a_scripts_steps(tmp_path / "ckpt", *steps) if steps else tmp_path
    (tmp_path / "train.log").write_text("epoch 1\n")
    with pytest.raises(CheckpointError, match=words):
        corrupt_newest(ckpt, how)
    assert (tmp_path / "train.log").read_text() == "epoch 1\n"


def test_a_link_planted_as_metadata_or_as_a_shard_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    ckpt = a_scripts_steps(tmp_path / "ckpt", "planted", "whole")
    for name in (".metadata", "__0_0.distcp"):
        (ckpt / "planted" / name).unlink()
        (ckpt / "planted" / name).symlink_to(victim)
    os.utime(ckpt / "planted" / ".metadata", (2000, 2000), follow_symlinks=False)  # the newest, were it a file
    with pytest.raises(CheckpointError, match="found only whole"):  # a link is no .metadata: one step
        corrupt_newest(ckpt, "mixed-steps")
    assert corrupt_newest(ckpt, "no-metadata") == ckpt / "whole" / ".metadata"
    assert victim.read_bytes() == b"precious" and (ckpt / "planted" / ".metadata").is_symlink()


def test_mixed_steps_swaps_the_shard_that_holds_the_state_not_an_empty_one(tmp_path):
    """A tensor every rank holds alike is written once, by rank 0: the other ranks' files are small."""
    ckpt = a_scripts_steps(tmp_path / "ckpt", "step5", "step10")
    for step in ("step5", "step10"):
        (ckpt / step / "__1_0.distcp").write_bytes(b"")
    assert corrupt_newest(ckpt, "mixed-steps") == ckpt / "step10" / "__0_0.distcp"
    assert (ckpt / "step10" / "__0_0.distcp").read_bytes() == b"step5" * 10


def test_the_trainers_steps_go_by_their_number_not_by_when_a_file_was_written(tmp_path):
    committed(tmp_path, 10, 20)
    os.utime(tmp_path / "dcp_00000010" / ".metadata", (5e9, 5e9))  # the older step's touched last
    assert dcp_files.steps(tmp_path)[0].name == "dcp_00000020"
    assert corrupt_newest(tmp_path, "no-metadata") == tmp_path / "dcp_00000020" / ".metadata"


def test_truncate_cuts_a_shard_of_the_newest_committed_step_never_an_uncommitted_save(tmp_path):
    committed(tmp_path, 10, 20)
    written(tmp_path, 30)  # a save a kill interrupted: its .tmp folder is no step
    (tmp_path / "__7_0.distcp").write_bytes(b"x" * 4000)  # a shard outside any step folder
    assert corrupt_newest(tmp_path, "truncate") == tmp_path / "dcp_00000020" / "__1_0.distcp"
    assert (tmp_path / "dcp_00000020" / "__1_0.distcp").stat().st_size == 1000
    assert (tmp_path / ".dcp_00000030.tmp" / "__1_0.distcp").stat().st_size == 2000


def test_mixed_steps_leaves_the_shard_exactly_the_step_befores_even_an_empty_one(tmp_path):
    ckpt = a_scripts_steps(tmp_path / "ckpt", "before", "newest")
    (ckpt / "before" / "__0_0.distcp").write_bytes(b"")
    assert corrupt_newest(ckpt, "mixed-steps") == ckpt / "newest" / "__0_0.distcp"
    assert (ckpt / "newest" / "__0_0.distcp").read_bytes() == b""


def test_steps_with_no_shard_in_common_cannot_be_mixed(tmp_path):
    ckpt = a_scripts_steps(tmp_path / "ckpt", "before", "newest")
    (ckpt / "before" / "__0_0.distcp").rename(ckpt / "before" / "__5_0.distcp")
    with pytest.raises(CheckpointError, match=r"^newest and before share no shard file to mix$"):
        corrupt_newest(ckpt, "mixed-steps")


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        ("bogus", r"^unknown corruption mode 'bogus' \(truncate, flip, no-metadata, mixed-steps\)$"),
        ("metadata", r"^unknown corruption mode 'metadata'"),
    ],
)
def test_an_unknown_damage_is_named_with_the_ones_there_are(tmp_path, mode, words):
    committed(tmp_path, 10)
    with pytest.raises(ValueError, match=words):
        corrupt_newest(tmp_path, mode)
    with pytest.raises(ValueError, match=rf"^unknown DCP damage '{mode}' \(no-metadata or mixed-steps\)$"):
        checkpoint_files.damage_dcp(tmp_path, mode)


def test_every_named_damage_is_taken_and_an_empty_folder_has_nothing_to_damage(tmp_path):
    (tmp_path / "step_00000010.ckpt").write_bytes(bytes(range(200)))
    assert corrupt_newest(tmp_path, "flip") == tmp_path / "step_00000010.ckpt"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CheckpointError, match=rf"^no checkpoint in {empty} to corrupt$"):
        corrupt_newest(empty, "truncate")


def test_truncate_never_picks_a_step_set_aside_or_an_older_steps_higher_rank(tmp_path):
    """A step set aside as .bad after an earlier damage, and an older step saved by more ranks
    (the job shrank from 4 to 2): neither is the newest committed step."""
    written(tmp_path, 10, shards=4)
    dcp_files.commit(tmp_path, 10, {"world_size": 4})
    committed(tmp_path, 20)
    bad = tmp_path / "dcp_00000030.bad"
    bad.mkdir()
    (bad / "__1_0.distcp").write_bytes(b"b" * 3000)
    assert corrupt_newest(tmp_path, "truncate") == tmp_path / "dcp_00000020" / "__1_0.distcp"
    assert (tmp_path / "dcp_00000010" / "__3_0.distcp").stat().st_size == 2000
