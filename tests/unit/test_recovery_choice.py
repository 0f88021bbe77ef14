"""--recovery as lab.recovery.choose settles it: every style x job x runtime x drill either runs
(with the rendezvous it needs and a reason) or is refused in one line naming what to use."""

from __future__ import annotations

import itertools

import pytest

from lab import exercises, recovery, runtimes
from lab.bench import detection
from lab.errors import LabError
from lab.exercises import DrillOptions
from lab.topology import Topology

FIXED = Topology(nodes=2, nproc_per_node=2)
ELASTIC = Topology(nodes=2, nproc_per_node=2, min_nodes=1)
EVERY = recovery.Host("anywhere", ("c10d", "static", "etcd-v2", "lab"))
NO_LAB = recovery.Host("pods", ("c10d",), "pods take the overlay's rendezvous")


def test_auto_takes_the_tuned_restart_for_a_fixed_size_job():
    topology, how = recovery.choose(FIXED, "auto", EVERY)
    assert (topology.rdzv_backend, how.style) == ("lab", "restart")
    assert "--rdzv-backend=lab" in topology.torchrun_args(0)


@pytest.mark.parametrize(
    ("job", "host", "rdzv", "needs", "reason"),
    [
        (ELASTIC, EVERY, None, None, "elastic"),
        (FIXED.replace(torch_defaults=True), EVERY, None, None, "--torch-defaults"),
        (FIXED, NO_LAB, None, None, "overlay"),
        (FIXED, EVERY, "etcd-v2", None, "--rdzv-backend etcd-v2"),
        (FIXED, EVERY, None, ("torchrun", "this drill loses the store's host"), "store's host"),
    ],
)
def test_auto_falls_back_to_torchrun_and_says_why(job, host, rdzv, needs, reason):
    topology, how = recovery.choose(job, "auto", host, rdzv_asked=rdzv, drill_needs=needs)
    assert how.style == "torchrun" and reason in how.why
    assert topology.rdzv_backend == (rdzv or "c10d")


@pytest.mark.parametrize(
    ("job", "host", "rdzv", "needs"),
    [
        (ELASTIC, EVERY, None, None),
        (FIXED.replace(torch_defaults=True), EVERY, None, None),
        (FIXED, NO_LAB, None, None),
        (FIXED, EVERY, "c10d", None),
        (FIXED, EVERY, None, ("torchrun", "a drill of torch's rendezvous")),
    ],
)
def test_restart_asked_where_it_cannot_run_is_refused_naming_the_way_out(job, host, rdzv, needs):
    with pytest.raises(LabError, match=r"^--recovery restart: .*use --recovery torchrun$"):
        recovery.choose(job, "restart", host, rdzv_asked=rdzv, drill_needs=needs)


def test_rdzv_backend_lab_is_the_restart_and_contradicts_torchrun():
    assert recovery.choose(FIXED, "auto", EVERY, rdzv_asked="lab")[1].style == "restart"
    with pytest.raises(LabError, match="drop one of them"):
        recovery.choose(FIXED, "torchrun", EVERY, rdzv_asked="lab")
    with pytest.raises(LabError, match=r"^--rdzv-backend lab: an elastic job"):
        recovery.choose(ELASTIC, "auto", EVERY, rdzv_asked="lab")


def test_a_backend_the_runtime_does_not_run_is_refused():
    with pytest.raises(LabError, match=r"the pods runtime runs c10d; drop --rdzv-backend"):
        recovery.choose(FIXED, "torchrun", NO_LAB, rdzv_asked="etcd-v2")


KEEPERS = recovery.Host("anywhere", ("c10d", "lab"), no_in_process="")
ETCD_KEEPERS = recovery.Host("anywhere", ("etcd-v2",), no_in_process="")
OPTED_IN = "lab/workloads/inprocess_train.py"
DDP = "lab/workloads/ddp_train.py"  # does not opt in


def test_in_process_renders_a_keeper_per_node_for_a_script_that_opted_in():
    refusal = recovery.script_refuses_in_process(OPTED_IN)
    topology, how = recovery.choose(FIXED.replace(max_restarts=2), "in-process", KEEPERS, in_process_refusal=refusal)
    assert (refusal, how.style, recovery.style_of(topology)) == ("", "in-process", "in-process")
    argv = topology.launch_argv(1, OPTED_IN, ["--steps", "9"])
    keeper = argv[argv.index("--in-process") + 1 :]
    assert keeper == [
        "--store=127.0.0.1:29400",
        "--node-rank=1",
        "--nodes=2",
        "--nproc-per-node=2",
        "--max-replacements=2",
        "--return-timeout=120",  # a lost node's keeper is waited for as long as torchrun's join
        "--preload",  # ranks and spares fork from a server with torch loaded (worker_start auto)
        "--",
        OPTED_IN,
        "--steps",
        "9",
    ]
    assert not any(a.startswith("--rdzv") for a in argv)
    # --worker-start spawn (lab run's default): each a fresh interpreter, as torchrun's would be.
    assert "--preload" not in topology.replace(worker_start="spawn").launch_argv(1, OPTED_IN, [])


@pytest.mark.parametrize(
    ("job", "host", "rdzv", "needs", "script", "reason", "instead"),
    [
        (
            FIXED,
            KEEPERS,
            None,
            None,
            "lab/workloads/ddp_train.py",
            "ddp_train.py does not train in lab.inprocess",
            "restart",
        ),
        (FIXED, KEEPERS, None, None, "/no/such/script.py", "cannot be read", "restart"),
        (FIXED, EVERY, None, None, OPTED_IN, "the anywhere runtime cannot run it", "restart"),
        (ELASTIC, KEEPERS, None, None, OPTED_IN, "elastic", "torchrun"),
        (FIXED.replace(torch_defaults=True), KEEPERS, None, None, OPTED_IN, "--torch-defaults", "torchrun"),
        (FIXED, KEEPERS, "c10d", None, OPTED_IN, "--rdzv-backend c10d: the keepers run no rendezvous", "torchrun"),
        # A drill that needs a style and does not judge in-process (its workload's refusal stands).
        (FIXED, KEEPERS, None, ("torchrun", "this drill loses the store's host"), DDP, "store's host", "torchrun"),
        (FIXED, KEEPERS, None, ("restart", "this drill times the tuned restart"), DDP, "tuned restart", "restart"),
    ],
)
def test_in_process_is_refused_in_one_line_naming_the_style_that_runs(job, host, rdzv, needs, script, reason, instead):
    """The refusal names the style the job can run instead, and that style is not refused in turn."""
    refusal = recovery.script_refuses_in_process(script)
    with pytest.raises(LabError, match=rf"^--recovery in-process: .*; use --recovery {instead}$") as refused:
        recovery.choose(job, "in-process", host, rdzv_asked=rdzv, drill_needs=needs, in_process_refusal=refusal)
    assert reason in str(refused.value) and "\n" not in str(refused.value)
    _, runs = recovery.choose(job, instead, host, rdzv_asked=rdzv, drill_needs=needs, in_process_refusal=refusal)
    assert runs.style == instead


def test_a_drill_that_judges_in_process_runs_it_when_asked_though_its_restarts_need_torchrun():
    """kill-node: its restart needs torch's rendezvous (a node comes back), and its judge knows
    the keepers' fallback; auto keeps torchrun where the drill says in-process is not first."""
    needs = ("torchrun", "kill-node drills a node's loss through torch's c10d rendezvous")
    topology, asked = recovery.choose(FIXED, "in-process", KEEPERS, drill_needs=needs, in_process_refusal="")
    assert (asked.style, recovery.style_of(topology)) == ("in-process", "in-process")
    topology, auto = recovery.choose(FIXED, "auto", KEEPERS, drill_needs=needs, in_process_refusal="")
    assert (auto.style, auto.why, topology.rdzv_backend) == ("torchrun", needs[1], "c10d")
    with pytest.raises(LabError, match="--recovery restart: kill-node drills a node's loss"):
        recovery.choose(FIXED, "restart", KEEPERS, drill_needs=needs, in_process_refusal="")


def test_in_process_is_refused_where_nothing_said_the_job_can_run_it():
    with pytest.raises(LabError, match="nothing said this job can recover in-process"):
        recovery.choose(FIXED, "in-process", KEEPERS)


def test_auto_picks_in_process_first_where_it_runs_and_says_so():
    topology, how = recovery.choose(FIXED, "auto", KEEPERS, in_process_refusal="", in_process_first=True)
    assert (how.style, recovery.style_of(topology)) == ("in-process", "in-process")
    assert how.why == recovery.AUTO_IN_PROCESS


def test_on_nccl_auto_keeps_the_restart_until_a_gpu_run_proves_in_process_and_asked_it_runs():
    nccl = FIXED.replace(backend="nccl")
    topology, how = recovery.choose(nccl, "auto", KEEPERS, in_process_refusal="", in_process_first=True)
    assert (how.style, topology.in_process) == ("restart", False) and "gloo only" in how.why
    topology, how = recovery.choose(nccl, "in-process", KEEPERS, in_process_refusal="")
    assert (how.style, topology.in_process) == ("in-process", True)


@pytest.mark.parametrize(
    ("job", "host", "rdzv", "needs", "refusal", "style"),
    [
        (FIXED, EVERY, None, None, "", "restart"),  # no keepers on this runtime
        (FIXED, KEEPERS, None, None, "not on your script yet", "restart"),  # the workload has not opted in
        (ELASTIC, KEEPERS, None, None, "", "torchrun"),
        (FIXED.replace(torch_defaults=True), KEEPERS, None, None, "", "torchrun"),
        (FIXED, KEEPERS, "c10d", None, "", "torchrun"),
        (FIXED.replace(rdzv_backend="etcd-v2"), ETCD_KEEPERS, None, None, "", "torchrun"),  # a drill's own backend
        (FIXED, KEEPERS, None, ("torchrun", "this drill loses the store's host"), "not judged here", "torchrun"),
    ],
)
def test_auto_falls_back_from_in_process_to_what_the_job_can_run(job, host, rdzv, needs, refusal, style):
    """No refusal: auto takes the next fastest style, as it would without in_process_first."""
    first = recovery.choose(
        job, "auto", host, rdzv_asked=rdzv, drill_needs=needs, in_process_refusal=refusal, in_process_first=True
    )
    assert first[1].style == style
    assert first == recovery.choose(job, "auto", host, rdzv_asked=rdzv, drill_needs=needs)


def test_every_style_on_every_runtime_and_drill_runs_or_refuses_in_one_line():
    """The grid: no combination crashes or runs a rendezvous its runtime lacks."""
    drills = exercises.drills()
    for (name, cls), drill, asked in itertools.product(runtimes.registry().items(), drills.values(), recovery.CHOICES):
        options = DrillOptions(drill.DEFAULT_TARGET_RANK, drill.DEFAULT_AT_STEP, recovery=asked)
        try:
            topology, how = exercises.job(drill, options, cls.rendezvous())
        except LabError as e:
            assert "\n" not in str(e) and ("use" in str(e) or "drop" in str(e)), (name, drill.NAME, asked, e)
            continue
        assert topology.rdzv_backend in cls.RDZV_BACKENDS, (name, drill.NAME, asked)
        assert how.style == recovery.style_of(topology), (name, drill.NAME, asked)
        if asked != "auto":
            assert how.style == asked


def test_every_drill_with_fsdp2_runs_sharded_by_restart_or_refuses_in_one_line():
    """--parallel fsdp2 on every drill, runtime and style: never in-process (a rank holds only its
    shard), the job's topology carries it to the nodes, a drill of another workload refuses."""
    drills = exercises.drills()
    for (name, cls), drill, asked in itertools.product(runtimes.registry().items(), drills.values(), recovery.CHOICES):
        options = DrillOptions(drill.DEFAULT_TARGET_RANK, drill.DEFAULT_AT_STEP, recovery=asked, parallel="fsdp2")
        try:
            topology, how = exercises.job(drill, options, cls.rendezvous())
        except LabError as e:
            assert "\n" not in str(e), (name, drill.NAME, asked, e)
            assert asked == "in-process" or getattr(drill, "WORKLOAD", "trainer") != "trainer" or "use" in str(e)
            continue
        assert how.style != "in-process" and not topology.in_process, (name, drill.NAME, asked)
        assert topology.parallel == "fsdp2" and topology.env(0)["LAB_PARALLEL"] == "fsdp2"


def test_drills_that_need_torchruns_rendezvous_get_it_by_default_and_the_rest_the_restart():
    local = runtimes.runtime_class("local").rendezvous()
    styles = {
        name: exercises.job(d, DrillOptions(d.DEFAULT_TARGET_RANK, d.DEFAULT_AT_STEP), local)[1].style
        for name, d in exercises.drills().items()
    }
    assert styles["kill-node"] == styles["kill-rendezvous-host"] == "torchrun"
    assert styles["rank-exception"] == styles["preempt"] == "restart"
    drills = exercises.drills().items()
    judged = {name for name, d in drills if getattr(d, "IN_PROCESS_JUDGED", False)}
    first = {name for name, d in drills if getattr(d, "IN_PROCESS_FIRST", True)} & judged
    assert first and {styles[name] for name in first} == {"in-process"}  # kill-worker: a death it survives
    assert judged - first == {"kill-node"}  # in-process when asked: torch's rendezvous hears a lost node sooner
    assert {style for name, style in styles.items() if name not in judged} <= {"restart", "torchrun"}


def test_each_row_of_the_detection_bench_settles_a_style_with_torchruns_agent():
    """`lab bench detection` times torchrun's agent's monitor, so every row's job must recover
    through an agent (not in-process), with a --recovery its drill takes: a refusal once ended
    the bench at its fourth row (partition-node needs torch's rendezvous)."""
    local = runtimes.runtime_class("local").rendezvous()
    for label, name, own, style in detection.CASES:
        drill = exercises.drills()[name]
        options = DrillOptions(drill.DEFAULT_TARGET_RANK, drill.DEFAULT_AT_STEP, own=own, recovery=style)
        assert exercises.job(drill, options, local)[1].style in ("restart", "torchrun"), label
