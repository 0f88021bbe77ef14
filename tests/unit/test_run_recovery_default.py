"""`lab run`'s recovery style (lab.cli.starting): with no --recovery, the tuned restart, or
torchrun's rendezvous where the job needs it (in-process only when asked: the keepers export no
agent metrics yet, which `lab up`'s monitoring reads); asked, in-process for a script that trains
in lab.inprocess's attempts, on a runtime with keepers. The plan --dry-run prints is the one that
would run; nothing starts."""

import pytest
from conftest import lab_in_process

from lab.workloads import script_path


@pytest.mark.parametrize(
    ("script", "flags", "style"),
    [
        ("trainer", [], "restart (a fixed-size job"),
        ("trainer", ["--recovery", "in-process"], "in-process (asked"),
        ("inprocess_train", ["--runtime", "docker", "--recovery", "in-process"], "in-process (asked"),
        ("ddp_train", [], "restart (a fixed-size job"),
        ("trainer", ["--runtime", "k8s"], "restart (a fixed-size job"),  # no keepers in pods
        ("trainer", ["--rdzv-backend", "c10d"], "torchrun (--rdzv-backend c10d is one of torch's rendezvous)"),
        ("trainer", ["--torch-defaults"], "torchrun (--torch-defaults runs torch's own c10d path)"),
    ],
)
def test_lab_run_takes_in_process_when_asked_and_the_restart_by_default(capsys, tmp_path, script, flags, style):
    ran = lab_in_process(capsys, "run", "--dry-run", "--run-dir", str(tmp_path / "run"), *flags, script_path(script))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"# recovery: {style}"), ran.stdout
