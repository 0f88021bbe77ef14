"""The verdict on a user's script after a fault: did it finish, restart, resume, and what was redone."""

from __future__ import annotations

import re

from lab.exercises import observe, samples
from lab.exercises.script import cut, damaged, resize, resume, signals, writers
from lab.exercises.script.spec import ScriptSpec
from lab.exercises.seen import Seen
from lab.health.events import Event, ExitReason
from lab.report import Report
from lab.why.unranked import CONSEQUENCE


def errors(events: list[dict], since: float, until: float = float("inf")) -> list[str]:
    """What the ranks died of between since and until, once each: the exception and the script's
    line, or the exit status and the script's last line of stderr (argparse's error, say). Causes
    first: a peer's lost connection or a timeout (why.CONSEQUENCE) follows whatever caused it,
    however many ranks reported one first (each names its own port: told apart, they crowd)."""
    seen: list[str] = []
    for e in events:
        if e["event"] != Event.EXIT or not since < e["time"] < until:
            continue
        if e.get("reason") == ExitReason.EXCEPTION:
            text = f"{e['error']} ({e['where']})"
        elif e.get("reason") == ExitReason.EXIT_STATUS:
            said = [line for line in e.get("stderr") or [] if line.strip()]
            text = f"exit status {e.get('code')}" + (f": {said[-1].strip()}" if said else "")
        else:
            continue
        if text not in seen:
            seen.append(text)
    return sorted(seen, key=lambda text: bool(CONSEQUENCE.search(text)))[:3]  # stable: in time order


def fault_began(seen: Seen) -> float:
    """When the drill first touched the job: a fault of several steps (corrupt-checkpoint holds its
    target stopped, damages, then kills) began at the first. What the job died of from then on,
    a peer's timeout while the target was held say, is the fault's doing, not the script's. The
    fault's own record is among the run's injections (Drill.inject keeps each one)."""
    return min(f["time"] for f in seen.faults)


def failed_before(events: list[dict], fault_time: float) -> str:
    """How the script failed before the fault, or "": a rank's error, or a restart already."""
    early = errors(events, 0, fault_time)
    if early:
        return early[0]
    restarted = any(e["event"] == Event.START and e["restart"] > 0 and e["time"] < fault_time for e in events)
    return "torchrun had restarted its workers already (a failure its output does not name)" if restarted else ""


# What a script that assumes a GPU dies of on a CPU runner (torch's CPU build, or no device); the CPU
# build's torch.cuda.set_device fails on a missing torch._C._cuda_setDevice.
NO_GPU = re.compile(
    r"Torch not compiled with CUDA|has no attribute .?_cuda_|No CUDA GPUs are available"
    r"|Found no NVIDIA driver|ProcessGroupNCCL"
)


CPU_FALLBACK = "fall back to the CPU and gloo when torch.cuda.is_available() is False"


def explained(error: str, extra: dict) -> str:
    """The script's error, with where it ran when that is what it tripped on (a file it opens
    relative to the folder it starts in, which a drill's fresh working dir does not hold)."""
    if "FileNotFoundError" in error and not extra.get("own_workdir"):
        return f"{error} (it ran in a fresh working dir, {extra['workdir']}: --workdir DIR runs it where its files are)"
    if NO_GPU.search(error):
        return f"{error} (it needs a GPU this machine lacks: {CPU_FALLBACK})"
    return error


def judge(seen: Seen) -> Report:
    """The verdict on one run of a user's script, from what it left: the fault-free reference
    (no "fault" in seen.extra) or one fault, with its result file compared when asked."""
    report = seen.new_report()
    extra = seen.extra
    report.facts.update(script=extra["script"], script_args=extra["script_args"], deadline_s=extra["deadline_s"])
    report.facts["workdir"] = extra["workdir"]
    if extra["found_at_start"]:
        report.check(
            "it started from a clean slate",
            False,
            f"{extra['ckpt_dir']} already held {', '.join(extra['found_at_start'])} before the run: "
            + (
                "left in --workdir by an earlier run (clear them)"
                if extra.get("own_workdir")
                else "an absolute --ckpt-dir reused across runs (clear it, or make it relative)"
            )
            + "; this is not judged as a recovery",
        )
    if "recovery" not in extra:
        judge_reference(report, seen)
    elif extra["fire"] is None:
        early = errors(seen.events, 0)
        report.check(
            "the fault fired while the job ran",
            False,
            f"the script failed before the fault: {explained(early[0], extra)}"
            if early
            else f"the job ended (exit codes {seen.codes}) before the fault fired: "
            + signals.why_unfired(
                seen.events,
                extra["target"],
                extra["at_step"],
                extra.get("at_time_s", ScriptSpec.at_time_s),
                extra["ckpt_dir"],
            ),
        )
    else:
        judge_fault(report, seen)
    if extra.get("compared") is not None:
        judge_result(report, extra, resize.not_comparable(seen) if "recovery" in extra else "")
    report.facts["shared_writes"] = writers.shared_writes(seen.events)
    report.facts["finding"] = finding(report)
    report.explanation = report.facts["finding"]
    return report


COMPARED = "the result equals the fault-free reference's"
REPEATED = "a second fault-free run's result equals the first's"
NOT_DETERMINISTIC = (
    "your script is not deterministic, so --compare cannot tell what a fault changed: seed it (torch.manual_seed, "
    "a fixed data order) or drop --compare"
)


def judge_result(report: Report, extra: dict, unjudged: str = "") -> None:
    """The result file against the reference's: a fault's check, or, for the fault-free run
    repeated, whether the script gives the same result twice (not judged for a fault once it
    does not: extra["not_deterministic"]; nor where unjudged says why not)."""
    ok, detail = extra["compared"]
    report.facts["compared"] = detail
    report.facts["result_differs"] = not ok and extra.get("result_written", True) and not unjudged  # not: wrote none
    if extra.get("repeat"):
        report.check(REPEATED, ok, detail if ok else f"{detail}: {NOT_DETERMINISTIC}")
    elif extra.get("not_deterministic") or unjudged:
        report.facts["compared"] = f"{detail} (not judged: {extra.get('not_deterministic') or unjudged})"
    else:
        report.check(COMPARED, ok, detail)


def result_differs(report: Report | None) -> bool:
    """Whether the run wrote its result, and it differed from the reference's (a run that wrote
    none failed for another reason: a second reference would not explain it)."""
    return report is not None and bool(report.facts.get("result_differs"))


def judge_reference(report: Report, seen: Seen) -> None:
    events, codes = seen.events, seen.codes
    found = signals.step_source(events)
    report.facts["progress"] = {"source": found[0] if found else "none", "unit": found[1] if found else None}
    if found:
        values = [e["step"] for e in signals.progress(events, *found)]
        report.facts["progress"].update(first=values[0] if values else None, last=values[-1] if values else None)
    report.facts["restarts"] = 0
    report.check(
        "the fault-free run finished with exit 0",
        all(c == 0 for c in codes.values()),
        f"node exit codes {codes}" + "".join(f"; {explained(e, seen.extra)}" for e in errors(events, 0)[:1]),
    )
    check_long_enough(report, seen)


def check_long_enough(report: Report, seen: Seen) -> None:
    """The reference ran long enough for a fault to fire in it: to the step the faults fire at
    (--at-step), or, with no step printed, --at-time seconds past its process group. A script
    that is done sooner (it exits at once, or has too little work) gives every fault nothing
    to break: one line now, not a verdict per fault."""
    fire, events = seen.extra.get("fire_point"), seen.events
    if not fire or not events:
        return
    found = signals.step_source(events)
    if found:
        last = max(e["step"] for e in signals.progress(events, *found))
        ok = last >= fire["at_step"]
        detail = f"its last {found[1]} was {last}; the faults fire at {found[1]} {fire['at_step']} (--at-step)"
    else:
        joined = [e["time"] for e in events if e["event"] == Event.RENDEZVOUS_DONE]
        began = min(joined or [e["time"] for e in events])
        lasted = max(e["time"] for e in events) - began
        ok = lasted >= fire["at_time_s"]
        detail = (
            f"it ended {lasted:.1f} s after its process group was up, with no step printed; the faults fire "
            f"{fire['at_time_s']:g} s in (--at-time)"
        )
    report.check("it runs long enough for a fault to fire", ok, detail if ok else f"{detail}: give it more work")


def judge_fault(report: Report, seen: Seen) -> None:
    """Checks and facts for one fault run (recovery: restart, rerun or none)."""
    events, fault, fire = seen.events, seen.extra["fault"], seen.extra["fire"]
    recovery = seen.extra["recovery"]
    found = signals.step_source(events)
    source, unit = found if found else (fire["source"], None)
    facts = report.facts
    if seen.extra.get("forensics"):
        facts["forensics"] = seen.extra["forensics"]
    if seen.extra.get("rerun"):
        facts["rerun"] = True
    facts["progress"] = {"source": source, "unit": unit, "fired_at": fire}
    facts["restarts"] = observe.restarts(events)
    facts.update({k: seen.extra[k] for k in ("waited_s", "pg_timeout_s") if seen.extra.get(k)})
    began = fault_began(seen)
    facts["errors_after_fault"] = errors(events, began)
    loaded = [e["path"] for e in events if e["event"] == Event.LOADED and e["rank"] == 0 and e["time"] > fault["time"]]
    facts["loaded_after_fault"] = loaded[:3]
    facts["damaged_dcp_step"] = damaged.loaded_step(seen.faults, loaded)
    facts["damaged_file"] = damaged.loaded_file(seen.faults, events)
    facts["cut_save"] = cut.loaded_cut(events, fault["time"])  # kill-in-save's
    facts["recovery"] = None if recovery == "none" else observe.recovery_breakdown(events, seen.agents, fault["time"])
    early = failed_before(events, began)
    if early:  # what followed is not the fault's doing: judge nothing else
        detail = f"the script failed before the fault: {explained(early, seen.extra)}"
        report.check("the script ran until the fault", False, detail)
        return
    if unit is not None:  # first: ranks apart is why such a job then hangs or fails
        resume.check_together(report, signals.resumed_by_rank(events, fault["time"], source, unit), unit, seen.extra)
    cut.check(report, facts["cut_save"])  # first: a half-written checkpoint loaded is why such a job then fails
    check_finished(report, resize.expected_to_finish(seen))  # an elastic job's node lost for good: not expected
    samples.check(report, events)  # where the script records its samples (lab.progress.step(n, samples=...))
    resize.check(report, seen)
    if recovery == "none":
        report.check("no restart was needed", facts["restarts"] == 0, f"restarts {facts['restarts']}")
        facts["work_redone"] = None
        if unit is not None:
            facts["progress"]["rate_per_s"] = signals.rates(events, seen.faults, source, unit)
        return
    if recovery == "restart":
        report.check("torchrun restarted the workers", facts["restarts"] >= 1, f"restarts {facts['restarts']}")
    damaged.check(report, facts["damaged_dcp_step"])
    damaged.check_file(report, facts["damaged_file"])
    if unit is None:
        # No step signal: whether it resumed can only be read from what it loaded.
        facts["work_redone"] = None
        report.check(
            "it loaded a checkpoint when it started again",
            bool(loaded),
            f"loaded {loaded[0]} (no step signal: work redone unknown)"
            if loaded
            else "no torch.load or dcp.load after the fault, and no step signal to tell: print 'step N' "
            "(or call lab.progress.step(n)) and say where it checkpoints (--ckpt-dir) to make both visible",
        )
        return
    saved = resume.newest_save(events, fault["time"], source, unit)
    later = resume.first_save_after(events, fault["time"], source, unit) if saved is None else None
    resume.check_resumed(report, signals.segments(events, fault["time"], source, unit), unit, loaded, saved, later)


def check_finished(report: Report, codes: dict[str, int | None]) -> None:
    finished = all(code == 0 for code in codes.values())
    stuck = any(code is None for code in codes.values())
    errors_seen = report.facts["errors_after_fault"]
    report.check(
        "the job finished with exit 0",
        finished,
        signals.still_hung(report.facts.get("waited_s") or report.facts["deadline_s"], report.facts.get("pg_timeout_s"))
        if stuck
        else f"node exit codes {codes}" + (f"; {errors_seen[0]}" if errors_seen and not finished else ""),
    )


def finding(report: Report) -> str:
    """One sentence for the matrix and the summary: what happened, what was lost."""
    facts = report.facts
    failed = [c for c in report.checks if not c.ok]
    said = f"; forensics: {facts['forensics']['finding']}" if facts.get("forensics") else ""
    said += writers.said(facts.get("shared_writes") or [])
    if failed:
        return f"{failed[0].name}: no. {failed[0].detail}{said}"
    parts = []
    if facts.get("restarts"):
        parts.append(f"{facts['restarts']} restart(s)")
    redone = facts.get("work_redone")
    if redone:
        parts.append(
            f"redid {redone['count']} {redone['unit']}(s) ({redone['from']}..{redone['to']})"
            if redone["count"]
            else f"redid no {redone['unit']}"
        )
    if facts.get("world_sizes_after"):  # an elastic job's (lab.exercises.script.resize)
        parts.append(f"went on at {' then '.join(map(str, facts['world_sizes_after']))} ranks")
    rate = (facts.get("progress") or {}).get("rate_per_s")
    if rate and rate["before"] is not None and rate["during"] is not None:
        parts.append(f"{rate['during']:g} {facts['progress']['unit']}/s while slowed, {rate['before']:g} before")
    total = (facts.get("recovery") or {}).get("total")
    if total is not None:
        parts.append(f"first {facts['progress']['unit'] or 'step'} {total:.1f} s after the fault")
    if facts.get("compared"):
        parts.append(f"result {facts['compared']}")
    source = (facts.get("progress") or {}).get("source")
    if source and source not in signals.STEP_SOURCES:
        parts.append(f"progress read from {source} (no step in the output; work redone unknown)")
    return ("finished; " + ", ".join(parts) if parts else "finished") + said
