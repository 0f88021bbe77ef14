"""With the run dir's disk full, a failed `lab run` still shows its card and says the disk is
full (issue 52, item 17): the card is printed before it is saved, and the save's failure is
one line. A real full filesystem: a 64 KiB tmpfs, filled."""

from __future__ import annotations

import subprocess

import pytest
from conftest import needs_netns

from lab.cli.why import save_or_say
from lab.rundir import RunDir
from lab.why import card as why

pytestmark = [pytest.mark.slow, needs_netns]  # root, to mount the tmpfs


@pytest.fixture
def full_disk(tmp_path):
    where = tmp_path / "full"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_disk_leaves_the_card_shown_and_says_why_it_was_not_saved(full_disk):
    run_dir = RunDir(full_disk / "run")
    run_dir.claim()
    (full_disk / "run" / "nodes" / "node0").mkdir(parents=True)
    card = why.card(run_dir.path)
    with open(full_disk / "filler", "wb") as f:
        try:
            f.write(b"x" * (1 << 20))
        except OSError:
            pass  # the disk is full now
    said = save_or_say(run_dir, card)
    assert said.startswith("not saved: No space left on device") and "the disk is full" in said
    assert card.text()  # the card itself is whole, for the caller to have printed
