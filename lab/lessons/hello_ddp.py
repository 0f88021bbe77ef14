"""hello-ddp: one script, many copies, one number per copy, and every copy agrees.

    lab exercise run hello-ddp

Runs the lesson's ddp_train.py with 2 processes on one host, then 4 on two hosts. Each
rank prints the sum of its first layer's weights; the verdict asserts that every rank
of a run holds the same weights, and that the 2-process run prints the lesson's losses
1.0865 / 0.9100 / 0.8038.
"""

from lab.lessons import all_equal, checksums, losses
from lab.topology import Topology

NAME = "hello-ddp"
SUMMARY = "the lesson's first run: 2 and 4 processes, every rank ends with the same weights"
KIND = "lesson"
COMMAND = "lab exercise run hello-ddp"
LESSON_LOSSES = ["1.0865", "0.9100", "0.8038"]
DEPTHS = {
    "beginner": """
torchrun starts the same script several times. Each copy (a "rank") gets its own slice
of data, computes gradients, and DDP averages them so every copy takes the same step.
That is why every rank prints the same checksum: many copies, one model.""",
    "developer": """
Five lines make a script distributed: init_process_group (torchrun supplies rank, world
size and address through the environment), pick the device from LOCAL_RANK, wrap the
model in DistributedDataParallel, give each rank its own data (DistributedSampler), and
destroy the group at the end. With 4 processes the checksum changes (-4.676729): the
average is over different data, not a bug.""",
    "researcher": """
DDP's Reducer registers an autograd hook per parameter; as gradients become ready they
are packed into buckets and all-reduced (gloo here, nccl on GPUs) while backward still
runs, then divided by the world size. Equal initial weights (broadcast at construction)
plus identical averaged gradients give identical weights after every optimizer step,
bit for bit, which the exact hex checksum shows.""",
}


def run(lesson) -> None:
    report = lesson.report
    two = lesson.job("2 processes on one host", Topology(nodes=1, nproc_per_node=2), "ddp_train")
    four = lesson.job("4 processes on two hosts", Topology(nodes=2, nproc_per_node=2), "ddp_train")
    for output, world in ((two, 2), (four, 4)):
        sums = checksums(output)
        report.facts[f"checksums_{world}"] = sums
        report.check(
            f"{world} processes: every rank printed a checksum",
            sorted(sums) == list(range(world)),
            f"ranks {sorted(sums)}",
        )
        report.check(
            f"{world} processes: every rank holds the same weights",
            output.ok and all_equal(sums.values()),
            ", ".join(sorted(set(sums.values()))),
        )
    report.check("the lesson's losses with 2 processes", losses(two) == LESSON_LOSSES, " / ".join(losses(two)))
    report.explanation = "DDP averages the gradients, so equal weights stay equal after every step"
