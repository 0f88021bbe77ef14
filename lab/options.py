"""Command-line options, each declared once as an `Option` and added to every parser that takes it.

The topology's options live here; each runtime declares its own in its `OPTIONS` (see
lab.runtimes.base), each drill its own (lab.exercises). `lab up`, `lab run`, `lab exercise
run` and `lab bench` add what they take from these declarations, as torchx's schedulers
declare their run options, so a flag, its help and its type are written in one place.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from lab import recovery
from lab.rundir import RunDir
from lab.topology import BACKENDS, PARALLEL, RDZV_BACKENDS, WORKER_STARTS, Topology

Adder = argparse.ArgumentParser | argparse._ArgumentGroup


@dataclass(frozen=True)
class Option:
    """One flag: what argparse needs to parse it, and the name it is read back by."""

    flag: str
    help: str = ""
    default: Any = None
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    dest: str | None = None
    switch: bool = False  # a flag without a value (store_true)
    aliases: tuple[str, ...] = ()  # other spellings of the same flag

    @property
    def name(self) -> str:
        """The attribute argparse stores it under (--nproc-per-node: nproc_per_node)."""
        return self.dest or self.flag.lstrip("-").replace("-", "_")

    def but(self, **changes: Any) -> Option:
        """The same flag with some of its fields changed (a narrower choice, another default)."""
        return dataclasses.replace(self, **changes)

    def add_to(self, parser: Adder, help_suffix: str = "", recorded: bool = False) -> None:
        """recorded: the namespace also says whether the user gave it (given()), whatever its value."""
        keywords: dict[str, Any] = {"dest": self.name, "help": (self.help + help_suffix) or None}
        if self.switch:
            parser.add_argument(self.flag, *self.aliases, action=_GivenTrue if recorded else "store_true", **keywords)
            return
        if recorded:
            keywords["action"] = _GivenStore
        for key in ("default", "type", "choices", "metavar"):
            if getattr(self, key) is not None:
                keywords[key] = getattr(self, key)
        parser.add_argument(self.flag, *self.aliases, **keywords)


GIVEN = "flags_given"  # where a namespace keeps the dests of the recorded flags the user gave


def given(namespace: argparse.Namespace) -> set[str]:
    """The recorded flags (Option.add_to(recorded=True)) the user gave, by dest: a flag given at
    its default value is given all the same."""
    if not hasattr(namespace, GIVEN):
        setattr(namespace, GIVEN, set())
    return getattr(namespace, GIVEN)


class _Given(argparse.Action):
    """Whatever the action stores, it also records that the user gave the flag (given())."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        given(namespace).add(self.dest)


class _GivenStore(_Given, argparse._StoreAction):
    pass


class _GivenTrue(_Given, argparse._StoreTrueAction):
    pass


def add_all(parser: Adder, options: Iterable[Option], recorded: bool = False) -> None:
    """recorded: given() says which of them the user gave (to refuse one, whatever its value)."""
    for option in options:
        option.add_to(parser, recorded=recorded)


def port(text: str) -> int:
    """A TCP port, 1-65535 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def count(text: str) -> int:
    """A number of nodes or processes: 1 or more (argparse type). 0 is refused everywhere, never
    read as "the default" (script drills once ran --nodes 0 at size 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def port_or_zero(text: str) -> int:
    """A TCP port, or 0 for none."""
    return 0 if text.strip() == "0" else port(text)


RUN_DIR = Option(
    "--run-dir",
    "where the lab keeps its state: a new or empty dir, or one the lab made (default: "
    "$LAB_RUN_DIR, else $XDG_RUNTIME_DIR/torchrun-lab or /tmp/torchrun-lab-<uid>)",
)
DRY_RUN = Option("--dry-run", "print each node's command and environment; start nothing", switch=True)

_DEFAULTS = Topology()
NODES = Option("--nodes", "number of hosts (default %(default)s)", _DEFAULTS.nodes, count)
NPROC_PER_NODE = Option("--nproc-per-node", "workers per host (default %(default)s)", _DEFAULTS.nproc_per_node, count)
BACKEND = Option("--backend", "the process group's backend (default %(default)s)", _DEFAULTS.backend, choices=BACKENDS)
RDZV_BACKEND = Option(
    "--rdzv-backend",
    "where the rendezvous lives (default: the one --recovery runs: lab for restart, c10d for torchrun)",
    choices=RDZV_BACKENDS,
)
RECOVERY = Option(
    "--recovery",
    "how the job comes back from a lost worker: restart (the lab's tuned restart), torchrun (torch's "
    "c10d rendezvous), in-process (a warm spare takes the lost rank's state from a peer: local and docker "
    "runtimes, a script that uses lab.inprocess, the kill-worker drill), or auto: the fastest the job "
    "can survive, in-process for kill-worker on the lab's trainer (lab/recovery.py; default %(default)s)",
    recovery.AUTO,
    choices=recovery.CHOICES,
)
PARALLEL_OPTION = Option(
    "--parallel",
    "the lab trainer's parallelism: ddp (the whole model on every rank) or fsdp2 (each layer sharded with "
    "fully_shard, DCP checkpoints; recovers by restart: a rank holds only its shard) (default %(default)s)",
    "ddp",
    choices=PARALLEL,
)
RDZV_PORT = Option("--rdzv-port", "", _DEFAULTS.rdzv_port, port)
MAX_RESTARTS = Option(
    "--max-restarts",
    "restarts in a row without progress before the job stops as a crash loop (exit 86); progress "
    "refills it (lab/node/restart_budget.py; --torch-defaults: torchrun's count of every restart). "
    "Default %(default)s",
    _DEFAULTS.max_restarts,
    int,
)
GPUS_PER_NODE = Option(
    "--gpus-per-node",
    "GPUs each node uses; nodes sharing a machine get disjoint ones "
    "(default: one per worker with nccl, none with gloo)",
    type=int,
    metavar="N",
)
PG_TIMEOUT = Option(
    "--pg-timeout",
    "collective timeout in the workloads (default %(default)s; gloo's own is 1800)",
    _DEFAULTS.pg_timeout_s,
    int,
    metavar="SECONDS",
)
METRICS_PORT = Option(
    "--metrics-port",
    "node i's agent exporter serves on PORT+i, rank r's on PORT+100+r; 0: no exporters",
    _DEFAULTS.agent_metrics_port,
    port_or_zero,
    metavar="PORT",
)
TORCH_DEFAULTS = Option(
    "--torch-defaults",
    "leave out the lab's restart workaround (pytorch/pytorch#135712) and worker preloading",
    switch=True,
)
WORKER_START = Option(
    "--worker-start",
    "preload: workers fork from a server that imported torch once per node "
    "(torchrun's --run-path --start-method=forkserver; in-process, the keeper's "
    "ranks and spares); spawn: torchrun's default, a fresh interpreter per "
    "worker; auto: preload unless --torch-defaults (default %(default)s)",
    "auto",
    choices=WORKER_STARTS,
)

TOPOLOGY = (
    NODES,
    NPROC_PER_NODE,
    BACKEND,
    RDZV_BACKEND,
    RECOVERY,
    RDZV_PORT,
    MAX_RESTARTS,
    GPUS_PER_NODE,
    PG_TIMEOUT,
    METRICS_PORT,
    TORCH_DEFAULTS,
    WORKER_START,
)


def topology_from_args(args: argparse.Namespace) -> Topology:
    return Topology(
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        backend=args.backend,
        rdzv_backend=args.rdzv_backend or recovery.DEFAULT_TORCHRUN_RDZV,  # lab.recovery.choose settles it
        rdzv_port=args.rdzv_port,
        max_restarts=args.max_restarts,
        pg_timeout_s=args.pg_timeout,
        torch_defaults=args.torch_defaults,
        worker_start=args.worker_start,
        gpus_per_node=args.gpus_per_node,
        agent_metrics_port=args.metrics_port,
        rank_metrics_port=args.metrics_port + 100 if args.metrics_port else 0,
    )


def run_dir_from_args(args: argparse.Namespace) -> RunDir:
    """The run dir named by --run-dir / $LAB_RUN_DIR / the default, refused if it is not the lab's to use."""
    run_dir = RunDir(args.run_dir)
    run_dir.check()
    return run_dir
