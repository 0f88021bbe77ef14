"""Bad input to the drills on your own script: one line, a non-zero exit, nothing started."""

import pytest
from conftest import REPO
from test_cli_errors import assert_one_line_error

SNAPSHOT = str(REPO / "tests" / "user_scripts" / "snapshot_every_epoch.py")


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "kill-worker", "--script", "no/such.py"], ["--script", "no such file", "no/such.py"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--progress-regex", "(step"], ["--progress-regex", "regular"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--rtol", "0.1"], ["--rtol", "--compare"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--rtol", "-1", "--compare", "r.pt"], ["--rtol", "-1"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--compare", "/abs/r.pt"], ["--compare", "relative"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--compare", "../r.pt"], ["--compare", "not above it"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--deadline", "0"], ["--deadline", "positive"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--target-rank", "4"], ["--target-rank", "[0, 4)", "4"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--at-step", "0"], ["--at-step", "0"]),
        (["run", "kill-node", "--script", SNAPSHOT, "--nodes", "1"], ["kill-node", "2 nodes", "--nodes 1"]),
        (
            ["run", "kill-worker", "--script", SNAPSHOT, "--runtime", "k8s"],
            ["--runtime k8s", "lab image build", "--image REF"],
        ),
        (["run", "kill-worker", "--ckpt-dir", "ckpt"], ["--ckpt-dir", "only with --script"]),
        (["run", "kill-worker", "--workdir", "."], ["--workdir", "only with --script"]),
        (["run", "kill-worker", "--script", SNAPSHOT, "--workdir", "no/such/dir"], ["--workdir", "no such folder"]),
        (
            ["run", "kill-worker", "--script", SNAPSHOT, "--workdir", ".", "--runtime", "docker"],
            ["--workdir", "docker", "--runtime local"],
        ),
        (["run", "kill-worker", "--", "--epochs", "3"], ["arguments after --", "--script"]),
        (["matrix", "--faults", "kill-worker"], ["--script"]),
        (["matrix", "--script", SNAPSHOT], ["--faults", "kill-worker"]),
        (["matrix", "--script", SNAPSHOT, "--faults", "kill-worker,nosuch"], ["nosuch", "choose from"]),
        (["matrix", "--script", SNAPSHOT, "--faults", "collective-mismatch"], ["collective-mismatch", "hook"]),
        (["run", "collective-mismatch", "--script", SNAPSHOT], ["cannot run on your script", "collective_loop"]),
        (["run", "kill-rendezvous-host", "--script", SNAPSHOT], ["cannot run on your script", "kill-node"]),
        # A drill's flag that acts on the lab's trainer only is refused on a script, never ignored.
        (["run", "kill-node", "--script", SNAPSHOT, "--rejoin"], ["--rejoin", "elastic", "add --elastic"]),
        (["run", "kill-node", "--script", SNAPSHOT, "--elastic", "--nodes", "1"], ["kill-node", "2 nodes"]),
        (["run", "hang-rank", "--script", SNAPSHOT, "--watchdog", "3"], ["--watchdog", "registers none"]),
        # Given at its default value, a flag is given all the same (issue 54): refused, not ignored.
        (["run", "kill-worker", "--script", SNAPSHOT, "--save", "sync"], ["--save", "drop --save, or drop --script"]),
        (["run", "kill-worker", "--deadline", "180"], ["--deadline", "only with --script"]),
        (["run", "kill-worker", "--at-time", "15"], ["--at-time", "only with --script"]),
    ],
)
def test_bad_script_drill_input_is_one_line(lab, args, words):
    out = lab("exercise", *args)
    assert_one_line_error(out, *words)
    assert not lab.run_dir.exists(), "nothing may be started on bad input"
