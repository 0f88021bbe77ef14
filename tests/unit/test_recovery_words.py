"""lab.recovery.choose's every answer in its exact words: the style, the rendezvous it sets, the
reason it says, or the one-line refusal, for each way a job, a runtime and a drill can meet.
Written down by hand from the rules in recovery.py's docstring where mutation testing showed
reasons checked only by a word (docs/mutation.md); test_recovery_choice.py walks the catalogue."""

from __future__ import annotations

import pytest

from lab import recovery
from lab.errors import LabError
from lab.topology import Topology

JOB = Topology(nodes=2, nproc_per_node=2)
ELASTIC = JOB.replace(min_nodes=1)
LOCAL = recovery.Host("local", ("c10d", "etcd-v2", "lab"), no_in_process="")
PODS = recovery.Host("pods", ("c10d",), "pods take the overlay's rendezvous")
BARE = recovery.Host("bare", ("c10d", "static"))  # says nothing of why not the lab's
STORE = ("torchrun", "this drill loses the store's host")
FIXED_JOB = "a fixed-size job: the lab's rendezvous restarts the group without torch's 1 s poll"
ELASTIC_TORCH = (
    "an elastic job (torchrun's --nnodes=MIN:MAX) needs torch's rendezvous; the lab's has a fixed node count"
)
ELASTIC_KEEPERS = "an elastic job (torchrun's --nnodes=MIN:MAX) needs torch's rendezvous; the keepers hold a fixed size"
ASKED_SPARE = "asked: the survivors stay, a warm spare takes the lost rank's state from a peer"
NCCL = JOB.replace(backend="nccl")
MORE = [  # where the unproven-on-nccl reason must not reach, and a drill's preset backend
    (NCCL, "auto", LOCAL, {}, ("restart", "lab", FIXED_JOB)),
    (NCCL, "restart", LOCAL, {}, ("restart", "lab", "asked (--recovery restart): the lab's rendezvous")),
    (
        JOB.replace(rdzv_backend="etcd-v2"),
        "in-process",
        LOCAL,
        {"in_process_refusal": ""},
        ("in-process", "etcd-v2", ASKED_SPARE),
    ),
]


@pytest.mark.parametrize(
    ("job", "asked", "host", "given", "answer"),
    [
        (JOB, "auto", LOCAL, {}, ("restart", "lab", FIXED_JOB)),
        (
            JOB,
            "auto",
            LOCAL,
            {"rdzv_asked": "lab"},
            ("restart", "lab", "asked (--rdzv-backend lab): the lab's rendezvous"),
        ),
        (JOB, "restart", LOCAL, {}, ("restart", "lab", "asked (--recovery restart): the lab's rendezvous")),
        (JOB, "torchrun", LOCAL, {}, ("torchrun", "c10d", "asked: torch's c10d rendezvous")),
        (
            JOB,
            "torchrun",
            LOCAL,
            {"rdzv_asked": "etcd-v2"},
            ("torchrun", "etcd-v2", "asked: torch's etcd-v2 rendezvous"),
        ),
        (ELASTIC, "auto", LOCAL, {}, ("torchrun", "c10d", ELASTIC_TORCH)),
        (
            JOB.replace(rdzv_backend="etcd-v2"),
            "auto",
            LOCAL,
            {},
            ("torchrun", "etcd-v2", "--rdzv-backend etcd-v2 is one of torch's rendezvous"),
        ),
        (
            JOB.replace(torch_defaults=True),
            "auto",
            LOCAL,
            {},
            ("torchrun", "c10d", "--torch-defaults runs torch's own c10d path"),
        ),
        (JOB, "auto", PODS, {}, ("torchrun", "c10d", "pods take the overlay's rendezvous")),
        (JOB, "auto", BARE, {}, ("torchrun", "c10d", "the bare runtime does not run the lab's rendezvous")),
        (JOB, "auto", LOCAL, {"drill_needs": STORE}, ("torchrun", "c10d", "this drill loses the store's host")),
        (
            JOB,
            "auto",
            LOCAL,
            {"in_process_refusal": "", "in_process_first": True},
            ("in-process", "c10d", recovery.AUTO_IN_PROCESS),
        ),
        (JOB, "in-process", LOCAL, {"in_process_refusal": ""}, ("in-process", "c10d", ASKED_SPARE)),
        (
            JOB,
            "in-process",
            LOCAL,
            {"in_process_refusal": "", "drill_needs": STORE},
            ("in-process", "c10d", ASKED_SPARE),
        ),
        (
            JOB.replace(backend="nccl"),
            "auto",
            LOCAL,
            {"in_process_refusal": "", "in_process_first": True},
            ("restart", "lab", recovery.UNPROVEN_IN_PROCESS["nccl"]),
        ),
        (
            ELASTIC,
            "auto",
            LOCAL,
            {"in_process_refusal": "", "in_process_first": True},
            ("torchrun", "c10d", ELASTIC_TORCH),
        ),
    ]
    + MORE,
)
def test_each_job_gets_the_style_the_rendezvous_and_the_reason(job, asked, host, given, answer):
    topology, how = recovery.choose(job, asked, host, **given)
    assert (how.style, topology.rdzv_backend, how.why) == answer
    assert topology.in_process == (how.style == "in-process") and recovery.style_of(topology) == how.style
    assert how.line() == f"recovery: {answer[0]} ({answer[2]})"


@pytest.mark.parametrize(
    ("job", "asked", "host", "given", "refusal"),
    [
        (JOB, "fastest", LOCAL, {}, "--recovery must be one of auto, restart, torchrun, in-process; got 'fastest'"),
        (JOB, "in-process", LOCAL, {}, f"--recovery in-process: {recovery.IN_PROCESS_UNSAID}; use --recovery restart"),
        (
            ELASTIC,
            "in-process",
            LOCAL,
            {"in_process_refusal": ""},
            f"--recovery in-process: {ELASTIC_KEEPERS}; use --recovery torchrun",
        ),
        (
            JOB,
            "in-process",
            PODS,
            {"in_process_refusal": ""},
            "--recovery in-process: the pods runtime cannot run it (its nodes run no keeper); use --recovery torchrun",
        ),
        (
            JOB.replace(torch_defaults=True),
            "in-process",
            LOCAL,
            {"in_process_refusal": ""},
            "--recovery in-process: --torch-defaults runs torch's own c10d path; use --recovery torchrun",
        ),
        (
            JOB,
            "in-process",
            LOCAL,
            {"in_process_refusal": "", "rdzv_asked": "etcd-v2"},
            "--recovery in-process: --rdzv-backend etcd-v2: the keepers run no rendezvous backend; "
            "use --recovery torchrun",
        ),
        (
            JOB.replace(step_watchdog_s=5),
            "in-process",
            LOCAL,
            {"in_process_refusal": ""},
            "--recovery in-process: a step watchdog (--watchdog) is torchelastic's file timer, in torchrun's "
            "agent (a keeper ends a frozen rank itself); use --recovery restart",
        ),
        (
            JOB,
            "in-process",
            LOCAL,
            {"in_process_refusal": "it does not opt in", "drill_needs": STORE},
            "--recovery in-process: this drill loses the store's host; use --recovery torchrun",
        ),
        (
            JOB,
            "torchrun",
            LOCAL,
            {"rdzv_asked": "lab"},
            "--recovery torchrun runs torch's rendezvous, not --rdzv-backend lab: drop one of them",
        ),
        (ELASTIC, "restart", LOCAL, {}, f"--recovery restart: {ELASTIC_TORCH}; drop it, or use --recovery torchrun"),
        (
            ELASTIC,
            "auto",
            LOCAL,
            {"rdzv_asked": "lab"},
            f"--rdzv-backend lab: {ELASTIC_TORCH}; drop it, or use --recovery torchrun",
        ),
        (
            JOB,
            "torchrun",
            LOCAL,
            {"drill_needs": ("restart", "it times the tuned restart")},
            "--recovery torchrun: it times the tuned restart; drop --recovery",
        ),
        (
            JOB,
            "torchrun",
            BARE,
            {"rdzv_asked": "etcd-v2"},
            "--rdzv-backend etcd-v2: the bare runtime runs c10d or static; drop --rdzv-backend (or use --runtime "
            "local, which runs every backend)",
        ),
    ],
)
def test_each_job_that_cannot_run_is_refused_in_one_line_naming_the_way_out(job, asked, host, given, refusal):
    with pytest.raises(LabError) as refused:
        recovery.choose(job, asked, host, **given)
    assert str(refused.value) == refusal


def test_a_restart_gives_a_stopped_worker_less_grace_than_torchrun():
    assert recovery.stop_grace_s(JOB.replace(rdzv_backend="lab")) == recovery.RESTART_STOP_GRACE_S == 5
    assert recovery.stop_grace_s(JOB) == recovery.TORCH_STOP_GRACE_S == 30
    assert recovery.stop_grace_s(JOB.replace(rdzv_backend="lab", in_process=True)) == 30


def test_a_script_opts_in_to_in_process_by_using_the_api(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("from lab.inprocess import attempts\n")
    assert recovery.script_refuses_in_process(str(script)) == ""
    script.write_bytes(b"# \xff not UTF-8\nfrom lab.inprocess import attempts\n")
    assert recovery.script_refuses_in_process(str(script)) == ""  # read anyway, bad bytes replaced
    script.write_text("import torch\n")
    assert recovery.script_refuses_in_process(str(script)) == (
        f"{script} does not train in lab.inprocess's attempts() (docs/recovery.md shows how)"
    )
    missing = tmp_path / "missing.py"
    assert recovery.script_refuses_in_process(str(missing)) == (
        f"{missing} cannot be read here to see whether it uses lab.inprocess"
    )
