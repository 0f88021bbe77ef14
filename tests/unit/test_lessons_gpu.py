"""The lessons' GPU paths, exercised on a machine without a GPU.

A lesson picks its backend and its expectations from the number of GPUs it is given
(`Lesson.gpus`, which LAB_GPU_COUNT fakes), never from what its own process sees. Here a
test double stands in for the jobs, because no GPU exists on this machine to run them: it
records the topology each job asked for and answers with the lines the workloads print
(built by the workloads' own formatting, on the device such a run would report). The CPU
path runs for real, in the README's order, in tests/test_docs_path.py; the GPU path for real
in scripts/gpu-check.sh, whenever a GPU machine is lent.
"""

from __future__ import annotations

import pytest

from lab.lessons import buffers, set_device_first
from lab.lessons.runner import JobOutput
from lab.report import Report
from lab.workloads.bn_buffers import line

SYNC_REFUSED = f"[node0] ValueError: {buffers.SYNC_CPU_ERROR}"  # torch's words, as a CPU run printed them


class Jobs:
    """A Lesson whose jobs are answered by `answer(mode, backend)` instead of being run."""

    def __init__(self, gpus: int, answer):
        self.gpus, self.answer = gpus, answer
        self.report = Report("lesson", "local", 0)
        self.backends: list[str] = []

    def job(self, name, topology, script, args=()):
        self.backends.append(topology.backend)
        return self.answer(list(args), topology.backend)


def bn_run(device_of, stats):
    """The bn_buffers job's output: each rank on device_of(rank), its running_mean from stats(mode, rank)."""

    def answer(args, backend):
        mode = args[args.index("--mode") + 1]
        if mode == "sync" and backend == "gloo":
            return JobOutput(mode, {"node0": 1}, [SYNC_REFUSED])
        lines = [f"[node0] {line(r, mode, device_of(r), stats(mode, r), 1.0)}" for r in (0, 1)]
        return JobOutput(mode, {"node0": 0}, lines)

    return answer


def rank0_unless_local(mode, rank):
    return float(rank) if mode == "local" else 0.0


def failed(report):
    return [c.name for c in report.checks if not c.ok]


@pytest.mark.parametrize(
    ("gpus", "device", "backend", "sync_claim"),
    [
        (2, "cuda:{rank}", "nccl", "SyncBatchNorm: every rank used the same"),
        # The H200 run: one GPU present, so the ranks ran gloo on the CPU and torch refused SyncBatchNorm.
        (1, "cpu", "gloo", "SyncBatchNorm on CPU (1 GPU(s) here"),
    ],
    ids=["two GPUs", "one GPU"],
)
def test_buffers_runs_every_mode_on_the_backend_its_gpus_allow_and_judges_syncbatchnorm_for_it(
    gpus, device, backend, sync_claim
):
    lesson = Jobs(gpus, bn_run(lambda r: device.format(rank=r), rank0_unless_local))
    buffers.run(lesson)
    assert lesson.backends == [backend] * 3
    assert lesson.report.verdict == "pass", failed(lesson.report)
    assert any(c.name.startswith(sync_claim) for c in lesson.report.checks)


def test_buffers_names_ranks_that_ran_on_another_device_than_their_backend_gives_them():
    lesson = Jobs(2, bn_run(lambda r: "cpu", rank0_unless_local))
    buffers.run(lesson)
    device_check = next(c for c in lesson.report.checks if "device nccl gives" in c.name)
    assert not device_check.ok and "sync rank 1" in device_check.detail


def test_buffers_fails_when_syncbatchnorm_disagrees_on_gpus():
    lesson = Jobs(2, bn_run(lambda r: f"cuda:{r}", lambda mode, r: float(r) if mode != "broadcast" else 0.0))
    buffers.run(lesson)
    assert failed(lesson.report) == ["SyncBatchNorm: every rank used the same statistics"]


def set_device_run(before):
    def answer(args, backend):
        lines = [f"[node0] rank {r} before set_device {before(r)} after cuda:{r}" for r in (0, 1)]
        return JobOutput("set_device", {"node0": 0}, lines)

    return answer


def test_set_device_first_on_two_gpus_runs_nccl_and_judges_where_tensors_landed():
    lesson = Jobs(2, set_device_run(lambda r: "cuda:0"))
    set_device_first.run(lesson)
    assert lesson.backends == ["nccl"] and lesson.report.verdict == "pass", failed(lesson.report)
    wrong = Jobs(2, set_device_run(lambda r: f"cuda:{r}"))  # as if set_device had come first
    set_device_first.run(wrong)
    assert failed(wrong.report) == ["before set_device every tensor is on cuda:0"]


def test_set_device_first_with_one_gpu_is_skipped_saying_how_many():
    lesson = Jobs(1, set_device_run(lambda r: "cuda:0"))
    set_device_first.run(lesson)
    assert lesson.backends == [] and "this machine has 1" in lesson.report.skipped
