"""What `lab why` says about one failed job, as data: the first failure, the ranks that
followed it, and what else was found (a straggler, a slow network, a lost store).

lab.why.card draws it from a run dir; this module only holds it and writes it out (text, JSON).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lab.health.stragglers import SlowNetwork, Straggler
from lab.why.bad_checkpoint import SetAside
from lab.why.disk_full import FailedWrite
from lab.why.lost_store import StoreLoss


@dataclass
class RankFailure:
    rank: int
    node: str
    local_rank: int | None
    time: float  # when its agent saw it (a raised exception: when the rank recorded it, if it did)
    exit_code: int | None
    pid: int | None = None
    error: str = ""  # "ValueError: bad batch", from its traceback or its event log
    where: str = ""  # file:line, the deepest frame outside torch and the lab
    how: str = ""  # "killed by SIGKILL", "raised ValueError", "exited with status 3", ...
    consequence: bool = False  # it failed because a peer did
    last_step: int | None = None


@dataclass
class Card:
    first: RankFailure | None
    then: list[RankFailure] = field(default_factory=list)
    rounds: int = 0  # how many times an agent saw its group fail
    notes: list[str] = field(default_factory=list)
    certain: bool = True  # False: `first` is only the earliest noticed of several like it
    straggler: Straggler | None = None  # the rank that slowed the others, if one did (lab.health.stragglers)
    slow_network: SlowNetwork | None = None  # the node whose network did
    store_loss: StoreLoss | None = None  # the rendezvous store, lost mid-run (lab.why.lost_store)
    failed_write: FailedWrite | None = None  # a checkpoint a rank could not write and trained on without
    set_aside: SetAside | None = None  # a damaged checkpoint a rank found on resume and resumed without

    def to_json(self) -> dict:
        return {
            "first": asdict(self.first) if self.first else None,
            "then": [asdict(f) for f in self.then],
            "rounds": self.rounds,
            "notes": self.notes,
            "certain": self.certain,
            "straggler": asdict(self.straggler) if self.straggler else None,
            "slow_network": asdict(self.slow_network) if self.slow_network else None,
            "store_loss": asdict(self.store_loss) if self.store_loss else None,
            "failed_write": asdict(self.failed_write) if self.failed_write else None,
            "set_aside": asdict(self.set_aside) if self.set_aside else None,
        }

    def text(self) -> str:
        found = (self.store_loss, self.failed_write, self.set_aside, self.straggler, self.slow_network)
        findings = "".join(f"{s.text()}\n" for s in found if s)
        if self.first is None:
            notes = "".join(f"note: {n}\n" for n in self.notes)
            return f"no rank failed: the agents recorded no failure\n{findings}{notes}"
        f = self.first
        where = f"rank {f.rank} on {f.node}" + (
            f" (local rank {f.local_rank}, pid {f.pid})" if f.local_rank is not None else ""
        )
        head = "first to stop" if f.exit_code == 0 else "first failure"
        if not self.certain:  # said first: never "first failure: rank N" when that is a guess
            candidates = sorted({f.rank, *(o.rank for o in self.then if not o.consequence)})
            which = (
                f"one of ranks {', '.join(map(str, candidates))}, which first is unknown"
                if len(candidates) > 1
                else "not certain which rank"
            )
            lines = [f"{head}: {which}; seen first: {where}: {f.how}"]
        else:
            lines = [f"{head}: {where}: {f.how}"]
        if f.error:
            lines.append(f"  {f.error}" + (f"  at {f.where}" if f.where else ""))
        if f.last_step is not None:
            lines.append(f"  its last step: {f.last_step}")
        for other in self.then:
            lines.append(
                f"then rank {other.rank} on {other.node}, {round(other.time - f.time, 1) + 0.0:+.1f} s: {other.how}"
                + (f" ({other.error[:120]})" if other.error and other.error not in other.how else "")
            )
        if self.rounds > 1:
            lines.append(f"the group failed {self.rounds} times in all (restarts)")
        lines += [f"note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n" + findings
