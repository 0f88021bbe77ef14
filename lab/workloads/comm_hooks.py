"""A DDP communication hook that times every gradient all-reduce.

It does what DDP's default does (divide the bucket by the world size, all-reduce,
hand the result back), and observes the time from launching the all-reduce to its
completion, per bucket, into a histogram.
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations as objects.
import time

import torch
import torch.distributed as dist


def timed_allreduce_hook(histogram):
    def hook(_state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        started = time.perf_counter()
        tensor = bucket.buffer().div_(dist.get_world_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def done(fut: torch.futures.Future) -> torch.Tensor:
            histogram.observe(time.perf_counter() - started)
            return fut.value()[0]

        return future.then(done)

    return hook
