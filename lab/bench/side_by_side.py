"""Bench cells side by side: --side-by-side at a time, each its own lab (run dir, hosts,
rendezvous port), results in the cells' order. Stopped (Ctrl-C, SIGTERM), the cells in flight
see the stop event and tear down their labs before the stop goes on."""

from __future__ import annotations

import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import TypeVar

C = TypeVar("C")
R = TypeVar("R")


def run_side_by_side(
    cells: Sequence[C],
    parallel: int,
    run_one: Callable[[C, threading.Event], R],
    finished: Callable[[int, int, R], None],
) -> list[R]:
    """run_one(cell, stop) for every cell; finished(how many done, of how many, its result) as each ends."""
    stop = threading.Event()
    done: dict[int, R] = {}
    with ThreadPoolExecutor(parallel) as pool:
        futures = {pool.submit(run_one, c, stop): n for n, c in enumerate(cells)}
        try:
            for future in as_completed(futures):
                done[futures[future]] = result = future.result()
                finished(len(done), len(cells), result)
        except BaseException:
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return [done[n] for n in range(len(cells))]


def run_in_temp(
    bench: str,
    cells: Sequence[C],
    parallel: int,
    run_one: Callable[[C, Path, threading.Event], R],
    finished: Callable[[int, int, R], None],
) -> tuple[list[R], float]:
    """run_side_by_side, each cell's lab under one temp dir of the bench's own (lab-bench-BENCH-*,
    removed after, stopped or not); and the minutes the cells took."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"lab-bench-{bench}-") as tmp:
        results = run_side_by_side(cells, parallel, lambda cell, stop: run_one(cell, Path(tmp), stop), finished)
    return results, (time.monotonic() - started) / 60
