"""A drill per misconfiguration of a first multi-node run, one for each of lab.runtimes.misconfig:

    lab exercise run interface-missing
    lab exercise run firewall --bound 30
    lab exercise run interface-loopback --runtime docker

Each plants its mistake on node 1 of two hosts, runs the lesson's job there as a first run meets
it (2 x 2 ddp_train under torchrun's c10d rendezvous and its own defaults, no restart), given
--bound seconds before it is called hung, then `lab doctor` on hosts planted the same way
(lab.doctor.planted). The verdict: the job failed or hung (those torch 2.13's gloo copes with
pass, as measured on that runtime), and the doctor named the mistake in one line on the node it
is about. On --runtime docker, the four Docker lets a container be made with, and the firewall
from the Docker host (lab.runtimes.misconfig.NOT_IN_CONTAINERS says why not the others).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TextIO

from lab.doctor.planted import BOUND, PLANTED_ON, doctor_row, job_row
from lab.errors import LabError
from lab.report import Report
from lab.rundir import RunDir
from lab.runtimes.misconfig import MISCONFIGS, Misconfig

KIND = "misconfig"
__all__ = ["BOUND", "KIND", "MisconfigDrill", "drills", "judge", "run"]


@dataclass(frozen=True)
class MisconfigDrill:
    misconfig: Misconfig
    KIND = KIND

    @property
    def NAME(self) -> str:  # noqa: N802 -- read as every exercise's NAME is
        return self.misconfig.name

    @property
    def SUMMARY(self) -> str:  # noqa: N802
        return self.misconfig.what

    def explanation(self) -> str:
        m = self.misconfig
        expected = (
            "it passes all the same (torch 2.13's gloo copes), and the doctor says a note"
            if m.job_passes
            else "it fails or hangs, and what it prints rarely names the cause"
        )
        return (
            f"{m.name}: {m.what}.\n\nPlanted on node{PLANTED_ON} of two {m.hosts[0]} hosts, then:\n"
            f"1. the lesson's job as a first run meets it (2 x 2 ddp_train, torchrun's c10d rendezvous and "
            f"its defaults, no restart), given --bound seconds: {expected};\n"
            f"2. `lab doctor` on hosts planted the same way, which names it on "
            f'{m.blamed(PLANTED_ON, 2)} ("...{m.says}...").\n\n'
            f"    lab exercise run {m.name}\n\n{in_containers(m)}\n\ndocs/doctor.md tabulates every one, measured."
        )


def in_containers(m: Misconfig) -> str:
    """What --runtime docker does with it: plants it (and whether the job still passes there), or why not."""
    try:
        m.planter("docker")
    except LabError as e:
        return f"Not in containers: {e}."
    there = f"passes all the same ({m.why_it_passes('docker')})" if m.passes_on("docker") else "fails or hangs"
    return f"In Docker containers too (--runtime docker), where the job {there}."


def drills() -> dict[str, MisconfigDrill]:
    return {name: MisconfigDrill(m) for name, m in MISCONFIGS.items()}


def run(
    drill: MisconfigDrill, run_dir: RunDir, bound_s: float, out: TextIO = sys.stdout, runtime: str = "local"
) -> Report:
    m = drill.misconfig
    m.planter(runtime)  # one that cannot be planted there: one line, nothing started
    hosts = m.hosts_described(runtime)

    def say(line: str) -> None:
        out.write(line + "\n")
        out.flush()

    say(f"-- {m.name}: {m.what}, planted on node{PLANTED_ON} of 2 {hosts}")
    say(
        f"-- the lesson's job, as a first run meets it (torchrun's c10d rendezvous and defaults), {bound_s:g} s at most"
    )
    job = job_row(m, run_dir, bound_s, runtime)
    say(f"   {ended(job, bound_s)}")
    say("-- lab doctor, on hosts planted the same way")
    doctor = doctor_row(m, run_dir, runtime)
    say(f"   {doctor['finding'] or 'no finding about the node it is about'} ({doctor['doctor_s']} s)")
    return judge(m, job, doctor, bound_s, runtime)


def ended(job: dict, bound_s: float) -> str:
    how = f"hung: still running at {bound_s:g} s" if job["job"] == "hung" else f"{job['job']} after {job['job_s']} s"
    return how + (f": {job['error']}" if job["error"] else "")


def judge(m: Misconfig, job: dict, doctor: dict, bound_s: float, runtime: str = "local") -> Report:
    """The verdict from what the job and the doctor did (lab.doctor.planted's rows), nothing run."""
    report = Report(m.name, runtime, 4)
    report.facts.update(job=job, doctor=doctor)
    if m.passes_on(runtime):
        report.check(
            f"the job passes all the same ({m.why_it_passes(runtime)})", job["job"] == "passed", ended(job, bound_s)
        )
    else:
        report.check("the job does not train: it fails or hangs", job["job"] in ("failed", "hung"), ended(job, bound_s))
    blamed = m.blamed(PLANTED_ON, 2)
    report.check(
        f"lab doctor names it on {blamed}, in one line",
        doctor["named"],
        doctor["finding"] or f"no finding about {blamed} says {m.says!r}",
    )
    report.explanation = f"{m.what}; `lab doctor` with the job's flags says so in {doctor['doctor_s']} s"
    return report
