"""One description of a multi-node torchrun job, rendered into each node's command line.

Every runtime (local processes, netns hosts, Docker, Kubernetes) renders its nodes'
commands from a `Topology`; nothing else in the lab builds torchrun arguments.

    >>> t = Topology(nodes=2, nproc_per_node=2, rdzv_host="node0")
    >>> t.torchrun_args(1)[:2]
    ['--nnodes=2', '--nproc-per-node=2']
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass

from lab.errors import LabError
from lab.nodeenv import NodeEnv

BACKENDS = ("gloo", "nccl")
RDZV_BACKENDS = ("c10d", "static", "etcd-v2", "lab")
WORKER_STARTS = ("auto", "preload", "spawn")
PARALLEL, SAVES = ("ddp", "fsdp2"), ("sync", "async")  # the lab trainer's --parallel, and fsdp2's --save
WATCHER = "lab.node.user_script"  # the module that runs a user's script in a drill, watched


class TopologyError(LabError, ValueError):
    """A field of the topology has a value the lab cannot run."""


@dataclass(frozen=True, kw_only=True)
class Topology:
    nodes: int = 2
    nproc_per_node: int = 2
    # Elastic jobs: torchrun's --nnodes=MIN:MAX. None means a fixed-size job.
    min_nodes: int | None = None
    backend: str = "gloo"
    rdzv_backend: str = "c10d"
    # Node 0's name or address as the other nodes reach it; runtimes fill it in.
    rdzv_host: str = "127.0.0.1"
    rdzv_port: int = 29400
    rdzv_id: str = "torchrun-lab"
    max_restarts: int = 0
    # How long an agent waits for the others to join a rendezvous round.
    join_timeout_s: int = 120
    # Elastic jobs: how long a round with at least min_nodes waits for more before it closes.
    last_call_timeout_s: int = 30
    # The workloads' process-group timeout. gloo's default is 30 minutes, which turns a
    # hung rank into a half-hour silent wait; the lab wants a hang to fail fast.
    pg_timeout_s: int = 60
    monitor_interval_s: float = 0.1
    # Exporters: node i's agent serves on agent_metrics_port + i, rank r on rank_metrics_port + r,
    # so that nodes sharing one host (loopback) never collide. 0 turns the exporters off.
    agent_metrics_port: int = 9400
    rank_metrics_port: int = 9500
    # "offset": as above, for nodes that share one network (loopback, one netns per node is
    # fine too). "fixed": every node has an address of its own (pods, containers), so every
    # agent serves on agent_metrics_port and rank r on rank_metrics_port + its local rank:
    # the same ports on every node, which a pod template can declare.
    metrics_ports: str = "offset"
    # Keep torch's defaults instead of the lab's restart workaround (see lab.node.launch).
    torch_defaults: bool = False
    # How workers start. "spawn" is torchrun's default: a fresh interpreter per worker that
    # imports torch itself, at every restart (seconds on a small machine). "preload" is
    # torchrun's own --run-path with --start-method=forkserver, whose server imports torch
    # once per node (lab.node.launch --preload-workers), so a worker starts in milliseconds.
    # "auto": preload, or spawn with torch_defaults.
    worker_start: str = "auto"
    # More torchrun flags, passed through as given (say --tee=3 or --local-ranks-filter=0).
    torchrun_extra: tuple[str, ...] = ()
    # TORCH_DISTRIBUTED_DEBUG for the workers: OFF, INFO or DETAIL (checks every collective).
    distributed_debug: str | None = None
    # GPUs each node uses (nodes on one machine get disjoint ones, see lab.gpus). None: one per
    # worker with nccl, none with gloo.
    gpus_per_node: int | None = None
    # Run the script through lab.node.user_script with these arguments: a user's own script in a
    # drill, watched without a change to it (a preloaded worker runs the module, see
    # lab.node.preload.run_script_path; a spawned one is torchrun --module).
    script_wrapper: tuple[str, ...] = ()
    # torchelastic's file-timer watchdog (lab.workloads.distributed.StepDeadline): a rank whose
    # training step takes longer than this is SIGKILLed by its agent. 0: off.
    step_watchdog_s: int = 0
    # In-process recovery (lab.recovery): each node runs a keeper (lab.node.inprocess.keeper) instead of
    # torchrun's agent; node 0's hosts the job's store on rdzv_host:rdzv_port; max_restarts is
    # each node's budget of replacements.
    in_process: bool = False
    parallel: str = "ddp"  # the trainer's --parallel, through LAB_PARALLEL (fsdp2: never in-process)

    @classmethod
    def from_json(cls, fields: dict) -> Topology:
        """A topology from its dataclasses.asdict JSON (a run's state, a drill's seen.json):
        lists back to tuples, unknown keys (an older lab's) left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        shape: dict = {k: tuple(v) if isinstance(v, list) else v for k, v in fields.items() if k in known}
        return cls(**shape)

    def __post_init__(self) -> None:
        _at_least("nodes", self.nodes, 1)
        _at_least("nproc_per_node", self.nproc_per_node, 1)
        if self.min_nodes is not None:
            _at_least("min_nodes", self.min_nodes, 1)
            if self.min_nodes > self.nodes:
                raise TopologyError(f"min_nodes must not exceed nodes ({self.min_nodes} > {self.nodes})")
        _one_of("backend", self.backend, BACKENDS)
        _one_of("rdzv_backend", self.rdzv_backend, RDZV_BACKENDS)
        _one_of("parallel", self.parallel, PARALLEL)
        if self.in_process and (self.min_nodes or self.torch_defaults or self.script_wrapper or self.parallel != "ddp"):
            raise TopologyError("in_process runs fixed-size jobs of the script itself, on the lab's path, unsharded")
        if self.rdzv_backend == "lab" and self.min_nodes:
            raise TopologyError(
                "rdzv_backend lab is for fixed-size jobs; an elastic job (min_nodes) needs c10d or etcd-v2"
            )
        if not self.rdzv_host:
            raise TopologyError("rdzv_host must not be empty")
        if not 1 <= self.rdzv_port <= 65535:
            raise TopologyError(f"rdzv_port must be a TCP port (1-65535), got {self.rdzv_port}")
        _at_least("max_restarts", self.max_restarts, 0)
        _at_least("join_timeout_s", self.join_timeout_s, 1)
        _at_least("last_call_timeout_s", self.last_call_timeout_s, 0)
        _at_least("pg_timeout_s", self.pg_timeout_s, 1)
        _at_least("step_watchdog_s", self.step_watchdog_s, 0)
        if not self.monitor_interval_s > 0:
            raise TopologyError(f"monitor_interval_s must be positive, got {self.monitor_interval_s}")
        _one_of("worker_start", self.worker_start, WORKER_STARTS)
        _one_of("metrics_ports", self.metrics_ports, ("offset", "fixed"))
        if self.distributed_debug is not None:
            _one_of("distributed_debug", self.distributed_debug, ("OFF", "INFO", "DETAIL"))
        if self.gpus_per_node is not None:
            _at_least("gpus_per_node", self.gpus_per_node, 0)
            if self.backend == "nccl" and self.gpus_per_node < self.nproc_per_node:
                raise TopologyError(
                    f"gpus_per_node must be at least nproc_per_node with nccl (one GPU per "
                    f"worker; NCCL refuses two ranks on one GPU), got {self.gpus_per_node} < "
                    f"{self.nproc_per_node}"
                )
        self._check_ports()

    @property
    def node_gpus(self) -> int:
        """GPUs one node uses."""
        from lab import gpus

        return gpus.per_node(self.backend, self.nproc_per_node, self.gpus_per_node)

    def _check_ports(self) -> None:
        ranges = {"rdzv_port": range(self.rdzv_port, self.rdzv_port + 1)}
        fixed = self.metrics_ports == "fixed"
        if self.agent_metrics_port:
            ranges["agent_metrics_port"] = range(
                self.agent_metrics_port, self.agent_metrics_port + (1 if fixed else self.nodes)
            )
        if self.rank_metrics_port:
            ranges["rank_metrics_port"] = range(
                self.rank_metrics_port, self.rank_metrics_port + (self.nproc_per_node if fixed else self.world_size)
            )
        for field, ports in ranges.items():
            if ports.start < 0 or ports.stop - 1 > 65535:
                raise TopologyError(f"{field} must leave room for its ports in 1-65535, got {ports.start}")
        names = list(ranges)
        for i, a in enumerate(names):
            for b in names[i + 1 :]:
                if set(ranges[a]) & set(ranges[b]):
                    raise TopologyError(
                        f"{a} ({ranges[a].start}-{ranges[a].stop - 1}) overlaps {b} "
                        f"({ranges[b].start}-{ranges[b].stop - 1})"
                    )

    @property
    def world_size(self) -> int:
        return self.nodes * self.nproc_per_node

    @property
    def preloads_workers(self) -> bool:
        if self.worker_start == "auto":
            return not self.torch_defaults
        return self.worker_start == "preload"

    def replace(self, **changes) -> Topology:
        return dataclasses.replace(self, **changes)

    def torchrun_args(self, node_rank: int, *, log_dir: str | None = None) -> list[str]:
        """torchrun's own flags for one node (everything before the script)."""
        if not 0 <= node_rank < self.nodes:
            raise TopologyError(f"node_rank must be in [0, {self.nodes}), got {node_rank}")
        nnodes = f"{self.min_nodes}:{self.nodes}" if self.min_nodes else str(self.nodes)
        args = [
            f"--nnodes={nnodes}",
            f"--nproc-per-node={self.nproc_per_node}",
            f"--max-restarts={self.max_restarts}",
            f"--monitor-interval={self.monitor_interval_s:g}",
        ]
        if self.rdzv_backend == "static":
            # Only static rendezvous uses the node rank; c10d and etcd assign ranks on joining.
            args += [f"--node-rank={node_rank}", f"--master-addr={self.rdzv_host}", f"--master-port={self.rdzv_port}"]
        else:
            conf = f"join_timeout={self.join_timeout_s}"
            if self.min_nodes:
                conf += f",last_call_timeout={self.last_call_timeout_s}"
            if self.rdzv_backend == "lab":
                conf += f",node_rank={node_rank}"  # lab.node.fast_rendezvous: node 0 hosts the store
            if self.rdzv_backend == "c10d":
                # Say which node hosts the store instead of letting torch guess from the
                # hostname: the guess is wrong on loopback nodes (every node "is" localhost)
                # and in network namespaces whose hostname differs from the endpoint.
                conf += f",is_host={1 if node_rank == 0 else 0}"
            args += [
                f"--rdzv-backend={self.rdzv_backend}",
                f"--rdzv-endpoint={self.rdzv_host}:{self.rdzv_port}",
                f"--rdzv-id={self.rdzv_id}",
                f"--rdzv-conf={conf}",
            ]
        if self.preloads_workers:
            args += ["--run-path", "--start-method=forkserver"]
        if log_dir:
            args.append(f"--log-dir={log_dir}")
        args += list(self.torchrun_extra)
        # lab.node.launch registers an event handler under this name (lab.health.agent_exporter).
        args.append("--event-log-handler=lab")
        return args

    def env(self, node_rank: int) -> dict[str, str]:
        """Variables lab.node.launch sets on this node (it warns instead of overriding the user's)."""
        fixed = self.metrics_ports == "fixed"
        wire = NodeEnv(
            backend=self.backend,
            pg_timeout_s=self.pg_timeout_s,
            agent_metrics_port=self.agent_metrics_port + (0 if fixed else node_rank)
            if self.agent_metrics_port
            else None,
            metrics_port_base=self.rank_metrics_port or None,
            metrics_port_by="local_rank" if fixed and self.rank_metrics_port else None,
            step_watchdog_s=self.step_watchdog_s or None,
            parallel=self.parallel if self.parallel != "ddp" else None,
        )
        env = wire.render()
        if self.distributed_debug:
            env["TORCH_DISTRIBUTED_DEBUG"] = self.distributed_debug
        if self.step_watchdog_s:
            env["TORCHELASTIC_ENABLE_FILE_TIMER"] = "1"
        return env

    def launch_argv(
        self,
        node_rank: int,
        script: str,
        script_args: tuple[str, ...] | list[str] = (),
        *,
        python: str = sys.executable,
        log_dir: str | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> list[str]:
        """The whole command a node runs: `python -m lab.node.launch [lab flags] <torchrun flags> script ...`.

        The lab's own flags come first so lab.node.launch can take them off before torchrun parses.
        extra_env: runtime-specific variables (paths in its run directory, say).
        """
        env = {**self.env(node_rank), **(extra_env or {})}
        lab_flags = [f"--env={k}={v}" for k, v in sorted(env.items())]
        if self.in_process:
            lab_flags.append("--in-process")
            return [python, "-m", "lab.node.launch", *lab_flags, *self.keeper_args(node_rank), script, *script_args]
        if self.torch_defaults:
            lab_flags.append("--torch-defaults")
        if self.preloads_workers:
            lab_flags.append("--preload-workers")
        return [
            python,
            "-m",
            "lab.node.launch",
            *lab_flags,
            *self.torchrun_args(node_rank, log_dir=log_dir),
            *self._watcher(),
            script,
            *script_args,
        ]

    def keeper_args(self, node_rank: int) -> list[str]:
        """The keeper's flags for one node (lab.node.inprocess.keeper), up to the script."""
        store = f"--store={self.rdzv_host}:{self.rdzv_port}"
        shape = [f"--node-rank={node_rank}", f"--nodes={self.nodes}", f"--nproc-per-node={self.nproc_per_node}"]
        budget = [f"--max-replacements={self.max_restarts}", f"--return-timeout={self.join_timeout_s}"]
        preload = ["--preload"] if self.preloads_workers else []  # ranks and spares forked with torch loaded
        return [store, *shape, *budget, *preload, "--"]

    def _watcher(self) -> tuple[str, ...]:
        """What runs a watched script (script_wrapper): lab.node.user_script, as torchrun's --run-path
        target when workers are preloaded (lab.node.preload runs it as a module), else --module."""
        if not self.script_wrapper:
            return ()
        return ((WATCHER,) if self.preloads_workers else ("--module", WATCHER)) + self.script_wrapper


def _at_least(field: str, value: int, low: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise TopologyError(f"{field} must be an integer >= {low}, got {value!r}")


def _one_of(field: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise TopologyError(f"{field} must be one of {', '.join(allowed)}; got {value!r}")
