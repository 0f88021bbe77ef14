"""The controller-to-node wire: every LAB_* variable a node's processes read, declared once.

The controller renders a `NodeEnv` (Topology.node_env, Runtime.node_env) into the node's
environment; lab.node.launch sets it (warning instead of overriding a value the user set),
and every process on the node (the agent's shim, the ranks, a user's script) reads it back
with `NodeEnv.parse()`: a misspelt or malformed variable is one line naming it, never a
silent default. tests/test_architecture.py fails on a LAB_* name read anywhere else.

Not on this wire (the user's own settings, read where they act): LAB_RUN_DIR, LAB_DEBUG,
LAB_IMAGE, LAB_PROMETHEUS_IMAGE, LAB_DOCKER_SUBNET, LAB_RUNTIMES, LAB_GPU_COUNT, and the
Kubernetes pod's LAB_TOPOLOGY / LAB_WORKLOAD / LAB_WORKLOAD_ARGS (lab.node.k8s_pod).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lab.errors import LabError


def wire(name: str, kind: type, meaning: str) -> Any:
    """A variable: its name, its type, what it means. Unset is None (False for a switch): the
    reader's own default applies, as documented in `meaning`."""
    return field(default=False if kind is bool else None, metadata={"env": name, "kind": kind, "meaning": meaning})


@dataclass(frozen=True, kw_only=True)
class NodeEnv:
    events_dir: str | None = wire("LAB_EVENTS_DIR", str, "where each rank's and agent's event log goes")
    ckpt_dir: str | None = wire("LAB_CKPT_DIR", str, "where the trainer keeps its checkpoints")
    ckpt_shared: bool = wire("LAB_CKPT_SHARED", bool, "every node sees one checkpoints folder: rank 0 writes")
    parallel: str | None = wire("LAB_PARALLEL", str, "the lab trainer's --parallel default: ddp or fsdp2 (unset: ddp)")
    targets_dir: str | None = wire("LAB_TARGETS_DIR", str, "Prometheus file_sd folder the exporters register in")
    workers_file: str | None = wire("LAB_WORKERS_FILE", str, "the node's record of its workers' pids")
    backend: str | None = wire("LAB_BACKEND", str, "gloo or nccl (unset: nccl with a GPU, else gloo)")
    pg_timeout_s: float | None = wire("LAB_PG_TIMEOUT_S", float, "the workloads' process-group timeout (unset: 60)")
    agent_metrics_port: int | None = wire("LAB_AGENT_METRICS_PORT", int, "the agent's exporter port (unset: off)")
    metrics_port_base: int | None = wire("LAB_METRICS_PORT_BASE", int, "rank r's exporter port: this + r (unset: off)")
    metrics_port_by: str | None = wire("LAB_METRICS_PORT_BY", str, "local_rank: + the local rank (own addresses)")
    step_watchdog_s: float | None = wire("LAB_STEP_WATCHDOG_S", float, "a step's file-timer deadline (unset: off)")
    exporter_addr: str | None = wire("LAB_EXPORTER_ADDR", str, "where the exporters listen (unset: 0.0.0.0)")
    net_probe: str | None = wire("LAB_NET_PROBE", str, "a host outside the job the agent times round trips to")
    events_echo: bool = wire("LAB_EVENTS_ECHO", bool, "also print each event on stderr (pods' logs)")
    inprocess_store: str | None = wire(
        "LAB_INPROCESS_STORE", str, "in-process recovery: the keepers' store, HOST:PORT (unset: a torchrun job)"
    )
    inprocess_generation: int | None = wire(
        "LAB_INPROCESS_GENERATION",
        int,
        "in-process recovery: a replacement rank's generation (unset: not one)",
    )
    inprocess_join_timeout_s: float | None = wire(
        "LAB_INPROCESS_JOIN_TIMEOUT_S",
        float,
        "in-process recovery: how long a rank waits for the others to come to a generation (unset: 120)",
    )
    inprocess_beat_fd: int | None = wire(
        "LAB_INPROCESS_BEAT_FD", int, "in-process recovery: the pipe a rank's heartbeat goes down to its keeper"
    )

    def render(self) -> dict[str, str]:
        """The variables that are set, as a node's environment holds them."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and value is not False:
                out[f.metadata["env"]] = "1" if value is True else str(value)
        return out

    @classmethod
    def parse(cls, environ: Mapping[str, str] | None = None) -> NodeEnv:
        """Read back from an environment (default: this process's); a bad value is one line."""
        environ = os.environ if environ is None else environ
        found: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            text = environ.get(f.metadata["env"])
            if text:
                found[f.name] = _value(f, text)
        return cls(**found)


def _value(f: dataclasses.Field, text: str) -> Any:
    kind = f.metadata["kind"]
    try:
        if kind is bool:
            if text not in ("0", "1"):
                raise ValueError
            return text == "1"
        return kind(text)
    except ValueError:
        raise LabError(f"{f.metadata['env']}={text!r}: expected {kind.__name__} ({f.metadata['meaning']})") from None


def names() -> dict[str, str]:
    """Every variable on the wire, with what it means."""
    return {f.metadata["env"]: f.metadata["meaning"] for f in dataclasses.fields(NodeEnv)}
