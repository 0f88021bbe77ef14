"""Every flag that names where the lab writes is found from the CLI's own parser, and each one
refuses a link, an empty value and a folder another user can change, in one line, before
anything runs or is written (issue 52: output paths). A new output flag fails the first test
until it is covered here."""

from __future__ import annotations

import argparse
import os

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.cli import build_parser

OUTPUT_DESTS = {"report_dir", "junit", "summary", "output", "out"}
# Each output flag, as a command that would otherwise run: the flag's value is appended.
COVERED = {
    ("exercise run kill-worker", "--report-dir"): ["exercise", "run", "kill-worker"],
    ("exercise matrix", "--report-dir"): ["exercise", "matrix", "--script", "train.py", "--faults", "kill-worker"],
    ("ci", "--report-dir"): ["ci", "--script", "train.py"],
    ("ci", "--junit"): ["ci", "--script", "train.py"],
    ("ci", "--summary"): ["ci", "--script", "train.py"],
    ("chaos", "--report-dir"): ["chaos", "--count", "3"],
    ("bench docs", "--output"): ["bench", "docs"],
    ("bench goodput", "--out"): ["bench", "goodput"],
}

READS = {("bench docs", "--out")}  # where saved results are read from: nothing is written there


def output_flags() -> set[tuple[str, str]]:
    """(command, flag) for every option whose destination is an output path, in every verb."""
    found: set[tuple[str, str]] = set()

    def walk(parser: argparse.ArgumentParser, words: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*words, name])
            elif action.dest in OUTPUT_DESTS and action.option_strings:
                found.add((" ".join(words), action.option_strings[0]))

    walk(build_parser(), [])
    return found


def test_every_output_flag_is_covered():
    found = output_flags()
    drills_and_benches = {(c, f) for c, f in found if c.startswith(("exercise run ", "bench ")) and c not in
                          {"exercise run kill-worker", "bench docs", "bench goodput"}}  # fmt: skip
    assert found - drills_and_benches - READS == set(COVERED), "cover the new output flag here"
    # The other drills and benches share the two covered ones' code paths (report_dir(), handle()).
    assert all(f in ("--report-dir", "--out") for _, f in drills_and_benches)


@pytest.fixture
def places(tmp_path):
    (tmp_path / "train.py").write_text("print('never run')\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(elsewhere)
    (tmp_path / "linkfile").symlink_to(elsewhere / "victim")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    return tmp_path


@pytest.mark.parametrize(("key", "argv"), COVERED.items(), ids=[" ".join(k) for k in COVERED])
@pytest.mark.parametrize("bad", ["link", "shared", "empty"])
def test_an_unsafe_output_path_is_refused_before_anything(places, capsys, monkeypatch, key, argv, bad):
    monkeypatch.chdir(places)
    _, flag = key
    is_dir = flag in ("--report-dir", "--out")
    value = {
        "link": str(places / ("link" if is_dir else "linkfile")),
        "shared": str(places / "shared" / ("out" if is_dir else "out.xml")),
        "empty": "",
    }[bad]
    words = {"link": "is a link", "shared": "which other users can change", "empty": "is empty"}[bad]
    run_dir = [] if argv[0] == "bench" else ["--run-dir", str(places / "run")]  # benches keep no run dir
    out = lab_in_process(capsys, *argv, flag, value, *run_dir)
    assert_one_line_error(out, flag, words)
    assert not (places / "run").exists() and os.listdir(places / "elsewhere") == []
    assert os.listdir(places / "shared") == []
