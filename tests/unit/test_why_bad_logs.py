"""`lab why` on logs it cannot fully trust: torn, foreign, corrupt, or written by an older lab.
The card is drawn from what can be read, says what was left out, and never raises. The logs
are the recorded real run of tests/fixtures/why/raise (rank 1 raises), damaged here."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.why import card as why

RAISED = Path(__file__).resolve().parents[1] / "fixtures" / "why" / "raise"


def copy_of_the_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(RAISED, run)
    return run


def append(path: Path, *lines: str | bytes) -> None:
    with open(path, "ab") as f:
        for line in lines:
            f.write((line if isinstance(line, bytes) else line.encode()) + b"\n")


def test_foreign_torn_and_older_lines_are_left_out_and_named(tmp_path):
    run = copy_of_the_run(tmp_path)
    events = run / "events"
    append(
        events / "rank0.jsonl",
        b"\xff\xfe not text",
        "[1, 2, 3]",
        '{"time": "yesterday", "event": "step", "rank": 0}',  # an older lab's shape
        '{"time": 1.0, "event": "step", "rank": 0, "step": "five"}',
        '{"time": 2.0, "event": "st',  # torn
    )
    agent = next(events.glob("agent-*.jsonl"))
    append(agent, '{"time": 3.0, "node": "node0", "torchelastic": "not a dict"}', "null")
    card = why.card(run, kernel=lambda: "")
    assert card.first is not None and card.first.rank == 1 and card.first.how == "raised ValueError"
    note = next(n for n in card.notes if n.startswith("left out"))
    assert "rank0.jsonl: 5 lines" in note and f"{agent.name}: 2 lines" in note


def test_an_agents_failure_record_of_another_shape_is_passed_over(tmp_path):
    run = copy_of_the_run(tmp_path)
    agent = next((run / "events").glob("agent-*.jsonl"))
    odd = {"name": "lab.failure_detected", "failures": ["rank 1"], "exit_codes": [1]}
    append(agent, json.dumps({"time": 0.5, "node": "node0", "torchelastic": odd}))
    weird = {"name": "lab.failure_detected", "failures": {"x": {}, "3": {"exitcode": "nine", "pid": [1]}}}
    append(agent, json.dumps({"time": 0.6, "node": "node0", "torchelastic": weird}))
    card = why.card(run, kernel=lambda: "")
    assert card.first is not None and card.first.rank == 1, card.text()
    assert "rank 3" in card.text()  # reported, with nothing known of how
    assert card.text()  # renders


def test_empty_and_missing_logs_say_nothing_failed(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "rank0.jsonl").write_text("")
    assert why.card(tmp_path, kernel=lambda: "").text() == "no rank failed: the agents recorded no failure\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    garbage=st.lists(
        st.one_of(
            st.text(),
            st.binary(),
            st.builds(
                json.dumps,
                st.dictionaries(
                    st.sampled_from(
                        ["time", "event", "rank", "step", "node", "torchelastic", "failures", "error", "where"]
                    ),
                    st.one_of(st.none(), st.integers(), st.floats(allow_nan=False), st.text(), st.lists(st.integers())),
                ),
            ),
        ),
        max_size=6,
    )
)
def test_no_garbage_line_makes_the_card_raise_or_lose_the_first_failure(tmp_path, garbage):
    run = tmp_path / "run"
    shutil.rmtree(run, ignore_errors=True)
    shutil.copytree(RAISED, run)
    lines = [g.replace(b"\n", b" ") if isinstance(g, bytes) else g.replace("\n", " ") for g in garbage]
    for path in sorted((run / "events").glob("*.jsonl")):
        append(path, *lines)
    card = why.card(run, kernel=lambda: "")
    assert card.first is not None and card.first.rank == 1
    assert card.text().startswith("first failure: rank 1")


def test_a_damaged_saved_card_is_one_line_not_a_traceback(tmp_path, capsys):
    from conftest import lab_in_process

    from lab.rundir import RunDir

    run = RunDir(tmp_path / "run")
    reports = run.reports_dir()
    run.release()
    for body in ("{not json", '{"first": null}', "[1]"):
        (reports / "why-20260101-000000.json").write_text(body)
        out = lab_in_process(capsys, "why", "--run-dir", str(run.path))
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.count("\n") == 1 and "the saved card" in out.stderr and "Traceback" not in out.stderr
