"""Per-rank metrics: every worker serves its own /metrics on base port + global rank.

Names follow Prometheus conventions: one prefix (`lab_`), base units (`_seconds`),
`_total` on counters, and no unbounded labels (rank and node are bounded by the job's
size). Counters exist at 0 from start-up, so `rate()` and `increase()` work from the
first scrape. Each rank also writes a file-based service-discovery entry, so the
lab's Prometheus finds it wherever it runs.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, start_http_server

from lab.health import gpu_metrics
from lab.health.gpu_metrics import GpuCollector
from lab.health.labelled import exposed
from lab.health.step_metrics import StepMetrics
from lab.nodeenv import NodeEnv

DETECT = object()  # RankMetrics: find the rank's GPU

# The `_created` companion series double every counter's output and the lab never queries them.
disable_created_metrics()

STEP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COMM_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5)


class ExporterPortError(RuntimeError):
    pass


class RankMetrics:
    def __init__(
        self,
        *,
        rank: int,
        local_rank: int,
        node: str,
        world_size: int,
        restart: int,
        registry: CollectorRegistry | None = None,
        gpu_source=DETECT,
    ):
        """gpu_source: what GpuCollector reads (default: this rank's CUDA device, none on CPU)."""
        self.registry = registry or CollectorRegistry()
        r = self.registry
        source = gpu_metrics.local_source(local_rank) if gpu_source is DETECT else gpu_source
        if source is not None:
            r.register(GpuCollector(source, gpu=str(local_rank)))
        info = Gauge(
            "lab_rank_info", "Always 1; labels say where this rank runs.", ["rank", "local_rank", "node"], registry=r
        )
        info.labels(str(rank), str(local_rank), node).set(1)
        self.where = {"rank": str(rank), "local_rank": str(local_rank), "node": node}
        Gauge("lab_world_size", "Ranks in the job.", registry=r).set(world_size)
        restarts = "Restarts of this worker group so far (TORCHELASTIC_RESTART_COUNT)."
        Gauge("lab_worker_group_restarts", restarts, registry=r).set(restart)
        # The figures every step updates: plain numbers, read at scrape time (step_metrics.py).
        self.per_step = StepMetrics(STEP_BUCKETS, COMM_BUCKETS)
        r.register(self.per_step)
        self.allreduce_duration = self.per_step.allreduce_duration
        self.checkpoint_save = Histogram(
            "lab_checkpoint_save_duration_seconds", "Time to write one checkpoint.", registry=r
        )
        self.last_checkpoint_time = Gauge(
            "lab_last_checkpoint_timestamp_seconds", "When the newest checkpoint was written or loaded.", registry=r
        )
        self.checkpoint_failures = Counter("lab_checkpoint_failures", "Checkpoint writes that failed.", registry=r)
        self.rendezvous = Gauge(
            "lab_rendezvous_duration_seconds", "Time this rank spent joining the process group.", registry=r
        )

    def step_done(self, step: int, seconds: float, samples: int, loss: float, busy: float | None = None) -> None:
        self.per_step.step_done(step, seconds, samples, loss, busy)

    def serve(self, port: int) -> None:
        try:
            start_http_server(
                port, addr=NodeEnv.parse().exporter_addr or "0.0.0.0", registry=exposed(self.registry, self.where)
            )
        except OSError as e:
            raise ExporterPortError(
                f"rank exporter port {port} is already in use ({e.strerror}); "
                "choose another base with LAB_METRICS_PORT_BASE"
            ) from None


def register_target(targets_dir: str | os.PathLike, name: str, port: int, labels: dict[str, str]) -> Path:
    """Write a file_sd entry for this exporter at the address its hostname resolves to."""
    bound = NodeEnv.parse().exporter_addr or "0.0.0.0"
    # An exporter bound to one address (loopback nodes: 127.0.0.1) is scraped there.
    address = bound if bound != "0.0.0.0" else socket.gethostbyname(socket.gethostname())
    path = Path(targets_dir) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps([{"targets": [f"{address}:{port}"], "labels": labels}]))
    os.replace(tmp, path)  # Prometheus never reads half a file
    return path
