"""The progress-counting restart budget (lab.node.restart_budget) on event logs written by the
lab's own writer. The agent is a stand-in with torchelastic's two counters: Budget reads and
sets only `_remaining_restarts` and the spec's `max_restarts`, and the real agent is exercised
by the crash-loop drill (tests/fixtures/drills/crash-loop, tests/test_exercises.py)."""

from types import SimpleNamespace

from lab.health.events import Event, EventLog
from lab.node.restart_budget import CRASH_LOOP_EXIT, Budget, Progress


class Job:
    """Two ranks writing events, and torchelastic's loop around Budget.after_failure."""

    def __init__(self, tmp_path, budget: int):
        self.logs = [EventLog(tmp_path, rank=r, local_rank=r) for r in (0, 1)]
        self.spec = SimpleNamespace(max_restarts=budget)
        self.agent = SimpleNamespace(_remaining_restarts=budget)
        self.budget = Budget(budget, Progress(tmp_path))
        self.restarts = 0

    def steps(self, *steps: int) -> None:
        for step in steps:
            for log in self.logs:
                log.step(step, loss=1.0, seconds=0.1)

    def fail(self) -> bool:
        """One failed group, as SimpleElasticAgent._invoke_run handles it: True if it restarts."""
        self.budget.after_failure(self.agent, self.spec)
        if self.agent._remaining_restarts > 0:
            self.agent._remaining_restarts -= 1
            self.restarts += 1
            assert self.spec.max_restarts - self.agent._remaining_restarts == self.restarts  # torchrun's count
            return True
        return False


def test_a_job_that_crashes_at_every_start_stops_after_k_restarts(tmp_path):
    job = Job(tmp_path, budget=3)
    assert [job.fail() for _ in range(4)] == [True, True, True, False]
    assert job.restarts == 3 and job.budget.crash_loop
    assert (
        job.budget.verdict()
        == f"crash loop: no progress in 3 restarts (no step seen); stopped with exit {CRASH_LOOP_EXIT}"
    )


def test_a_job_that_makes_progress_between_faults_outlives_its_budget(tmp_path):
    job = Job(tmp_path, budget=2)
    for high in (10, 20, 30, 40, 50):  # five faults, each after a step never reached before
        job.steps(*range(high - 9, high + 1))
        assert job.fail()
    assert job.restarts == 5 and not job.budget.crash_loop


def test_redoing_steps_up_to_the_same_crash_is_no_progress(tmp_path):
    """Resumed from step 20, dies at 25 again, and again: the steps are new lines, not new ground."""
    job = Job(tmp_path, budget=2)
    job.steps(*range(1, 26))
    assert job.fail()  # the first fault came after real progress: restart 1
    outcomes = []
    for _ in range(2):  # restarts 1 and 2 each get back to step 25 and no further
        job.steps(*range(21, 26))
        outcomes.append(job.fail())
    assert outcomes == [True, False] and job.budget.crash_loop and job.restarts == 2
    assert "highest step 25" in job.budget.verdict()


def test_no_budget_is_a_plain_failure_not_a_crash_loop(tmp_path):
    """--max-restarts 0 (lab up's default) still means no restart, progress or not."""
    job = Job(tmp_path, budget=0)
    job.steps(1, 2, 3)
    assert job.fail() is False and not job.budget.crash_loop


def test_torn_foreign_and_growing_lines_are_read_once_and_safely(tmp_path):
    progress = Progress(tmp_path)
    path = tmp_path / "rank0.jsonl"
    path.write_text('{"event": "step", "step": 3}\nnot json\n{"event": "step", "step": "x"}\n[1]\n{"event": "st')
    assert progress.look() and progress.highest == 3
    with open(path, "a") as f:
        f.write('ep", "step": 9}\n')  # the torn line completes
    assert progress.look() and progress.highest == 9
    assert not progress.look()  # nothing new
    EventLog(tmp_path, rank=1, local_rank=1).write(Event.CHECKPOINT_SAVED, step=12, path="p", seconds=0.1)
    assert progress.look() and progress.highest == 12
