"""What an agent records of every failed rank (lab.health.agent_exporter.every_failure), on the
agent's own objects as torchelastic holds them after a group failed. No process runs."""

from __future__ import annotations

import os
from types import SimpleNamespace

from torch.distributed.elastic.multiprocessing.errors.error_handler import ErrorHandler

from lab.health.agent_exporter import every_failure


def failed_group(error_files: dict[int, str]):
    """Two function workers (as the lab's preloaded ones run) that both exited 1; torch's
    result names neither (the lab reads their exits from the process context)."""
    workers = [SimpleNamespace(local_rank=r, id=100 + r, global_rank=r) for r in (0, 1)]
    processes = [SimpleNamespace(exitcode=1) for _ in workers]
    context = SimpleNamespace(_pc=SimpleNamespace(processes=processes), error_files=error_files)
    return SimpleNamespace(_pcontext=context), SimpleNamespace(workers=workers), SimpleNamespace(failures={})


def recorded_error_file(path) -> str:
    """An error file as torch's own error handler writes it for a worker that raised."""
    os.environ["TORCHELASTIC_ERROR_FILE"] = str(path)
    try:
        try:
            raise RuntimeError("Connection reset by peer")
        except RuntimeError as e:
            ErrorHandler().record_exception(e)
    finally:
        del os.environ["TORCHELASTIC_ERROR_FILE"]
    return str(path)


def test_a_rank_with_a_whole_error_file_is_recorded_with_its_error(tmp_path):
    agent, group, result = failed_group({0: recorded_error_file(tmp_path / "0.json"), 1: ""})
    failures = every_failure(agent, group, result)
    assert failures["0"]["error"] == "RuntimeError: Connection reset by peer" and "raise" in failures["0"]["traceback"]
    assert failures["1"] == {"local_rank": 1, "pid": 101, "exitcode": 1}


def test_an_empty_or_cut_error_file_is_recorded_without_an_error_not_raised(tmp_path):
    """A worker that died while writing its error file left it empty: torch's ProcessFailure raised
    on it inside the agent's monitor, and the agent died with it (seen in CI, k8s faithful run)."""
    empty, cut = tmp_path / "empty.json", tmp_path / "cut.json"
    empty.write_text("")
    cut.write_text(open(recorded_error_file(tmp_path / "whole.json")).read()[:40])
    agent, group, result = failed_group({0: str(empty), 1: str(cut)})
    failures = every_failure(agent, group, result)
    assert failures == {str(r): {"local_rank": r, "pid": 100 + r, "exitcode": 1} for r in (0, 1)}
