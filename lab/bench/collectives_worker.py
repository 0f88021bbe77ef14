"""One rank of `lab bench collectives`: time and check each collective at each size.

Started by torchrun on every node of the lab (the driver is lab/bench/collectives.py).
For each operation and size: one untimed warm-up, then as many timed repetitions as fit
in about half a second (at least one, at most 20; the ranks agree on the count), then a
separate correctness round on freshly filled buffers, checked element by element. A rank
whose result is wrong reports an error for that row, which the driver shows instead of a
bandwidth. Rank 0 writes every row as JSON lines to --out.

--inject-error OP is the self-test: rank 1 damages its result of OP in the correctness
round, to show that a wrong result is caught.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.distributed as dist

from lab.bench.bandwidth import OPS, algbw, busbw
from lab.workloads.distributed import process_group

TIME_BUDGET_S, MAX_REPS = 0.5, 20
WARMUPS = {"cpu": 1, "cuda": 3}  # nccl's first calls set up channels; more warm-up on a GPU


def device_copy_ceiling(size: int, device: torch.device) -> dict:
    """The ceiling a collective on one GPU can approach: a device-to-device copy of `size` bytes,
    in the same run (bytes moved = read + written, as nccl-tests and memcpy benchmarks count)."""
    source = torch.ones(size // 4, device=device)
    target = torch.empty_like(source)
    watch = Stopwatch(device)
    watch.time(lambda: target.copy_(source), 3)
    seconds = watch.time(lambda: target.copy_(source), 20)
    return {
        "op": "device_copy",
        "bytes": size,
        "ranks": 1,
        "reps": 20,
        "seconds": seconds,
        "algbw": size / seconds,
        "busbw": 2 * size / seconds,
        "error": None,
    }


def buffers(
    op: str, count: int, rank: int, ranks: int, device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(input, output or None for in-place ops, the expected result) for `count` float32s, on device
    (the rank's GPU with nccl: nccl moves device memory only)."""
    with torch.device(device):
        return _buffers(op, count, rank, ranks)


def _buffers(op: str, count: int, rank: int, ranks: int) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    if op == "all_reduce":
        return (torch.full((count,), float(rank + 1)), None, torch.full((count,), float(ranks * (ranks + 1) // 2)))
    if op == "all_gather":
        chunk = count // ranks
        expected = torch.arange(1, ranks + 1, dtype=torch.float32).repeat_interleave(chunk)
        return torch.full((chunk,), float(rank + 1)), torch.empty(count), expected
    if op == "reduce_scatter":
        chunk = count // ranks
        # Rank r contributes r+1 to every chunk; chunk i also gets i on every rank.
        source = torch.arange(ranks, dtype=torch.float32).repeat_interleave(chunk) + (rank + 1)
        expected = torch.full((chunk,), float(rank * ranks + ranks * (ranks + 1) // 2))
        return source, torch.empty(chunk), expected
    if op == "broadcast":
        return (torch.full((count,), 7.0 if rank == 0 else 0.0), None, torch.full((count,), 7.0))
    raise ValueError(op)


def call(op: str, source: torch.Tensor, output: torch.Tensor | None) -> None:
    if op == "all_reduce":
        dist.all_reduce(source)
    elif op == "all_gather":
        # torch 2.13's name for all_gather_into_tensor (the older name, on older torch builds)
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(output, source)
    elif op == "reduce_scatter":
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(output, source)
    else:
        dist.broadcast(source, src=0)


def agree_max(value: float, device: torch.device | str = "cpu") -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class Stopwatch:
    """Seconds for `reps` calls of fn. On a GPU, collectives are queued, not done, when the call
    returns: synchronise first, then time with CUDA events on the rank's stream."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def time(self, fn, reps: int) -> float:
        if not self.cuda:
            started = time.perf_counter()
            for _ in range(reps):
                fn()
            return (time.perf_counter() - started) / reps
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000 / reps


CPU = torch.device("cpu")


def measure(op: str, size: int, rank: int, ranks: int, inject_error: str | None, device: torch.device = CPU) -> dict:
    count = size // 4
    source, output, _ = buffers(op, count, rank, ranks, device)
    watch = Stopwatch(device)
    dist.barrier()
    warmup = agree_max(watch.time(lambda: call(op, source, output), WARMUPS[device.type]), device)
    reps = max(1, min(MAX_REPS, int(TIME_BUDGET_S / max(warmup, 1e-6))))
    dist.barrier()
    seconds = agree_max(watch.time(lambda: call(op, source, output), reps), device)

    source, output, expected = buffers(op, count, rank, ranks, device)
    call(op, source, output)
    result = source if output is None else output
    if inject_error == op and rank == 1:
        result[0] += 1.0
    wrong = int((result != expected).sum().item())
    wrong_anywhere = int(agree_max(wrong, device))
    row = {
        "op": op,
        "bytes": size,
        "ranks": ranks,
        "reps": reps,
        "seconds": seconds,
        "algbw": algbw(size, seconds),
        "busbw": busbw(op, size, seconds, ranks),
        "error": None,
    }
    if wrong_anywhere:
        row.update(
            algbw=None,
            busbw=None,
            error=f"wrong result: up to {wrong_anywhere} of {result.numel()} elements differ on a rank",
        )
    return row


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", required=True, help="comma-separated sizes in bytes")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--out", required=True, help="rank 0 writes its rows here (JSON lines)")
    p.add_argument("--inject-error", choices=OPS)
    args = p.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    with process_group() as ctx:
        rows = []
        for op in args.ops.split(","):
            for size in sizes:
                row = measure(op, size, ctx.rank, ctx.world_size, args.inject_error, ctx.device)
                rows.append(row)
                if ctx.rank == 0:
                    result = row["error"] or f"{row['busbw'] / 1e9:.3f} GB/s bus"
                    print(f"{op} {size} B: {result}", flush=True)
        if ctx.rank == 0 and ctx.device.type == "cuda":
            ceiling = device_copy_ceiling(max(sizes), ctx.device)
            rows.append(ceiling)
            print(f"device_copy {max(sizes)} B: {ceiling['busbw'] / 1e9:.1f} GB/s (read + written)", flush=True)
        if ctx.rank == 0:
            with open(args.out, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in rows)


if __name__ == "__main__":
    main()
