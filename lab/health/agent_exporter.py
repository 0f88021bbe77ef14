"""Per-node agent metrics: what torchrun's elastic agent itself does, on a node port.

torchelastic reports through two hooks, and in open-source torch both go nowhere by
default: `metrics.configure(handler)` (the default handler drops everything) and
named event handlers (`--event-log-handler`, a NullHandler). The lab registers its
own for both. One figure torch does not report until the whole run is over is which
workers exited with which code; the lab observes the agent's monitor loop for that.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge
from torch.distributed.elastic import metrics as elastic_metrics
from torch.distributed.elastic.agent.server.api import WorkerState
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.events import handlers as event_handlers
from torch.distributed.elastic.metrics.api import MetricData, MetricHandler
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

from lab.health.events import AgentEvent, append_agent_record
from lab.health.labelled import exposed
from lab.health.rank_exporter import ExporterPortError
from lab.nodeenv import NodeEnv

STATES = [s.name for s in WorkerState]
EVENT_HANDLER = "lab"  # the name torchrun's --event-log-handler selects
ERROR_CHARS, TRACEBACK_CHARS = 500, 4000  # of a failed rank's exception, kept in its agent's record


class AgentMetrics(MetricHandler):
    def __init__(self, *, node: str, max_restarts: int, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.max_restarts = max_restarts
        Gauge("lab_agent_info", "Always 1; the node this agent runs on.", ["node"], registry=r).labels(node).set(1)
        self.where = {"node": node}
        Gauge("lab_agent_max_restarts", "torchrun --max-restarts.", registry=r).set(max_restarts)
        self.state = Gauge(
            "lab_agent_worker_group_state", "1 for the worker group's current state.", ["state"], registry=r
        )
        self.set_state("INIT")
        self.restarts_used = Gauge("lab_agent_restarts_used", "Worker-group restarts used so far.", registry=r)
        self.restarts_left = Gauge("lab_agent_restarts_remaining", "Worker-group restarts left.", registry=r)
        self.restarts_left.set(max_restarts)
        self.rendezvous = Counter("lab_agent_rendezvous", "Rendezvous rounds this agent completed.", registry=r)
        self.rendezvous_failures = Counter(
            "lab_agent_rendezvous_failures", "Rendezvous rounds that failed.", registry=r
        )
        self.rendezvous_duration = Gauge(
            "lab_agent_rendezvous_duration_seconds", "Duration of the last rendezvous round.", registry=r
        )
        self.worker_exits = Counter(
            "lab_agent_worker_exits", "Worker processes that exited, by exit code.", ["exit_code"], registry=r
        )
        self._counted_pids: set[int] = set()

    def net_rtt(self) -> Gauge:
        """The round-trip gauge, made only on a node that probes (a loopback node has no such
        figure: 0 would read as a perfect network)."""
        return Gauge(
            "lab_node_net_rtt_seconds",
            "The node's last round trip to the lab's bridge (lab.health.net_probe; netns hosts).",
            registry=self.registry,
        )

    def set_state(self, current: str) -> None:
        """The worker group's state: 1 for it, 0 for every other."""
        for state in STATES:
            self.state.labels(state).set(1 if state == current else 0)

    def set_restarts_used(self, used: float) -> None:
        self.restarts_used.set(used)
        self.restarts_left.set(self.max_restarts - used)

    # -- torchelastic's metrics stream -------------------------------------------------
    def emit(self, metric_data: MetricData) -> None:
        name, value = metric_data.name, metric_data.value
        if name.startswith("workers.") and name.endswith(".remaining_restarts"):
            self.set_restarts_used(self.max_restarts - value)
        elif name.startswith("workers.") and name.rsplit(".", 1)[1].upper() in STATES:
            self.set_state(name.rsplit(".", 1)[1].upper())
        elif name == "SimpleElasticAgent._rendezvous.success":
            self.rendezvous.inc()
        elif name == "SimpleElasticAgent._rendezvous.failure":
            self.rendezvous_failures.inc()
        elif name == "SimpleElasticAgent._rendezvous.duration.ms":
            self.rendezvous_duration.set(value / 1000.0)

    # -- the agent's monitor loop ------------------------------------------------------
    def observe_result(self, worker_group, result) -> None:
        """Count each worker process's exit once, by code (from the agent's RunResult)."""
        for failure in result.failures.values():
            self.count_exit(failure.pid, failure.exitcode)
        if result.state == WorkerState.SUCCEEDED:
            for worker in worker_group.workers:
                if worker.global_rank in result.return_values:
                    self.count_exit(worker.id, 0)

    def count_exit(self, pid, exit_code) -> None:
        """One worker process's exit, by its code, counted once."""
        if pid not in self._counted_pids:
            self._counted_pids.add(pid)
            self.worker_exits.labels(str(exit_code)).inc()


class EventFileHandler(logging.Handler):
    """Appends torchelastic's agent and rendezvous events to a JSON-lines file."""

    def __init__(self, path: Path, node: str):
        super().__init__()
        self.path, self.node = path, node
        path.parent.mkdir(parents=True, exist_ok=True)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = json.loads(record.getMessage())
        except (TypeError, ValueError):
            return
        append_agent_record(self.path, self.node, event)


def install(metrics: AgentMetrics | None, events_path: Path | None, node: str) -> None:
    """Hook the metrics handler (when exporting), the event handlers and the monitor
    observer into torchelastic. The "lab" event handler is always registered: the
    Topology always renders --event-log-handler=lab."""
    if metrics:
        elastic_metrics.configure(metrics)  # every group, "torchelastic" included
    handler = EventFileHandler(events_path, node) if events_path else logging.NullHandler()
    event_handlers._log_handlers[EVENT_HANDLER] = handler  # selected by --event-log-handler=lab
    event_handlers._log_handlers["dynamic_rendezvous"] = handler  # rendezvous rounds, joins, failures

    original = LocalElasticAgent._monitor_workers
    reported_rounds: set[tuple] = set()

    def monitor_and_observe(agent, worker_group):
        result = original(agent, worker_group)
        if metrics:
            metrics.observe_result(worker_group, result)
        # The moment the agent notices a failure: torch records no event for it.
        round_key = tuple(w.id for w in worker_group.workers)  # the worker pids: new every round
        if result.is_failed() and round_key not in reported_rounds:
            reported_rounds.add(round_key)
            handler.emit(
                logging.makeLogRecord(
                    {
                        "msg": json.dumps(
                            {
                                "name": AgentEvent.FAILURE_DETECTED,
                                "state": result.state.name,
                                "exit_codes": {str(r): f.exitcode for r, f in result.failures.items()},
                                # Where each failed rank ran, and what it raised, for `lab why` (lab.why.card).
                                "failures": every_failure(agent, worker_group, result),
                            }
                        )
                    }
                )
            )
        return result

    setattr(LocalElasticAgent, "_monitor_workers", monitor_and_observe)  # noqa: B010 -- a patch, on purpose


def every_failure(agent, worker_group, result) -> dict[str, dict]:
    """Every rank of the group that exited non-zero, by global rank. torch reports one failure
    per node (for function workers, the lowest local rank among those already dead when it
    looked), often a peer that died of the first one's loss; the others' exits are read from
    the agent's process context after it stopped the group."""
    failures = {str(rank): failure_record(f) for rank, f in result.failures.items()}
    context = getattr(agent, "_pcontext", None)
    codes, error_files = exit_codes(context), getattr(context, "error_files", None) or {}
    for worker in worker_group.workers:
        code = codes.get(worker.local_rank)
        if code and str(worker.global_rank) not in failures:
            error_file = whole_error_file(error_files.get(worker.local_rank, ""))
            failure = ProcessFailure(worker.local_rank, worker.id or -1, code, error_file)
            failures[str(worker.global_rank)] = failure_record(failure)
    return failures


def whole_error_file(path: str) -> str:
    """path when it holds a whole JSON record, else "" (no file): torch's ProcessFailure raises on
    an empty or cut one, as a worker that died while writing it leaves (seen in CI: the agent
    itself died of it, and the job with it)."""
    try:
        json.loads(Path(path).read_text())
    except (OSError, ValueError):  # missing too: torch reads no file as no error recorded
        return ""
    return path


def exit_codes(context) -> dict[int, int]:
    """local rank -> exit status of each worker that has exited, for either kind of process context."""
    handlers = getattr(context, "subprocess_handlers", None)  # a binary or `python -m` per worker
    if handlers:
        return {rank: h.proc.poll() for rank, h in handlers.items() if h.proc.poll() is not None}
    processes = getattr(getattr(context, "_pc", None), "processes", None) or []  # function workers
    return {rank: p.exitcode for rank, p in enumerate(processes) if p.exitcode is not None}


def failure_record(failure) -> dict:
    """A failed rank as `lab why` reads it: where it ran, its exit, and the exception its
    torchelastic error file holds (a worker started through torchrun's --run-path, as the
    lab's preloaded ones are, records one; its output then carries no `[rankN]:` traceback)."""
    record: dict = {"local_rank": failure.local_rank, "pid": failure.pid, "exitcode": failure.exitcode}
    data = failure.error_file_data if isinstance(failure.error_file_data, dict) else {}
    message = data.get("message")
    if isinstance(message, dict) and message.get("message"):
        extra = message.get("extraInfo")
        extra = extra if isinstance(extra, dict) else {}
        record["error"] = str(message["message"])[:ERROR_CHARS]
        record["traceback"] = str(extra.get("py_callstack", ""))[-TRACEBACK_CHARS:]
    return record


def serve(metrics: AgentMetrics, port: int) -> None:
    from prometheus_client import start_http_server

    try:
        start_http_server(
            port, addr=NodeEnv.parse().exporter_addr or "0.0.0.0", registry=exposed(metrics.registry, metrics.where)
        )
    except OSError as e:
        raise ExporterPortError(f"agent exporter port {port} is already in use ({e.strerror})") from None
