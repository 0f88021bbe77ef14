"""The keeper's side of in-process recovery's fallback: restart every rank from the checkpoint.

Two faults leave a spare nothing to take over (lab.node.inprocess.rounds opens the rounds):
- a rank hangs in Python, still beating: its peers' collectives time out, and each keeper
  whose rank left with heartbeat.TIMED_OUT_EXIT asks for a round;
- a node is lost whole, its keeper with its ranks (lab.node.inprocess.roll_call hears the silence):
  the other keepers stop their ranks, which have no group to rejoin, and wait for the node's
  keeper to come back (a runtime or a drill starts it again) and ask for a round; a keeper
  that starts in a job already under way (its node's beat is in the store) does so at once.
  One that beats again was only cut off or stalled (a partition: each side judged the other
  lost): the keeper waiting for it asks for the round itself.
In a round each keeper stops every rank it holds and starts them afresh in the round's
generation, as at the job's start: they load the script's checkpoint. Each round counts as one
replacement of the node's budget and is recorded as a lab.group_restarted agent event.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from lab.health.events import AgentEvent
from lab.inprocess import heartbeat
from lab.node.inprocess.node_health import NodeHealth
from lab.node.inprocess.roll_call import KeeperLost, RollCall
from lab.node.inprocess.rounds import Round, Rounds
from lab.procs import Child


class Fallback:
    """Mixed into lab.node.inprocess.keeper.Keeper, whose children, spare and budget it restarts."""

    # The keeper's, which this part of it uses.
    args: argparse.Namespace
    store: Any
    ranks: dict[int, Child]
    spare: tuple[str, Child] | None
    ear: heartbeat.Ear
    roll: RollCall | None
    rounds: Rounds
    replacements: int
    generation: int
    timed_out: set[int]
    health: NodeHealth
    _start: Callable[[list[str], dict[str, str]], Child]
    _record: Callable[[], None]
    _start_spare: Callable[[], None]
    _record_event: Callable[..., None]
    stop: Callable[..., None]

    def restart_all(self, heard: Round) -> bool:
        """Every rank of this node stopped and started afresh in the round's generation, to
        load the script's checkpoint. False (the job ends) when this node's budget is spent."""
        tag = f"[keeper node{self.args.node_rank}]"
        if self._spent(heard.why):
            return False
        self.replacements += 1
        self.health.restarts(self.replacements)
        self._kill_ranks()
        self.generation = heard.generation
        assert self.spare is not None
        key, spare = self.spare
        for local_rank in range(self.args.nproc_per_node):
            rank = self.args.node_rank * self.args.nproc_per_node + local_rank
            if local_rank == 0:  # the warm spare takes the first place; the others start cold
                self.store.set(key, f"{rank},{local_rank},{heard.generation},fresh")
                self.ranks[rank] = spare
            else:
                self.ranks[rank] = self._start([], {"RANK": str(rank), "LOCAL_RANK": str(local_rank)})
        self._record()
        self._start_spare()
        print(
            f"{tag} {heard.why}: this node's ranks restart from the checkpoint in generation {heard.generation} "
            f"(round {heard.number}; replacement {self.replacements} of {self.args.max_replacements})",
            flush=True,
        )
        self._record_event(AgentEvent.GROUP_RESTARTED, round=heard.number, generation=heard.generation, why=heard.why)
        return True

    def _spent(self, why: str) -> bool:
        """True, once it has said so and stopped its children, when this node's budget is spent."""
        if self.replacements < self.args.max_replacements:
            return False
        print(
            f"[keeper node{self.args.node_rank}] {why}; this node's {self.args.max_replacements} replacement(s) "
            "are spent: the job ends"
        )
        self.stop()
        return True

    def _kill_ranks(self) -> None:
        for proc in self.ranks.values():
            if proc.poll() is None:
                proc.kill()  # a hung one with the rest: a restart starts every rank afresh
            proc.wait()
            self.ear.forget(proc.pid)
        self.ranks.clear()
        self.timed_out.clear()

    def outlive(self, lost: KeeperLost) -> bool:
        """A node lost whole: stop this node's ranks and wait --return-timeout for its keeper to
        come back and open a round; then restart from the checkpoint. False (the job ends): the
        budget is spent, or it did not come back."""
        tag = f"[keeper node{self.args.node_rank}]"
        self._record_event(AgentEvent.KEEPER_LOST, node=lost.node, silent_s=round(lost.silent_s, 3))
        gone = f"node {lost.node}'s keeper is gone (no beat for {lost.silent_s:.1f} s): its ranks died with it"
        if self._spent(gone):
            return False
        wait_s = self.args.return_timeout
        print(f"{tag} {gone}; this node's ranks stop and wait {wait_s:g} s for it to come back", flush=True)
        self._kill_ranks()
        assert self.roll is not None
        self.roll.away(lost)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            heard = self.rounds.heard(waiting=True)
            if heard:
                return self.restart_all(heard)
            if self.roll.beats_again(lost):  # a partition healed, or a stall ended: it was never lost, and
                # judged this node lost in its turn, so each waited for the other to come back, for ever
                # (`lab chaos --mix partition-node`). Its ranks may be stopped too: every rank restarts.
                self.rounds.ask(f"node {lost.node}'s keeper beats again after a silence (cut off or stalled)")
            self.roll.tick()  # another node lost meanwhile: the job ends (lab.node.inprocess.keeper)
            time.sleep(0.05)
        print(f"{tag} node {lost.node}'s keeper did not come back in {wait_s:g} s: the job ends", flush=True)
        self.stop()
        return False

    def rejoin(self) -> bool:
        """At start: True when this keeper's node was in the job before (its beat is in the store),
        so it comes back after the node was lost: it asks for a round instead of starting its
        ranks in the first generation, and they start in the round's."""
        beat = RollCall.key(self.args.node_rank, "beat")
        if self.store is None or not self.store.check([beat]):
            return False
        # The rounds before it left are not its. Read before its beat moves: a keeper waiting for it
        # asks for a round once it beats again, and the two asks must name the same round.
        self.rounds.carried_out = int(self.store.add("rounds", 0))
        if self.roll:  # its count goes on from its last one, and moves before it asks: the others
            # hear the round and its beat together (a keeper that heard the round first, then its
            # predecessor's silence, once stopped its ranks to wait for a round already asked).
            self.roll.back()
            self.roll.count = int(self.store.get(beat))
            self.roll.beat()
        self.rounds.ask(f"node {self.args.node_rank}'s keeper came back after the node was lost")
        return True
