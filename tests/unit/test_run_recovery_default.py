"""`lab run` with no --recovery picks the fastest style the job survives (lab.cli.starting): in-process
for a script that trains in lab.inprocess's attempts, on a runtime with keepers; the tuned
restart for any other script or runtime; torchrun's rendezvous where the job needs it. The plan
--dry-run prints is the one that would run; nothing starts."""

import pytest
from conftest import lab_in_process

from lab import recovery
from lab.workloads import script_path


@pytest.mark.parametrize(
    ("script", "flags", "style"),
    [
        ("trainer", [], f"in-process ({recovery.AUTO_IN_PROCESS})"),
        ("inprocess_train", ["--runtime", "docker"], f"in-process ({recovery.AUTO_IN_PROCESS})"),
        ("ddp_train", [], "restart (a fixed-size job"),  # it does not opt in
        ("trainer", ["--runtime", "k8s"], "restart (a fixed-size job"),  # no keepers in pods
        ("trainer", ["--rdzv-backend", "c10d"], "torchrun (--rdzv-backend c10d is one of torch's rendezvous)"),
        ("trainer", ["--torch-defaults"], "torchrun (--torch-defaults runs torch's own c10d path)"),
    ],
)
def test_lab_run_without_recovery_picks_in_process_only_for_a_script_that_opted_in(
    capsys, tmp_path, script, flags, style
):
    ran = lab_in_process(capsys, "run", "--dry-run", "--run-dir", str(tmp_path / "run"), *flags, script_path(script))
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith(f"# recovery: {style}"), ran.stdout
