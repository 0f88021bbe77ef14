"""lab.chaos.divergence on recorded step events: which step's loss left the reference's, and
which fault struck before it."""

from __future__ import annotations

import json

from lab.chaos import divergence
from lab.chaos.campaign import Blow
from lab.chaos.progress import Progress


def losses(tmp_path, name: str, runs: dict[int, list[tuple[float, int, float]]]) -> Progress:
    """rank -> [(time, step, loss)], written as the trainer writes its step events."""
    events = tmp_path / name
    events.mkdir()
    for rank, steps in runs.items():
        lines = [{"time": t, "event": "step", "rank": rank, "step": s, "loss": loss} for t, s, loss in steps]
        (events / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return Progress(events).polled()


def reference(tmp_path) -> Progress:
    return losses(tmp_path, "reference", {r: [(float(s), s, 1.0 / (s + r)) for s in range(1, 21)] for r in (0, 1)})


KILL = Blow("kill-worker", 1.0, ranks=[1], time=105.5, front=5, bound_s=70)
REGROUP = Blow("kill-in-regroup", 2.0, ranks=[0, 1], time=112.5, front=12, bound_s=70)


def test_a_faithful_campaign_with_redone_steps_has_no_difference(tmp_path):
    job = {r: [(100.0 + s, s, 1.0 / (s + r)) for s in range(1, 21)] for r in (0, 1)}
    job[1] += [(106.0 + s, s, 1.0 / (s + 1)) for s in (4, 5)]  # redone after the kill, the same losses
    run, ran = losses(tmp_path, "job", job), reference(tmp_path)
    assert divergence.first_difference(run, ran, [KILL, REGROUP]) is None
    assert divergence.redone_differently(run, [KILL, REGROUP]) is None
    assert divergence.compared(run, ran) == 40


def test_the_first_step_that_differs_names_its_rank_and_the_fault_before_it(tmp_path):
    job = {r: [(100.0 + s, s, 1.0 / (s + r)) for s in range(1, 21)] for r in (0, 1)}
    job[0][13] = (114.0, 14, 0.5)  # rank 0 goes wrong at step 14; rank 1 only later
    job[1][16] = (117.0, 17, 0.25)
    found = divergence.first_difference(losses(tmp_path, "job", job), reference(tmp_path), [KILL, REGROUP])
    assert found is not None
    assert (found["rank"], found["step"], found["fault"]) == (0, 14, 2)
    assert float.fromhex(found["loss"]) == 0.5 and float.fromhex(found["expected"]) == 1.0 / 14
    assert "#2 kill-in-regroup" in found["why"]


def test_a_step_redone_with_another_loss_is_found_without_a_reference(tmp_path):
    job = {r: [(100.0 + s, s, 1.0 / (s + r)) for s in range(1, 10)] for r in (0, 1)}
    job[1] += [(109.0, 5, 1.0 / 6), (109.1, 6, 0.125)]  # the redo after the kill: step 6 differs
    found = divergence.redone_differently(losses(tmp_path, "job", job), [KILL])
    assert found is not None and (found["rank"], found["step"], found["fault"]) == (1, 6, 1)


def test_a_difference_before_any_fault_names_none(tmp_path):
    job = {0: [(100.0, 1, 3.0)], 1: [(100.0, 1, 0.5)]}
    found = divergence.first_difference(losses(tmp_path, "job", job), reference(tmp_path), [KILL])
    assert found is not None and found["fault"] is None and "last fault" not in found["why"]


def test_a_reference_that_could_not_run_is_said_and_the_campaigns_weights_still_kept(tmp_path):
    """A 100-fault campaign's reference once outlived its wait; the whole ledger went with it."""
    from lab.chaos.campaign import final_weights
    from lab.exercises.drill import TimedOut

    WHY = "no step for 120s waiting for the job to end (at step 17): rank 0 at x"

    class Campaign:
        def events(self) -> list[dict]:
            return [
                {"time": 9.0, "event": "exit", "rank": r, "reason": "completed", "checksum": "-0x1.8p+1"}
                for r in (0, 1)
            ]

        def reference_checksums(self, trainer_args: list[str]):
            raise TimedOut(WHY)

    weights = final_weights(Campaign(), ["--steps", "20"], reference(tmp_path), [KILL])
    assert weights == {
        "identical": False,
        "final": ["-0x1.8p+1"],
        "why": f"no uninterrupted reference to compare with: {WHY}",
    }
