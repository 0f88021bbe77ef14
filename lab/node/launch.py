"""A node's entry point: torchrun itself, plus the environment the lab needs, set loudly.

    python -m lab.node.launch [--env=NAME=VALUE ...] [--torch-defaults] <torchrun flags> SCRIPT [ARGS...]

Everything after the lab's own leading flags goes unchanged to torchrun's `main`
(`torch.distributed.run`). Before that, each variable the lab needs is set only if
you did not set it yourself: a variable it sets is logged, and one you set to
something else is kept, with a warning that names both values.

The restart workaround (pytorch/pytorch#135712): since torch 2.4 the agent shares
its rendezvous TCPStore with the workers. After a worker dies and the group
restarts, the new workers read the previous round's gloo addresses from that
store and fail in `connectFullMesh`, so `--max-restarts` never recovers.
`TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1` gives every round a fresh store and the
restart works. `--torch-defaults` leaves it unset, to show the failure.

`--preload-workers` makes restarts (and start-up) faster: see lab/node/preload.py.
`--in-process` runs the node's keeper (lab.node.inprocess.keeper) instead of torchrun: the rest of
the command line is the keeper's.

Three more things make a restart faster, the second printed when it applies:

- The agent formats a worker's failure without importing torch._dynamo. torch's log
  formatter (TorchLogsFormatter) imports it the first time a torch logger formats an
  exception, and torchelastic logs every worker failure with its exception: 0.7 s of every
  first restart, spent between seeing the failure and acting on it (lab/node/torch_log_format.py).
- `--rdzv-backend=lab` selects the lab's own rendezvous for fixed-size jobs, registered
  here through torch's registry for out-of-tree backends (lab/node/fast_rendezvous.py),
  and a 5 s SIGTERM-to-SIGKILL wait before a restart instead of torch's 30 s
  (lab/node/stop_grace.py).
- The agent (or keeper) ends without the interpreter's teardown, whatever its exit status
  (lab/node/quick_exit.py): a job started again after a preemption waits for it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from lab.node.quick_exit import run_and_exit_now
from lab.nodeenv import NodeEnv

RESTART_WORKAROUND = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
# The Flight Recorder's ring of recent collectives (gloo records too in 2.13), read by hang
# forensics (lab.health.hang_dump). Off by default in torch; a few KB here.
FLIGHT_RECORDER = {"TORCH_FR_BUFFER_SIZE": "200"}


@dataclass
class LabFlags:
    env: dict[str, str] = field(default_factory=dict)
    torch_defaults: bool = False
    preload_workers: bool = False
    in_process: bool = False  # run lab.node.inprocess.keeper, not torchrun: the rest is the keeper's argv


def split_lab_flags(argv: list[str]) -> tuple[LabFlags, list[str]]:
    """Take the lab's leading flags off argv: (the lab's flags, torchrun's argv)."""
    flags = LabFlags()
    env = flags.env
    rest = list(argv)
    while rest:
        flag = rest[0]
        if flag == "--torch-defaults":
            flags.torch_defaults = True
        elif flag == "--preload-workers":
            flags.preload_workers = True
        elif flag == "--in-process":
            flags.in_process = True
        elif flag.startswith("--env="):
            name, sep, value = flag[len("--env=") :].partition("=")
            if not name or not sep:
                raise SystemExit(f"lab.node.launch: error: --env expects NAME=VALUE, got {flag!r}")
            env[name] = value
        else:
            break
        rest.pop(0)
    return flags, rest


# The node's temp dir is the lab's, whatever the user's shell says: torchelastic and
# multiprocessing leave files there (a killed worker's error file, the fork server's socket)
# that `lab down` removes with it; in the user's TMPDIR they would stay.
LAB_OWNED = ("TMPDIR",)


def apply_env(wanted: Mapping[str, str], environ: MutableMapping[str, str], log=print) -> dict[str, str]:
    """Set each wanted variable the user left unset; keep the user's value otherwise, except
    for LAB_OWNED ones, which the lab replaces.

    Returns the variables actually set. Never silent: every decision is logged.
    """
    applied = {}
    for name, value in wanted.items():
        current = environ.get(name)
        if current is None or (name in LAB_OWNED and current != value):
            environ[name] = value
            applied[name] = value
            mine = f" (yours, {current}, is the lab's to choose on a node)" if current is not None else ""
            log(f"[lab.node.launch] setting {name}={value}{mine}")
        elif current != value:
            log(f"[lab.node.launch] WARNING: keeping your {name}={current} (the lab would set {value})")
    return applied


def lab_environment(extra: Mapping[str, str], torch_defaults: bool) -> dict[str, str]:
    wanted = {**FLIGHT_RECORDER, **({} if torch_defaults else RESTART_WORKAROUND)}
    wanted.update(extra)
    workers_file = NodeEnv.parse(wanted).workers_file
    if wanted.get("TORCHELASTIC_ENABLE_FILE_TIMER") == "1" and workers_file:
        # The watchdog's FIFO in the node's own dir, not torch's default /tmp/watchdog_timer_<uuid>.
        wanted.setdefault("TORCHELASTIC_TIMER_FILE", os.path.join(os.path.dirname(workers_file), "watchdog.fifo"))
    return wanted


def main(argv: list[str] | None = None) -> None:
    flags, torchrun_argv = split_lab_flags(sys.argv[1:] if argv is None else argv)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    apply_env(lab_environment(flags.env, flags.torch_defaults), os.environ, log)
    if flags.torch_defaults:
        log(
            "[lab.node.launch] --torch-defaults: restarts reuse the shared rendezvous store "
            "(pytorch/pytorch#135712); expect a restarted group to fail in connectFullMesh"
        )
    if flags.in_process:
        from lab.node.preload import before_torch

        before_torch(torchrun_argv)  # the keeper's ranks get torchrun's 1 thread each (its flags say how many)
        from lab.node.inprocess import keeper

        log(
            "[lab.node.launch] recovery: in-process (lab/node/inprocess/keeper.py): a lost rank's place goes to a warm "
            "spare that takes its state from a peer; the other ranks stay"
        )
        run_and_exit_now(lambda: keeper.main(torchrun_argv))

    if flags.preload_workers:
        from lab.node.preload import before_torch

        before_torch(torchrun_argv)
    # Imported late: torch takes seconds to import and the flags above need none of it.
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main
    from torch.distributed.run import parse_args

    from lab.node import restart_budget, torch_log_format

    torch_log_format.install()
    install_rendezvous(parse_args(torchrun_argv).rdzv_backend, flags.torch_defaults, log)
    if flags.preload_workers:
        from lab.node.preload import preload_workers

        preload_workers(torchrun_argv, log)
    workers_file = NodeEnv.parse().workers_file
    if workers_file:
        from lab.node import worker_record

        worker_record.install(workers_file)
    start_agent_exporter(torchrun_argv, log)
    budget = None
    events_dir = NodeEnv.parse().events_dir
    if events_dir and not flags.torch_defaults:
        budget = restart_budget.install(events_dir, parse_args(torchrun_argv).max_restarts)

    def agent() -> None:
        try:
            torchrun_main(torchrun_argv)
        except ChildFailedError as e:
            restart_budget.exit_if_crash_loop(budget, e)
            raise

    run_and_exit_now(agent)


def install_rendezvous(backend: str, torch_defaults: bool, log) -> None:
    """The lab's rendezvous backend registered; a lost store forgiven while training goes on
    (not with --torch-defaults: torch's own ends every agent at its next look)."""
    from lab import recovery
    from lab.node import exit_barrier, fast_rendezvous, stop_grace, store_loss

    fast_rendezvous.register()
    if not torch_defaults:
        store_loss.install()
    if backend == fast_rendezvous.NAME:
        stop_grace.install()
        exit_barrier.install()  # a preempted agent still counts in: the others end with their work
        log(
            "[lab.node.launch] rendezvous: the lab's backend for fixed-size jobs (lab/node/fast_rendezvous.py): "
            "agents wake on the store instead of torch's 1 s poll; node 0 hosts each round's worker store; "
            f"before a restart, a worker alive {recovery.RESTART_STOP_GRACE_S} s after SIGTERM is SIGKILLed "
            f"(torch waits {recovery.TORCH_STOP_GRACE_S} s; lab/node/stop_grace.py)"
        )


def start_agent_exporter(torchrun_argv: list[str], log) -> None:
    """Record the agent's events (LAB_EVENTS_DIR) and export its health (LAB_AGENT_METRICS_PORT)."""
    from pathlib import Path

    from torch.distributed.run import parse_args

    from lab.health import agent_exporter
    from lab.health.events import node_name
    from lab.health.rank_exporter import ExporterPortError, register_target

    wire = NodeEnv.parse()
    port = wire.agent_metrics_port or 0
    node = node_name()  # the lab's, where it started us: loopback nodes all share one hostname
    events_dir = wire.events_dir
    metrics = (
        agent_exporter.AgentMetrics(node=node, max_restarts=parse_args(torchrun_argv).max_restarts) if port else None
    )
    events = Path(events_dir) / f"agent-{node}.jsonl" if events_dir else None
    agent_exporter.install(metrics, events, node)
    if wire.net_probe and events_dir:
        from lab.health import net_probe

        net_probe.start(wire.net_probe, Path(events_dir), node, metrics.net_rtt() if metrics else None)
    if metrics is None:
        return
    try:
        agent_exporter.serve(metrics, port)
    except ExporterPortError as e:
        raise SystemExit(f"lab.node.launch: error: {e}") from None
    if wire.targets_dir:
        register_target(wire.targets_dir, f"agent-{node}", port, {"node": node})
    log(f"[lab.node.launch] agent metrics on :{port}/metrics")


if __name__ == "__main__":
    main()
