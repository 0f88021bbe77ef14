"""The exactly-once ledger (lab.exercises.samples) on recorded step events: restarts that redo
steps are no repeat; a resume that replays or skips batches is counted, and where."""

from __future__ import annotations

import json

from lab.exercises import samples
from lab.health.events import EventLog, read_events
from lab.report import Report

N, WORLD, BATCH = 16, 2, 2
PER_EPOCH = N // WORLD // BATCH  # 4 steps


def batch(rank: int, step: int) -> tuple[int, list[int]]:
    """What a DistributedSampler-like split gives rank at step (1-based): its epoch and indices."""
    epoch, b = divmod(step - 1, PER_EPOCH)
    order = [(i * 5 + epoch) % N for i in range(N)]  # a permutation per epoch
    mine = order[rank::WORLD]
    return epoch, mine[b * BATCH : (b + 1) * BATCH]


class Job:
    """Events as the ranks write them, one clock for all."""

    def __init__(self):
        self.events: list[dict] = []
        self.clock = 100.0

    def add(self, rank: int, event: str, **fields) -> None:
        self.clock += 0.01
        self.events.append({"time": self.clock, "event": event, "rank": rank, **fields})

    def start(self) -> None:
        for rank in range(WORLD):
            self.add(rank, "start", restart=0, epoch_samples=N)

    def steps(self, first: int, last: int, at=batch) -> None:
        for step in range(first, last + 1):
            for rank in range(WORLD):
                epoch, indices = at(rank, step)
                self.add(rank, "step", step=step, epoch=epoch, samples=indices)

    def loaded(self, step: int, event: str = "checkpoint_loaded") -> None:
        for rank in range(WORLD):
            self.add(rank, event, step=step)


def test_an_uninterrupted_run_consumes_every_sample_once_per_epoch():
    job = Job()
    job.start()
    job.steps(1, 3 * PER_EPOCH)
    epochs = samples.ledger(job.events)
    assert [(e.epoch, e.consumed, e.distinct, e.repeated) for e in epochs] == [
        (0, 16, 16, 0),
        (1, 16, 16, 0),
        (2, 16, 16, 0),
    ]
    assert [e.skipped for e in epochs] == [0, 0, None]  # the last epoch is not over: not judged for skips
    assert samples.summary(job.events)["why"].startswith("0 repeated, 0 skipped over 3 epoch(s)")


def test_steps_redone_after_a_restart_from_a_checkpoint_are_not_repeats():
    job = Job()
    job.start()
    job.steps(1, 7)  # killed after step 7; the checkpoint holds step 4
    job.start()
    job.loaded(4)
    job.steps(5, 9)
    assert {(e.repeated, e.skipped) for e in samples.ledger(job.events)} == {(0, 0), (0, None)}


def test_a_resume_that_replays_its_epoch_from_the_start_is_counted_with_the_first_repeat():
    job = Job()
    job.start()
    job.steps(1, 6)
    job.loaded(6)
    # The sampler's position forgotten: steps 7 and 8 train on the epoch's first batches again.
    job.steps(7, 9, at=lambda rank, step: batch(rank, step - 2) if step <= 8 else batch(rank, step))
    found = samples.summary(job.events)
    assert found["repeated"] == 2 * WORLD * BATCH
    first = samples.ledger(job.events)[1].first_repeat
    assert first is not None and first["step"] == 7 and first["sample"] in batch(first["rank"], 5)[1]
    assert "first repeat: sample" in found["why"]


def test_a_resume_that_jumps_to_the_next_epoch_skips_the_rest_of_its_epoch():
    job = Job()
    job.start()
    job.steps(1, 6)
    job.loaded(6)
    job.steps(9, 13)  # resumed at the next epoch's start: steps 7 and 8 never ran
    epoch1 = samples.ledger(job.events)[1]
    assert (epoch1.distinct, epoch1.skipped) == (N - 2 * WORLD * BATCH, 2 * WORLD * BATCH)
    found = samples.summary(job.events)
    assert (found["epochs"], found["repeated"], found["skipped"]) == (4, 0, 8)
    assert found["why"] == "0 repeated, 8 skipped over 4 epoch(s); epoch 1 consumed 8 of 16"  # one world size: no tail
    report = Report("kill-worker", "local", 2)
    assert samples.check(report, job.events) is False  # skipped only: enough to fail


def test_a_rank_moved_forward_by_a_peers_state_is_not_judged_for_skips_there():
    job = Job()
    job.start()
    job.steps(1, 5)
    job.add(0, "step", step=6, epoch=1, samples=batch(0, 6)[1])  # rank 1 died before recording step 6
    job.add(1, "state_from_peer", step=6, source=0)
    job.steps(7, 9)
    epoch1 = samples.ledger(job.events)[1]
    assert epoch1.adopted and epoch1.skipped is None and epoch1.repeated == 0


def test_events_read_from_their_tail_leave_the_first_epoch_in_view_unjudged():
    job = Job()
    job.start()
    job.steps(1, 3 * PER_EPOCH)
    tail = [e for e in job.events if e.get("step", 99) > 2]  # steps 1 and 2 out of sight
    assert [e.skipped for e in samples.ledger(tail)] == [None, 0, None]


def test_no_recorded_samples_adds_no_check():
    report = Report("x", "local", 4)
    assert samples.check(report, [{"time": 1.0, "event": "step", "rank": 0, "step": 1}]) is None
    assert report.checks == []


def test_the_trainers_event_line_carries_its_epoch_and_samples(tmp_path):
    log = EventLog(tmp_path, rank=1, local_rank=1)
    log.step(3, 0.5, 0.01, 0.002, (2, [7, 11]))
    (record,) = [e for e in read_events(tmp_path) if e["event"] == "step"]
    assert (record["epoch"], record["samples"], record["busy"]) == (2, [7, 11], 0.002)
    assert json.loads((tmp_path / "rank1.jsonl").read_text().splitlines()[-1])["samples"] == [7, 11]


def test_a_job_that_shrank_then_grew_back_counts_no_step_of_a_rank_it_left_behind():
    """An elastic job of 4 ranks loses 2 at step 3 (they had recorded step 3), goes on at 2 from
    its checkpoint at step 2, saves at step 4, then grows back to 4 from step 4. Ranks 2 and 3
    never loaded the checkpoint at step 2, yet their step 3 is gone with the shrink: the samples
    the 2 ranks dealt themselves in steps 3-4 are no repeat of it (drawn from a real run of
    `kill-node --elastic --rejoin`, where 128 such samples were once counted twice)."""
    n = 32

    def dealt(world: int, rank: int, position: int) -> list[int]:  # the epoch's next samples from `position`
        return [position + rank + world * i for i in range(2)]

    events, clock = [], 100.0

    def add(rank: int, event: str, **fields) -> None:
        nonlocal clock
        clock += 0.01
        events.append({"time": clock, "event": event, "rank": rank, **fields})

    position = 0
    for rank in range(4):
        add(rank, "start", restart=0, epoch_samples=n)
    for step in (1, 2, 3):
        for rank in range(4):
            add(rank, "step", step=step, epoch=0, samples=dealt(4, rank, position))
        position += 8
    position = 16  # back to the checkpoint at step 2: 16 samples consumed
    for rank in (0, 1):
        add(rank, "checkpoint_loaded", step=2)
    for step in (3, 4):
        for rank in (0, 1):
            add(rank, "step", step=step, epoch=0, samples=dealt(2, rank, position))
        position += 4
    for rank in range(4):
        add(rank, "checkpoint_loaded", step=4)
    for step in (5, 6):
        for rank in range(4):
            add(rank, "step", step=step, epoch=0 if position < n else 1, samples=dealt(4, rank, position % n))
        position += 8
    epoch = samples.ledger(events)[0]
    assert (epoch.consumed, epoch.distinct, epoch.repeated) == (32, 32, 0), epoch


def resized_epoch(skip_at_regrow: int = 0) -> list[dict]:
    """40 samples, 2 a rank a step: 4 ranks (a step takes 8), 3 from step 3 (6), 4 again from step 5.
    Consumed 16 + 12 = 28 when the job grows back; one more step of 8 takes it to 36, and the 4
    left are fewer than a step of 4 ranks takes: the epoch ends there (drop_last), as 4 -> 3 -> 4
    ranks of `kill-node --elastic --rejoin` once left 24 of a 32-sample step."""
    job = Job()
    add = job.add
    epoch = 0

    def step(n: int, world: int, position: int) -> int:
        nonlocal epoch
        if position + 2 * world > 40:  # too few left for a whole step: the next epoch
            epoch, position = epoch + 1, 0
        for rank in range(world):
            add(rank, "step", step=n, epoch=epoch, samples=[position + rank + world * i for i in range(2)])
        return position + 2 * world

    for rank in range(4):
        add(rank, "start", restart=0, world_size=4, epoch_samples=40)
    position = step(2, 4, step(1, 4, 0))
    for rank in range(3):
        add(rank, "start", restart=1, world_size=3, epoch_samples=36)
        add(rank, "checkpoint_loaded", step=2)
    position = step(4, 3, step(3, 3, position))
    for rank in range(4):
        add(rank, "start", restart=2, world_size=4, epoch_samples=40)
        add(rank, "checkpoint_loaded", step=4)
    position += skip_at_regrow
    for n in (5, 6, 7):
        position = step(n, 4, position)
    return job.events


def test_a_resized_epochs_end_short_of_a_step_is_its_tail_not_a_skip():
    (epoch0, _epoch1) = samples.ledger(resized_epoch())
    assert (epoch0.distinct, epoch0.expected, epoch0.tail, epoch0.skipped) == (36, 40, 7, 0)


def test_a_step_skipped_when_the_job_grew_back_is_still_caught():
    """Grown back with its place 8 samples on (28 -> 36), the job finds too few left for a step of 4
    and starts epoch 1: epoch 0 ended at 3 ranks (36 expected, a 6-sample step: a tail of up to 5).
    Skipped in truth: the 8 samples 28-35; caught: 3, the rest within what a resize's tail may be."""
    (epoch0, _epoch1) = samples.ledger(resized_epoch(skip_at_regrow=8))
    assert (epoch0.distinct, epoch0.expected, epoch0.tail, epoch0.skipped) == (28, 36, 5, 3)
    why = samples.summary(resized_epoch(skip_at_regrow=8))["why"]
    assert why.endswith("epoch 0 consumed 28 of 36 (resized: up to 5 at its end no step could take)")


def test_an_epoch_at_one_world_size_is_held_to_that_size_s_count():
    """The epoch after the resize ran at 4 ranks only: 40 expected (not 36, the smallest declared)."""
    events = resized_epoch()
    for rank in range(4):  # epoch 1 runs whole at 4 ranks, then epoch 2 begins
        for n, position in ((8, 8), (9, 16), (10, 24), (11, 32)):
            events.append({"time": 200.0 + n, "event": "step", "rank": rank, "step": n, "epoch": 1,
                           "samples": [position + rank + 4 * i for i in range(2)]})  # fmt: skip
        events.append({"time": 300.0, "event": "step", "rank": rank, "step": 12, "epoch": 2, "samples": [rank]})
    epoch1 = samples.ledger(events)[1]
    assert (epoch1.expected, epoch1.tail, epoch1.distinct, epoch1.skipped) == (40, 0, 40, 0)


def test_the_repeat_named_is_the_later_use_in_the_jobs_steps_whatever_the_ranks():
    """A resized job's early step on a high rank consumed the sample first; rank 0 took it again
    after the resize: the repeat is rank 0's, at its step (ranks read in their order once named
    rank 1's early step, the sample's first and rightful use)."""
    job = Job()
    job.add(1, "step", step=2, epoch=0, samples=[7])
    job.add(0, "step", step=1, epoch=0, samples=[3])
    job.add(0, "step", step=5, epoch=0, samples=[7])
    (epoch,) = samples.ledger(job.events)
    assert epoch.repeated == 1 and epoch.first_repeat == {"rank": 0, "step": 5, "sample": 7}
    assert samples.summary(job.events)["why"].endswith("first repeat: sample 7 again at rank 0's step 5")
