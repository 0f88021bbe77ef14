"""The docs are executable: the newcomer's path through README.md, in the order it is written,
on the default run dir, and the same commands in other orders.

Each test gets a private HOME and XDG_RUNTIME_DIR (so the default run dir is its own
`$XDG_RUNTIME_DIR/torchrun-lab`, shared with nothing on the machine) and no LAB_RUN_DIR.
Every command README.md and docs/exercises.md show (tests/doc_commands.py finds them) is
either run here or named, with the test that runs it, in ELSEWHERE; a command added to
the docs that no test runs fails test_every_doc_command_is_run_by_a_test.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import REPO, Lab, left_behind, needs_netns, report_of
from doc_commands import all_commands, names_of_tests, quotes
from test_cli_errors import assert_one_line_error

README_PATH = "tests/test_docs_path.py::test_the_readme_in_order"
ORDERS = "tests/test_docs_path.py::test_the_same_commands_in_other_orders"
# Commands of the docs run by another test (a path to it), or that cannot run here (why).
ELSEWHERE = {
    "make test": "the suite itself: .ci/run runs it",
    ".venv/bin/lab bench stragglers --positions middle --at-steps 15 --clean-runs 1 --out /tmp/stragglers": (
        "tests/test_stragglers_bench.py::test_the_bench_names_each_slowed_rank_in_time_and_no_rank_of_a_clean_run"
    ),
    ".venv/bin/lab bench coordinators --coordinators c10d,lab-store,etcd,prometheus --trials 1 "
    "--out /tmp/coordinators": (
        "tests/test_coordinators_bench.py::test_each_coordinator_loss_is_survived_or_fails_fast_saying_why"
    ),
    ".venv/bin/lab bench diagnosis --classes segfault,sigstop --positions last --at-steps 5 --out /tmp/diagnosis": (
        "tests/test_diagnosis_bench.py::test_the_bench_names_each_injected_rank_and_writes_its_table"
    ),
    ".venv/bin/lab exercise matrix --script tests/user_scripts/snapshot_every_epoch.py --faults "
    "kill-worker,preempt,corrupt-checkpoint --ckpt-dir . --compare result.pt -- --epochs 8": (
        "tests/test_script_drills.py::test_matrix_on_the_snapshot_tutorial_script"
    ),
    "python3.11 -m venv .venv": "the Makefile's venv target, which make test runs first",
    ".venv/bin/pip install -e '.[test]'": "the Makefile's venv target, which make test runs first",
    ".venv/bin/pip install torch==2.13.0 --index-url <PyTorch's CUDA wheel index>": (
        "cannot run here: a CUDA wheel index and a GPU (scripts/gpu-check.sh runs this path on a GPU machine)"
    ),
    ".venv/bin/lab up --backend nccl --nproc-per-node <GPUs per node>": (
        "tests/test_gpus.py::test_nccl_on_a_machine_with_too_few_gpus_is_one_line"
    ),
    ".venv/bin/lab exercise run kill-worker --torch-defaults": (
        "tests/test_exercises.py::test_kill_worker_with_torch_defaults_shows_the_upstream_restart_failure"
    ),
    ".venv/bin/lab exercise run corrupt-checkpoint": (
        "tests/test_exercises.py::test_corrupt_checkpoint_falls_back_to_the_previous_one"
    ),
    ".venv/bin/lab exercise run kill-worker [--target-rank 1] [--at-step 25]": ORDERS,
    ".venv/bin/lab exercise run NAME --script PATH [--nodes N --nproc-per-node M] [--ckpt-dir DIR]": (
        "a synopsis: tests/test_script_drills.py runs its forms"
    ),
    ".venv/bin/lab exercise matrix --script PATH --faults a,b,c [the same flags] [-- SCRIPT_ARGS]": (
        "a synopsis: tests/test_script_drills.py::test_matrix_on_the_snapshot_tutorial_script"
    ),
    "lab ci --script tests/user_scripts/snapshot_every_epoch.py --junit junit.xml -- --epochs 6": (
        "tests/test_ci_fresh_venv.py::test_lab_ci_passes_the_default_drills_and_leaves_junit_a_summary_and_the_page"
    ),
    "pytest --lab-script tests/user_scripts/snapshot_every_epoch.py --lab-faults rank-exception "
    '--lab-script-args "--epochs 6"': (
        "tests/test_ci_fresh_venv.py::test_the_pytest_option_makes_each_drill_a_test_case"
    ),
    "lab chaos --count 10 --mtbf 3s --seed 48": "tests/test_chaos.py::test_the_docs_campaign_recovers_every_fault",
    "lab chaos --script lab/workloads/plain_train.py --compare result.txt --rtol 1e-3 --count 6 --mtbf 4s "
    "--seed 140 -- --steps 800 --step-time 0.03 --snapshot-every 10 --timeout-s 20 --result result.txt": (
        "tests/test_chaos.py::test_the_docs_campaign_on_an_ordinary_script_resumes_it_each_time_and_ends_where_a_run_without_faults_does"
    ),
    "lab chaos --runtime docker --script lab/workloads/plain_train.py --compare result.txt --rtol 1e-3 --count 4 "
    "--mtbf 4s --seed 140 -- --steps 500 --step-time 0.03 --snapshot-every 10 --timeout-s 20 --result result.txt": (
        "tests/test_docker.py::test_the_docs_script_campaign_in_containers_resumes_plain_train_each_time"
    ),
    "lab chaos --runtime docker --count 4 --mtbf 6s --seed 25 --mix kill-node,preempt-node,kill-in-regroup,"
    "kill-after-save --load 1": (
        "tests/test_docker.py::test_the_docs_campaign_in_containers_survives_each_node_lost_beside_a_busy_process"
    ),
    "lab doctor --nodes 3": "tests/test_doctor.py::test_healthy_netns_hosts_find_nothing_and_the_cli_says_so",
    "lab exercise run interface-missing": (
        "tests/test_doctor.py::test_a_misconfiguration_drill_shows_the_job_failing_then_the_doctor_naming_it"
    ),
    ".venv/bin/lab exercise list": ORDERS,
    ".venv/bin/lab exercise explain kill-worker": ORDERS,
}
NUMBER = re.compile(r"[-+]?\d+\.\d+")


def test_every_doc_command_is_run_by_a_test():
    """A command the docs gain fails here, by name, until a test runs it."""
    here = names_of_tests(REPO / "tests" / "test_docs_path.py")
    for command in all_commands():
        where = ELSEWHERE.get(command.text, README_PATH if command.doc == "README.md" else None)
        assert where, (
            f"{command.doc}:{command.line}: no test runs `{command.text}`: run it or name the test in ELSEWHERE"
        )
        path, _, name = where.partition("::")
        if where.startswith("tests/") and name:  # a test's node id; any other text says why no test here runs it
            names = here if path.endswith("test_docs_path.py") else names_of_tests(REPO / path)
            assert name in names, f"{command.doc}:{command.line}: {where} does not exist"
    shown = {c.text for c in all_commands()}
    assert not set(ELSEWHERE) - shown, f"ELSEWHERE names commands the docs no longer show: {set(ELSEWHERE) - shown}"


@pytest.fixture
def reader(tmp_path):
    """A newcomer's shell: the repository as cwd, a home and runtime dir of their own."""
    home, xdg = tmp_path / "home", tmp_path / "xdg"
    home.mkdir()
    xdg.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k != "LAB_RUN_DIR"}
    env.update(HOME=str(home), XDG_RUNTIME_DIR=str(xdg))
    shell = Shell(env, tmp_path / "tmp")
    try:
        yield shell
    finally:
        shell(".venv/bin/lab down", timeout=180)


class Shell:
    def __init__(self, env: dict[str, str], torchrun_tmp: Path):
        self.env = env
        self.run_dir = Path(env["XDG_RUNTIME_DIR"]) / "torchrun-lab"  # the default run dir
        # A plain torchrun keeps its log dir (torchelastic_*) in TMPDIR: the reader's own, not
        # the machine's /tmp. Only for torchrun: the lab's Ray sockets need the short /tmp paths.
        self.torchrun_tmp = torchrun_tmp

    def __call__(self, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        if command.startswith("lab "):
            command = ".venv/bin/" + command
        env = self.env
        if command.startswith(".venv/bin/torchrun "):
            self.torchrun_tmp.mkdir(exist_ok=True)
            env = {**env, "TMPDIR": str(self.torchrun_tmp)}
        return subprocess.run(
            ["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
        )

    def ok(self, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        out = self(command, timeout)
        assert out.returncode == 0, f"`{command}` exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-2000:]}"
        return out

    def popen(self, command: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["bash", "-c", f"exec .venv/bin/{command}"], cwd=REPO, env=self.env, text=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip


def said(out: subprocess.CompletedProcess, quote: str) -> None:
    """Every line the doc quotes appears in what the command printed (spacing aside)."""
    printed = {" ".join(line.split()) for line in out.stdout.splitlines()}
    for line in quote.strip().splitlines():
        assert " ".join(line.split()) in printed, f"the docs quote {line!r}; the command printed:\n{out.stdout}"


def numbers_in_comment(out: subprocess.CompletedProcess, comment: str) -> None:
    for figure in NUMBER.findall(comment):
        assert figure in out.stdout, f"the docs say {figure}; the command printed:\n{out.stdout[-3000:]}"


def after_a_lesson(reader: Shell) -> None:
    """What a lesson leaves lets every other command in: no lab up, a plan for the next."""
    status = reader(".venv/bin/lab status")
    assert status.returncode == 3, status.stdout + status.stderr
    reader.ok(".venv/bin/lab up --dry-run")


@pytest.mark.slow
@pytest.mark.docker  # `make lab-up` runs on Docker where a daemon answers, as CI's does
@needs_netns
def test_the_readme_in_order(reader):
    table = next(q for q in quotes("README.md") if "all 4 ranks hold the same weights" in q)
    for command in all_commands():
        if command.doc != "README.md" or command.text in ELSEWHERE:
            continue
        print(f"{time.strftime('%H:%M:%S')} {command.text}", flush=True)  # what each step costs, with -s
        if command.text.startswith("lab exercise run "):  # the learning path
            out = reader.ok(command.text)
            report = report_of(out)
            assert report["verdict"] in ("pass", "skip") and report["checks"] or report["skipped"], report
            check_lesson(command.text.split()[-1], report)
            after_a_lesson(reader)
            continue
        out = reader.ok(command.text)
        numbers_in_comment(out, command.comment)
        if command.text == "make lab-up":
            said(out, table)
            # The README: the hosts stay up for inspection; make lab-status, then make lab-down.
            assert "node1" in reader.ok("make lab-status").stdout
            reader.ok("make lab-down")
        if "--script" in command.text:
            assert "verdict: PASS" in out.stdout, out.stdout[-3000:]
    assert "nothing to stop" in reader.ok(".venv/bin/lab down").stdout


def check_lesson(name: str, report: dict) -> None:
    if name == "set-device-first":  # no GPU here: the skip path, saying why
        assert report["verdict"] == "skip" and "needs at least 2 GPUs" in report["skipped"]
        return
    assert report["verdict"] == "pass"
    if name == "determinism":
        final = report["final_checksums"]
        assert final["2x2"] == final["2x2 again"] == final["1x4"] != final["1x2"]
    if name == "same-data-every-rank":
        assert report["plain"]["dups"] == "192" and report["sampler"]["dups"] == "0"
    if name == "fsdp-shards":  # a quarter of the model on each of 4 ranks, the whole under DDP
        held = report["bytes_per_rank_4"]["3"]
        assert held["fsdp2"]["params"] * 4 == held["ddp"]["params"] == held["ddp"]["model"], held
    if name == "bucket-size":
        assert all(v > 0 for v in report["ms_per_step_by_bucket_cap_mb"].values())


@pytest.mark.slow
@needs_netns
def test_the_same_commands_in_other_orders(reader):
    # Before anything: status and why say there is nothing, down twice is calm.
    status = reader(".venv/bin/lab status")
    assert status.returncode == 3 and status.stdout == "no lab is running\n", status
    assert_one_line_error(reader(".venv/bin/lab why"), "nothing to explain")
    for _ in range(2):
        assert "nothing to stop" in reader.ok(".venv/bin/lab down").stdout
    # docs/exercises.md's first commands, a drill first of all, then a lesson, then lab up.
    assert "kill-worker" in reader.ok(".venv/bin/lab exercise list").stdout
    assert "kill-worker" in reader.ok(".venv/bin/lab exercise explain kill-worker").stdout
    drill = reader.ok(".venv/bin/lab exercise run kill-worker --target-rank 1 --at-step 25")
    assert "verdict: PASS" in drill.stdout and "Token authentication" not in drill.stdout + drill.stderr
    check_kill_worker(report_of(drill))
    assert [t for t in left_behind(reader.run_dir, Lab(reader.run_dir).lab_id) if "ray" in t] == [], "Ray was left"
    assert report_of(reader.ok(".venv/bin/lab exercise run hello-ddp"))["verdict"] == "pass"
    assert "all 4 ranks hold the same weights" in reader.ok(".venv/bin/lab up").stdout
    # A lesson Ctrl-C'd half way, then lab up: nothing left in the way.
    lesson = reader.popen("lab exercise run no-ddp-drift")
    assert lesson.stdout is not None
    while not lesson.stdout.readline().startswith("-- "):  # its first job is starting
        assert lesson.poll() is None, "the lesson ended before its first job"
    lesson.send_signal(signal.SIGINT)
    lesson.communicate(timeout=120)
    reader.ok(".venv/bin/lab up --prometheus off")
    # Two lessons at the same moment on the same run dir: one runs, the other says why it waits.
    first, second = reader.popen("lab exercise run hello-ddp"), reader.popen("lab exercise run hello-ddp")
    results = [p.communicate(timeout=600) + (p.returncode,) for p in (first, second)]
    codes = sorted(code for _, _, code in results)
    assert codes == [0, 1], results
    refused = next(err for _, err, code in results if code == 1)
    assert "another lab command is using run dir" in refused and "Traceback" not in refused
    # Down twice: the second finds nothing.
    reader.ok(".venv/bin/lab down")
    assert "nothing to stop" in reader.ok(".venv/bin/lab down").stdout


def test_the_doc_commands_are_found():
    """The extraction itself, on what the docs hold today: the README's first two commands,
    its learning path in order, and docs/exercises.md's first command."""
    readme = [c.text for c in all_commands() if c.doc == "README.md"]
    assert readme[:2] == ["make lab-up", "make test"]
    lessons = [c.split()[-1] for c in readme if c.startswith("lab exercise run ")]
    assert lessons[0] == "hello-ddp" and lessons[-1] == "set-device-first" and len(lessons) == 12
    assert [c.text for c in all_commands() if c.doc == "docs/exercises.md"][0] == ".venv/bin/lab exercise list"


def check_kill_worker(report: dict) -> None:
    """The default drill: recovered in-process (a spare took the rank's place, state from a
    peer), at most the step in flight redone, weights bit-identical."""
    assert report["verdict"] == "pass" and report["world_size"] == 4
    assert report["recovery_style"]["style"] == "in-process"
    assert report["replacements"] == 1 and 0 <= report["lost_steps"] <= 1
    assert report["final_weights_match_reference"] is True
    assert report["faults"][0]["fault"] == "kill_worker" and report["faults"][0]["rank"] == 1
    recovery = report["recovery"]
    stages = {"detect", "regroup", "state_from_peer", "first_step", "total"}
    assert set(recovery) == stages and all(v is not None and v >= 0 for v in recovery.values()), recovery
    assert recovery["total"] >= recovery["first_step"]
