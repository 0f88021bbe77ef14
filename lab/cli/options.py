"""Options shared by every subcommand that starts a job (`lab up`, `lab run`)."""

from __future__ import annotations

import argparse

from lab.rundir import RunDir
from lab.runtimes import RUNTIME_NAMES
from lab.runtimes.local import HOST_MODES, PROMETHEUS_MODES
from lab.topology import BACKENDS, RDZV_BACKENDS, WORKER_STARTS, Topology


def add_run_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run-dir", help="where the lab keeps its state: a new or empty dir, or one the lab made "
                                          "(default: $LAB_RUN_DIR, else $XDG_RUNTIME_DIR/torchrun-lab or "
                                          "/tmp/torchrun-lab-<uid>)")


def port(text: str) -> int:
    """A TCP port, 1-65535 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 1-65535, got {value}")
    return value


def port_or_zero(text: str) -> int:
    """A TCP port, or 0 for none."""
    return 0 if text.strip() == "0" else port(text)


def add_topology_options(parser: argparse.ArgumentParser, worker_start: str = "auto") -> None:
    defaults = Topology()
    g = parser.add_argument_group("topology")
    g.add_argument("--nodes", type=int, default=defaults.nodes, help="number of hosts (default %(default)s)")
    g.add_argument("--nproc-per-node", type=int, default=defaults.nproc_per_node, help="workers per host (default %(default)s)")
    g.add_argument("--backend", choices=BACKENDS, default=defaults.backend)
    g.add_argument("--rdzv-backend", choices=RDZV_BACKENDS, default=defaults.rdzv_backend)
    g.add_argument("--rdzv-port", type=port, default=defaults.rdzv_port)
    g.add_argument("--max-restarts", type=int, default=defaults.max_restarts)
    g.add_argument("--gpus-per-node", type=int, default=None, metavar="N",
                   help="GPUs each node uses; nodes sharing a machine get disjoint ones (default: one per "
                        "worker with nccl, none with gloo)")
    g.add_argument("--pg-timeout", type=int, default=defaults.pg_timeout_s, metavar="SECONDS",
                   help="collective timeout in the workloads (default %(default)s; gloo's own is 1800)")
    g.add_argument("--metrics-port", type=port_or_zero, default=defaults.agent_metrics_port, metavar="PORT",
                   help="node i's agent exporter serves on PORT+i, rank r's on PORT+100+r; 0: no exporters")
    g.add_argument("--torch-defaults", action="store_true",
                   help="leave out the lab's restart workaround (pytorch/pytorch#135712) and worker preloading")
    g.add_argument("--worker-start", choices=WORKER_STARTS, default=worker_start,
                   help="preload: workers fork from a server that imported torch once per node (torchrun's "
                        "--run-path --start-method=forkserver); spawn: torchrun's default, a fresh interpreter "
                        "per worker; auto: preload unless --torch-defaults (default %(default)s)")
    r = parser.add_argument_group("runtime")
    r.add_argument("--runtime", choices=RUNTIME_NAMES, default="auto")
    r.add_argument("--hosts", choices=HOST_MODES, default="auto",
                   help="local runtime: netns hosts (root) or processes on loopback (default: netns when possible)")
    r.add_argument("--prometheus", choices=PROMETHEUS_MODES, default="auto",
                   help="start a Prometheus server scraping every rank (auto: when installed)")
    r.add_argument("--prometheus-port", type=port, default=None,
                   help="where the lab's Prometheus serves (default: 9090, or the next free port)")
    r.add_argument("--ray-address", metavar="auto|HOST:PORT",
                   help="ray runtime: the Ray cluster to place the nodes on, one per machine")
    r.add_argument("--image", help="docker runtime: the node image (default: $LAB_IMAGE or torchrun-lab:cpu)")
    r.add_argument("--context", help="k8s runtime: the kubectl context (default: the current one)")
    r.add_argument("--namespace", default="default", help="k8s runtime: the namespace (default %(default)s)")
    r.add_argument("--overlay", choices=("cpu-gloo", "cuda-nccl", "elastic", "monitoring", "chaos"),
                   default="cpu-gloo", help="k8s runtime: which k8s/overlays/ to apply (default %(default)s)")
    r.add_argument("--dry-run", action="store_true", help="print each node's command and environment; start nothing")
    add_run_dir_option(parser)


def topology_from_args(args: argparse.Namespace) -> Topology:
    return Topology(
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        backend=args.backend,
        rdzv_backend=args.rdzv_backend,
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
