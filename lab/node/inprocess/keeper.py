"""One node of an in-process-recovery job: it starts the node's ranks and replaces a lost one.

    python -m lab.node.inprocess.keeper --store HOST:PORT --node-rank N --nodes M --nproc-per-node P
        [--max-replacements K] [--return-timeout S] [--events-dir DIR] [--preload] -- SCRIPT [ARGS...]

What torchrun's agent is to a restart, the keeper is to in-process recovery (`lab up
--recovery in-process` runs one per node, lab.node.launch). Node 0's keeper hosts the job's
TCPStore. Each keeper starts its P ranks and one warm spare (lab.node.inprocess.rank: the script's
process, with torch imported, waiting for an assignment; forked from a server with torch loaded
under --preload, lab.node.inprocess.forked), and waits on them:
- a rank that dies: the keeper bumps the job's generation, gives the rank's place to the spare,
  opens the new generation (`genG/open`, which the survivors wait on: lab.inprocess.api) and
  starts the next spare (a spare that dies while it waits is replaced too);
- a frozen rank (SIGSTOP, stuck holding the GIL) stops beating down its pipe
  (lab.inprocess.heartbeat): SIGKILLed, then replaced (a lab.rank_frozen event);
- a rank gloo stranded in a collective ends itself (heartbeat.STRANDED_EXIT): replaced (a
  lab.rank_stranded event);
- a rank whose collective timed out (heartbeat.TIMED_OUT_EXIT: a peer hangs in Python), or that
  regrouped where no rank held the state (NO_STATE_EXIT): the keepers restart every rank from
  the script's checkpoint (lab.node.inprocess.rounds; a lab.group_restarted event);
- a rank whose join waited the join timeout for ranks that never came (ABSENT_EXIT: node 0
  started again alone) ends the job, as torchrun's rendezvous would.
Each counts against the node's budget of K replacements; one more ends the job (exit 1). It
ends with 0 once every rank it holds finished, and stops its children when stopped (saying it
left) or dead (PR_SET_PDEATHSIG). One that loses the store or no longer hears another node's
keeper (lab.node.inprocess.roll_call) says so in one line, stops its children and exits 1. It
records its ranks' pids where the faults look for them (LAB_WORKERS_FILE), generation as restart.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from lab.health.events import AgentEvent, append_agent_record, node_name
from lab.inprocess import heartbeat
from lab.node import worker_record
from lab.node.inprocess.fallback import Fallback
from lab.node.inprocess.forked import ForkedRank, start_server
from lab.node.inprocess.node_health import NodeHealth
from lab.node.inprocess.roll_call import KeeperLost, RollCall
from lab.node.inprocess.rounds import Rounds
from lab.nodeenv import NodeEnv
from lab.procs import Child, Stopped, die_with_parent, stop_children, stop_on


class Keeper(Fallback):
    def __init__(self, args: argparse.Namespace, store):
        self.args, self.store = args, store
        self.world_size = args.nodes * args.nproc_per_node
        self.ranks: dict[int, Child] = {}  # rank -> its process
        self.spare: tuple[str, Child] | None = None
        self.spares_started = self.replacements = self.generation = 0
        # Spare keys of its own: named as a lost keeper of this node named its spares, a new spare
        # took an old assignment and ran as a rank of a generation long gone, on that rank's port.
        self.incarnation = int(store.add(f"keeper/node{args.node_rank}/incarnations", 1)) if store is not None else 1
        wire = NodeEnv.parse()
        self.workers_file = wire.workers_file
        self.events_dir = args.events_dir or wire.events_dir  # the node's, where --events-dir is not given
        self.ear = heartbeat.Ear()
        self.frozen_after_s = heartbeat.frozen_after(wire.pg_timeout_s or 60)
        # A keeper is a light loop that never waits on a collective: it is judged sooner than a rank.
        silent_s = min(5.0, self.frozen_after_s)
        self.roll = RollCall(store, args.node_rank, args.nodes, silent_s) if store is not None else None
        self.rounds = Rounds(store)
        self.health = NodeHealth(args.max_replacements)  # its agent metrics, where the lab asked for them
        self.timed_out: set[int] = set()  # ranks that left asking for a round (heartbeat.ROUND_FOR), until it comes

    def _start(self, extra: list[str], env: dict[str, str]) -> Child:
        read, write = self.ear.new_pipe()
        wire = NodeEnv(
            inprocess_store=self.args.store,
            events_dir=self.args.events_dir,
            inprocess_beat_fd=write,
            inprocess_join_timeout_s=self.args.return_timeout,  # as long as a rendezvous waits for its nodes
        )
        env = {**os.environ, **env, **wire.render(), "WORLD_SIZE": str(self.world_size)}
        env.update(LOCAL_WORLD_SIZE=str(self.args.nproc_per_node), GROUP_RANK=str(self.args.node_rank))
        if self.args.preload:  # forked with torch loaded (lab.node.inprocess.forked); it closes write
            proc: Child = ForkedRank([*extra, *self.args.script], env, write)
        else:
            argv = [sys.executable, "-m", "lab.node.inprocess.rank", *extra, *self.args.script]
            try:
                proc = subprocess.Popen(argv, env=env, preexec_fn=die_with_parent, pass_fds=(write,))
            finally:
                os.close(write)
        self.ear.listen(proc.pid, read)
        return proc

    def start(self) -> None:
        if self.rejoin():  # back after its node was lost: its ranks start in the round it asked for
            self._start_spare()
            return
        for local_rank in range(self.args.nproc_per_node):
            rank = self.args.node_rank * self.args.nproc_per_node + local_rank
            self.ranks[rank] = self._start([], {"RANK": str(rank), "LOCAL_RANK": str(local_rank)})
        self._start_spare()
        self._record()
        self.health.state("HEALTHY")

    def _start_spare(self) -> None:
        key = f"spare/node{self.args.node_rank}/{self.incarnation}/{self.spares_started}"
        self.spares_started += 1
        self.spare = (key, self._start(["--spare", key], {}))

    def _record(self) -> None:
        """The ranks' pids, where the lab's faults find them (lab.node.worker_record)."""
        if self.workers_file:
            by_local = {rank % self.args.nproc_per_node: proc.pid for rank, proc in self.ranks.items()}
            worker_record.write(Path(self.workers_file), self.generation, by_local)

    def replace(self, rank: int, code: int) -> None:
        """Give rank's place to the warm spare and open the next generation."""
        assert self.spare is not None
        key, proc = self.spare
        self.ear.forget(self.ranks[rank].pid)
        self.replacements += 1
        self.health.restarts(self.replacements)
        self.generation = self.store.add("generation", 1)
        self.store.set(key, f"{rank},{rank % self.args.nproc_per_node},{self.generation}")
        self.store.set(f"gen{self.generation}/open", b"1")
        self.ranks[rank] = proc
        self._record()
        print(
            f"[keeper node{self.args.node_rank}] rank {rank} exited ({code}); its spare takes over in "
            f"generation {self.generation} (replacement {self.replacements} of {self.args.max_replacements})",
            flush=True,
        )
        self._start_spare()

    def _end_a_frozen_rank(self, done: set[int]) -> None:
        """SIGKILL a rank whose heartbeat has been silent frozen_after_s (lab.inprocess.heartbeat):
        its death closes its connections, and its place goes to the spare like any lost rank's."""
        for rank, proc in self.ranks.items():
            silent = self.ear.silent_for(proc.pid)
            if rank in done or silent < self.frozen_after_s or proc.poll() is not None:
                continue
            proc.kill()
            proc.wait()
            print(
                f"[keeper node{self.args.node_rank}] rank {rank} sent no heartbeat for {silent:.1f} s (frozen: "
                f"stopped, or stuck holding the GIL): SIGKILLed, so its peers stop waiting on it",
                flush=True,
            )
            self._record_event(AgentEvent.RANK_FROZEN, rank=rank, silent_s=round(silent, 3))

    def _record_event(self, name: str, **metadata) -> None:
        """An agent record (lab.health.events.read_agent_events), where torchrun's agent leaves them."""
        if self.events_dir:
            node = node_name()
            append_agent_record(
                Path(self.events_dir) / f"agent-{node}.jsonl", node, {"name": name, "metadata": metadata}
            )

    def run(self) -> int:
        self.start()
        done: set[int] = set()
        while not self.ranks or len(done) < len(self.ranks):  # none: a keeper back, awaiting its round
            for rank, proc in list(self.ranks.items()):
                code = None if rank in done else proc.poll()
                if code is None:
                    continue
                self.health.exited(proc.pid, code)
                if code == 0:
                    done.add(rank)
                elif not self._exited(rank, code):
                    self.stop()
                    return 1
            self._end_a_frozen_rank(done)
            heard = self.rounds.heard() if self.store is not None else None
            if heard:
                if not self.restart_all(heard):
                    return 1
                done.clear()
            try:
                if self.roll:
                    self.roll.tick()
            except KeeperLost as lost:  # its node lost whole: wait for it, then restart from the checkpoint
                if not self.outlive(lost):
                    return 1
                done.clear()
            if self.spare and self.spare[1].poll() is not None:  # a spare that died waiting: a new one
                print(f"[keeper node{self.args.node_rank}] spare {self.spare[0]} exited ({self.spare[1].returncode})")
                self.ear.forget(self.spare[1].pid)
                self._start_spare()
            time.sleep(0.005)
        if self.roll:
            self.roll.finish()
        self.stop()
        return 0

    def _exited(self, rank: int, code: int) -> bool:
        """Act on a rank that exited non-zero (each status says why on the rank's own line); False
        when the job ends here."""
        tag = f"[keeper node{self.args.node_rank}]"
        if code == heartbeat.ABSENT_EXIT:  # nothing this node holds can bring its peers' nodes
            print(f"{tag} rank {rank}'s peers never came: the job ends", flush=True)
            return False
        if code in heartbeat.ROUND_FOR:  # no spare can help: the whole group restarts
            if rank not in self.timed_out:
                self.timed_out.add(rank)
                self.rounds.ask(heartbeat.ROUND_FOR[code].format(rank=rank))
            return True
        if code == heartbeat.STRANDED_EXIT:
            self._record_event(AgentEvent.RANK_STRANDED, rank=rank)
        if self.replacements < self.args.max_replacements:
            self.replace(rank, code)
            return True
        print(
            f"{tag} rank {rank} exited ({code}) and this node's {self.args.max_replacements} replacement(s) are "
            "spent: the job ends",
            flush=True,
        )
        return False

    def stop(self, grace_s: float = 5.0) -> None:
        """Every child stopped, SIGKILLed after grace_s (lab.procs.stop_children)."""
        stop_children([*self.ranks.values(), *([self.spare[1]] if self.spare else [])], grace_s)


def run_until_stopped(keeper: Keeper) -> int:
    """The keeper's exit status: 0 when its ranks finished, 128 + the signal that stopped it."""
    # The stop runs here, not in the handler (lab.procs.stop_on says why): a keeper that stopped
    # its children from the handler once outlived its SIGTERM, a bench trial's 60 s.
    from torch.distributed import DistError  # what a store call raises once the store is gone

    stop_on(signal.SIGTERM, signal.SIGINT)
    try:
        code = keeper.run()
        keeper.health.state("SUCCEEDED" if code == 0 else "FAILED")
        return code
    except Stopped as stopped:
        keeper.stop()
        if keeper.roll:
            with contextlib.suppress(DistError):  # node 0's own keeper stopped: the store went with it
                keeper.roll.leave()
        return 128 + stopped.signum
    except KeeperLost as lost:  # a second node lost while this keeper waited for the first
        print(
            f"[keeper node{keeper.args.node_rank}] node {lost.node}'s keeper is gone too (no beat for "
            f"{lost.silent_s:.1f} s): the job ends",
            flush=True,
        )
        keeper._record_event(AgentEvent.KEEPER_LOST, node=lost.node, silent_s=round(lost.silent_s, 3))
        keeper.stop()
        return 1
    except DistError as lost:  # a replacement needs the store, and node 0's keeper, its host, is gone
        said = (str(lost).strip().splitlines() or [type(lost).__name__])[0]
        print(
            f"[keeper node{keeper.args.node_rank}] the job's store at {keeper.args.store} cannot be reached "
            f"(node 0's keeper hosts it): {said}; this node's ranks stop",
            flush=True,
        )
        keeper.stop()
        return 1


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="lab.node.inprocess.keeper")
    p.add_argument("--store", required=True, help="HOST:PORT; node 0 hosts it")
    p.add_argument("--node-rank", type=int, required=True)
    p.add_argument("--nodes", type=int, required=True)
    p.add_argument("--nproc-per-node", type=int, default=2)
    p.add_argument("--max-replacements", type=int, default=3, help="ranks this node may replace (the job's budget)")
    back = "seconds to wait for a lost node's keeper to come back before the job ends"
    p.add_argument("--return-timeout", type=float, default=120.0, help=back)
    p.add_argument("--events-dir")
    forked = "fork ranks and spares from a server that imported torch (lab.node.inprocess.forked)"
    p.add_argument("--preload", action="store_true", help=forked)
    p.add_argument("script", nargs=argparse.REMAINDER, help="-- then the script and its arguments")
    args = p.parse_args(argv)
    args.script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not args.script:
        p.error("no script given (-- SCRIPT [ARGS...])")
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    import torch.distributed as dist

    if args.preload:  # now: torch is loaded, and no thread is running yet (the store starts some)
        start_server()
    host, _, port = args.store.rpartition(":")
    store = dist.TCPStore(
        host, int(port), is_master=args.node_rank == 0, timeout=timedelta(seconds=120), wait_for_workers=False
    )
    sys.exit(run_until_stopped(Keeper(args, store)))


if __name__ == "__main__":
    main()
