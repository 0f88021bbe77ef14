"""A lab node on a machine of a Ray cluster: an actor there owns it, a handle here drives it.

`MachineAgent` is a Ray actor placed on one machine (see lab.runtimes.ray_runtime). It
owns that machine's lab node as a local node (processes on that machine, its files under
the run directory) and runs every fault there: a worker kill signals a process on that
machine, a node kill kills that machine's agent and workers. `RayNode` is the `Node`
handle the driver, `lab status` and the exercise engine hold: each call goes to the
actor and its error comes back as the lab's own one-line error.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
from pathlib import Path
from typing import Any, ClassVar

from lab import files
from lab.errors import LabError
from lab.runtimes import ray_calls, ray_mirror
from lab.runtimes.base import Node
from lab.runtimes.faults import FaultUnsupported
from lab.runtimes.tempdirs import make_private_dir, remove_temp_dirs, temp_dir

ACTOR_NAMESPACE = ray_calls.ACTOR_NAMESPACE


def actor_name(lab_id: str, index: int) -> str:
    """Named by the lab id: two labs on one Ray cluster keep their own actors."""
    return f"tlab-{lab_id}-node{index}"


def recorded_actors(lab_id: str, nodes: list[dict]) -> dict[str, Any]:
    """The actors of the recorded nodes (the run dir's state) that the cluster still has, by name."""
    import ray

    found = {}
    for node in nodes:
        try:
            found[node["name"]] = ray.get_actor(actor_name(lab_id, node["index"]), namespace=ACTOR_NAMESPACE)
        except ValueError:  # gone with its machine, or never made
            continue
    return found


class MachineAgent:
    """Created with ray.remote(...)(MachineAgent) in a placement group bundle of its own.

    share_token is what the driver wrote into its run dir: a machine that does not read it
    there has a disk of its own, and the agent makes the run dir there (lab.runtimes.ray_mirror),
    unless a folder is already at that path, which it leaves alone (`where` says so)."""

    def __init__(self, run_dir: str, name: str, index: int, lab_id: str, share_token: str):
        import ray

        from lab.runtimes.local_node import LocalNode

        self.address = ray.util.get_node_ip_address()
        self.run_dir, self.lab_id = Path(run_dir), lab_id
        self.own_disk = files.read_head(self.run_dir / ray_mirror.SHARE_TOKEN, 64) != share_token.encode()
        self.found_there = self.own_disk and os.path.lexists(run_dir)
        self.made_here = self.own_disk and not self.found_there  # this machine's copy of the run dir, ours
        self.node = LocalNode(
            name=name,
            index=index,
            address=self.address,
            netns=None,
            dir=self.run_dir / "nodes" / name,
            run_dir=run_dir,
        )
        if self.made_here:
            self.run_dir.mkdir(mode=0o700, parents=True)
        if not self.found_there:
            self.node.dir.mkdir(parents=True, exist_ok=True)

    def where(self) -> dict:
        import ray

        return {
            "address": self.address,
            "hostname": socket.gethostname(),
            "machine": ray.get_runtime_context().get_node_id(),
            "own_disk": self.own_disk,
            "found_there": self.found_there,
        }

    def sees(self, path: str) -> bool:
        return os.path.isfile(path)

    def put(self, relative: str, data: bytes) -> None:
        if self.made_here:
            ray_mirror.put(self.run_dir, relative, data)

    def changes(self, known: ray_mirror.Known) -> list[tuple[str, int, bytes, int, int]]:
        return ray_mirror.changes(self.run_dir, known) if self.made_here else []

    def start(self, argv: list[str]) -> None:
        # The driver rendered argv with its own interpreter; this machine's may live elsewhere.
        make_private_dir(temp_dir(self.lab_id))  # the node's TMPDIR (see RayRuntime.node_env), on this machine
        self.node.start([sys.executable, *argv[1:]])

    def cleanup(self) -> list[str]:
        """Remove what the node left in this machine's temp dir, and the run dir its agent made
        on a disk of its own."""
        removed = remove_temp_dirs(self.lab_id)
        if self.made_here and self.run_dir.is_dir():
            shutil.rmtree(self.run_dir)  # links inside are removed, never followed
            removed.append(f"run dir {self.run_dir}")
        return removed

    def pid(self) -> int | None:
        return self.node.pid

    def call(self, method: str, args: tuple, kwargs: dict):
        return getattr(self.node, method)(*args, **kwargs)


class RayNode(Node):
    runtime_name = "ray"

    def __init__(self, actor, name: str, index: int, address: str, dir: Path):
        self.actor, self.name, self.index, self.address, self.dir = actor, name, index, address, dir
        self.mirror: ray_mirror.Mirror | None = None  # set where its machine has a disk of its own
        self.end_copied = False  # its files copied since it last ended (a drill polls its end every 0.1 s)

    def _get(self, ref):
        import ray

        try:
            return ray.get(ref, timeout=120)
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, LabError):
                raise type(e.cause)(str(e.cause)) from None
            raise
        except ray.exceptions.RayActorError:
            raise LabError(f"{self.name}'s actor is gone (its machine left the Ray cluster?)") from None

    def _call(self, method: str, *args, **kwargs):
        return self._get(self.actor.call.remote(method, args, kwargs))

    @property
    def pid(self) -> int | None:
        return self._get(self.actor.pid.remote())

    def start(self, argv: list[str]) -> None:
        self._get(self.actor.start.remote(argv))
        self.end_copied = False

    def stop(self, grace_s: float = 10.0) -> None:
        self._call("stop", grace_s=grace_s)

    def exit_code(self) -> int | None:
        code = self._call("exit_code")
        if code is None:
            self.end_copied = False  # running (again): its next end is copied once more
        elif self.mirror is not None and not self.end_copied:
            self.mirror.sync([self.name])  # its last words here before its end is: a verdict reads them
            self.end_copied = True
        return code

    # Every other fault runs on the node's own machine, as the local runtime runs it.
    def worker_pids(self) -> dict[int, int]:
        return self._call("worker_pids")

    def kill_worker(self, local_rank: int, sig: int = signal.SIGKILL) -> int:
        return self._call("kill_worker", local_rank=local_rank, sig=sig)

    def kill_node(self) -> None:
        self._call("kill_node")

    def kill_agent(self) -> int:
        return self._call("kill_agent")

    def restart(self) -> None:
        self._call("restart")
        self.end_copied = False

    def slow_worker(self, local_rank: int, stopped_fraction: float = 0.75, period_s: float = 0.2) -> int:
        return self._call("slow_worker", local_rank=local_rank, stopped_fraction=stopped_fraction, period_s=period_s)

    def unslow_worker(self) -> None:
        self._call("unslow_worker")

    def delay_restarted_workers(self, seconds: float) -> None:
        self._call("delay_restarted_workers", seconds=seconds)

    def preempt(self, grace_s: float) -> None:
        self._call("preempt", grace_s=grace_s)

    def corrupt_checkpoint(self, directory: str, mode: str = "truncate", saved: tuple = ()) -> str:
        return self._call("corrupt_checkpoint", directory=directory, mode=mode, saved=saved)

    REFUSES: ClassVar[dict[str, str]] = {
        fault: "the ray runtime cannot partition a machine: cutting its network would cut it off from Ray too "
        "(use the local runtime's netns hosts)"
        for fault in ("partition", "heal")
    }

    def partition(self) -> None:
        raise FaultUnsupported(self.REFUSES["partition"])

    def heal(self) -> None:
        raise FaultUnsupported(self.REFUSES["heal"])
