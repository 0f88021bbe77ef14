"""After a job that failed to connect (`lab up`, `lab run`): `lab doctor` on hosts like the job's,
brought up beside them in a run dir of their own (the job's stay as they are, for inspection),
its findings kept in the job's run dir for the card to quote (lab.why.doctor_note)."""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

from lab import files, runtimes
from lab.doctor.examine import examine
from lab.errors import LabError
from lab.rundir import RunDir
from lab.runtimes.monitored import MONITORING
from lab.runtimes.ports import free_port
from lab.topology import Topology
from lab.why import doctor_note
from lab.why.failure_card import Card


def cannot_connect(card: Card) -> bool:
    """The first failure, or one that followed, says the nodes could not meet."""
    failures = [f for f in [card.first, *card.then] if f is not None]
    return any(doctor_note.CANNOT_CONNECT.search(f.error or "") for f in failures)


def diagnose(args: argparse.Namespace, run_dir: Path, topology: Topology, card: Card, log=print) -> None:
    """Run the doctor when the card says the nodes could not meet and the runtime is one it
    probes; add what it found to the card and keep it beside the job's evidence. The card comes
    first: a doctor that cannot run (no hosts to be had, a full disk) says so in one line and
    leaves the card as it was, never in its place."""
    runtime_class = runtimes.runtime_class(args.runtime)
    if not cannot_connect(card) or not runtime_class.DOCTOR:
        return
    if runtime_class.MACHINES_ELSEWHERE:  # its probes would meet in a temp dir only this machine has
        command = f"lab doctor --runtime {args.runtime}"
        card.notes.insert(0, f"`{command}` with the job's flags checks what stops nodes meeting")
        return
    log("the job's nodes could not connect: running lab doctor on hosts like theirs")
    top = Path(tempfile.mkdtemp(prefix="tlab-doctor-"))
    try:
        like_args = argparse.Namespace(**vars(args))
        setattr(like_args, MONITORING.name, "off")  # the doctor starts no Prometheus
        runtime = runtimes.from_args(like_args, RunDir(top / "run"), log=lambda line: None)
        like = topology.replace(rdzv_port=free_port(), agent_metrics_port=0, rank_metrics_port=0)
        found = [f.line() for f in examine(runtime, like, lambda line: None).found]
        files.write_text(run_dir / doctor_note.DOCTOR_FILE, json.dumps({"found": found}) + "\n")
    except (LabError, OSError) as e:
        log(f"lab doctor could not run after the failure: {e}")
        return
    finally:
        shutil.rmtree(top, ignore_errors=True)
    card.notes.insert(0, doctor_note.note(found))
