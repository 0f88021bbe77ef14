"""The remembered reference checksums: one entry per identical job, never a file it did not write."""

from __future__ import annotations

import json
import os

import pytest

from lab.exercises import reference_cache
from lab.topology import Topology

ARGS = ["--steps", "60", "--ckpt-every", "10", "--step-time", "0"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_a_remembered_reference_is_recalled_for_the_same_job_only():
    key = reference_cache.job_key(Topology(nodes=2, nproc_per_node=2), "trainer", ARGS)
    assert reference_cache.recall(key) is None
    reference_cache.remember(key, {"0x1.8p+1"})
    assert reference_cache.recall(key) == {"0x1.8p+1"}
    others = [
        reference_cache.job_key(Topology(nodes=1, nproc_per_node=4), "trainer", ARGS),
        reference_cache.job_key(Topology(nodes=2, nproc_per_node=2), "trainer", [*ARGS, "--seed", "1"]),
        reference_cache.job_key(Topology(nodes=2, nproc_per_node=2), "other", ARGS),
    ]
    assert len({key, *others}) == 4
    assert all(reference_cache.recall(k) is None for k in others)
    assert oct(os.stat(reference_cache.cache_dir()).st_mode & 0o777) == "0o700"


def test_ranks_that_disagree_are_not_a_reference_to_keep():
    reference_cache.remember("k", {"0x1p+0", "0x1.8p+0"})
    assert reference_cache.recall("k") is None


def test_a_change_to_the_labs_source_is_a_new_job(monkeypatch, tmp_path):
    topology = Topology(nodes=2, nproc_per_node=2)
    before = reference_cache.job_key(topology, "trainer", ARGS)
    monkeypatch.setattr(reference_cache, "lab_source_digest", lambda: "something else")
    assert reference_cache.job_key(topology, "trainer", ARGS) != before


@pytest.mark.parametrize(
    "plant",
    [
        "link",
        "not json",
        "two checksums",
        "a list",
        "too big",
        "someone else's",
    ],
)
def test_an_entry_the_lab_did_not_write_is_ignored(plant, tmp_path):
    folder = reference_cache.cache_dir()
    folder.mkdir(parents=True)
    entry = folder / "k.json"
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"checksums": ["0x1p+0"]}))
    if plant == "link":
        entry.symlink_to(elsewhere)
    elif plant == "not json":
        entry.write_text("{")
    elif plant == "two checksums":
        entry.write_text(json.dumps({"checksums": ["0x1p+0", "0x1p+1"]}))
    elif plant == "a list":
        entry.write_text(json.dumps(["0x1p+0"]))
    elif plant == "too big":
        entry.write_text(json.dumps({"checksums": ["0x1p+0"], "pad": "x" * 5000}))
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a file to another user")
        entry.write_text(json.dumps({"checksums": ["0x1p+0"]}))
        os.chown(entry, 65534, 65534)
    assert reference_cache.recall("k") is None
