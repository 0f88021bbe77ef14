"""The drills' timeline plot (lab.report.timeline), drawn for real with matplotlib's Agg backend."""

from __future__ import annotations

import warnings

from lab.report import timeline

PNG = b"\x89PNG\r\n\x1a\n"


def test_a_run_with_nothing_to_label_is_drawn_without_a_warning(tmp_path):
    """A reference that printed no step: no legend to draw, and no matplotlib warning on the
    drill's output (it printed "No artists with labels found to put in legend")."""
    events = [{"event": "started", "time": 10.0, "rank": 0, "restart": 0}]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        timeline(events, [], tmp_path / "t.png", "reference")
    assert (tmp_path / "t.png").read_bytes().startswith(PNG)


def test_steps_faults_and_restarts_are_drawn_with_their_legend(tmp_path):
    events = [
        {"event": "step", "time": 10.0 + i, "rank": r, "step": i, "restart": 0 if i < 3 else 1}
        for r in (0, 1)
        for i in range(5)
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        timeline(events, [{"fault": "kill_worker", "node": "node0", "time": 12.5}], tmp_path / "t.png", "kill")
    assert (tmp_path / "t.png").read_bytes().startswith(PNG)
