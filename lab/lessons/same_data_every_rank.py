"""same-data-every-rank: without a DistributedSampler every rank trains on the same samples.

    lab exercise run same-data-every-rank

data_split.py runs one epoch of a 64-sample dataset on 4 ranks (2 hosts x 2), first with
a plain DataLoader, then with a DistributedSampler; rank 0 gathers every rank's indices
and counts duplicates. The verdict asserts all duplicates (each sample 4 times), then none.
"""

from lab.topology import Topology

NAME = "same-data-every-rank"
SUMMARY = "a plain DataLoader gives every rank the same data; DistributedSampler splits it"
KIND = "lesson"
COMMAND = "lab exercise run same-data-every-rank"
SAMPLES = 64
DEPTHS = {
    "beginner": """
Four copies reading the same dataset from the start all see the same examples: four
times the work for the same learning. A DistributedSampler deals the dataset out like
cards, so each copy gets a different quarter.""",
    "developer": """
Pass `sampler=DistributedSampler(dataset)` to the DataLoader (and drop shuffle=True
there: the sampler shuffles) and call `sampler.set_epoch(epoch)` every epoch, or each
epoch repeats the same order. With drop_last=False the sampler pads by repeating a few
samples so every rank gets the same count.""",
    "researcher": """
DistributedSampler permutes the indices with a generator seeded by seed + epoch
(identical on every rank), pads to a multiple of the world size and takes
indices[rank::world_size]. The union over ranks is the dataset, the shares disjoint.
Without it the effective global batch is N copies of one batch: the averaged gradient
equals one rank's gradient, at N times the cost.""",
}
LINE = r"seen (?P<seen>\d+) unique (?P<unique>\d+) duplicates (?P<dups>\d+)"


def run(lesson) -> None:
    report = lesson.report
    topology = Topology(nodes=2, nproc_per_node=2)
    plain = lesson.job("plain DataLoader", topology, "data_split").matches(LINE)
    split = lesson.job("DistributedSampler", topology, "data_split", ["--sampler"]).matches(LINE)
    if not (plain and split):
        report.check("both runs reported their counts", False, f"plain {bool(plain)}, sampler {bool(split)}")
        return
    p, s = plain[0].groupdict(), split[0].groupdict()
    report.facts.update(plain=p, sampler=s)
    report.check(
        "plain: every sample seen by all 4 ranks (3 duplicates each)",
        int(p["unique"]) == SAMPLES and int(p["dups"]) == 3 * SAMPLES,
        str(p),
    )
    report.check(
        "DistributedSampler: no duplicates, every sample once",
        int(s["dups"]) == 0 and int(s["unique"]) == SAMPLES == int(s["seen"]),
        str(s),
    )
    report.explanation = "a DistributedSampler gives each rank indices[rank::world_size] of one shared permutation"
