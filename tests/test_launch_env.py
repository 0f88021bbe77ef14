"""lab.node.launch sets what the lab needs loudly and never overrides what the user set, but the
node's temp dir, which is the lab's to remove."""

import pytest

from lab.node.launch import FLIGHT_RECORDER, RESTART_WORKAROUND, apply_env, lab_environment, split_lab_flags


def test_unset_variables_are_set_and_logged():
    environ, log = {}, []
    apply_env({"A": "1"}, environ, log.append)
    assert environ == {"A": "1"}
    assert log == ["[lab.node.launch] setting A=1"]


def test_a_user_value_is_kept_with_a_warning_naming_both_values():
    environ, log = {"A": "mine"}, []
    apply_env({"A": "lab"}, environ, log.append)
    assert environ == {"A": "mine"}
    assert "WARNING" in log[0] and "A=mine" in log[0] and "lab" in log[0]


def test_the_nodes_temp_dir_is_the_labs_whatever_the_user_set():
    environ, log = {"TMPDIR": "/home/me/tmp", "A": "mine"}, []
    applied = apply_env({"TMPDIR": "/tmp/tlab-tmp-abc12", "A": "lab"}, environ, log.append)
    assert environ == {"TMPDIR": "/tmp/tlab-tmp-abc12", "A": "mine"} and applied == {"TMPDIR": "/tmp/tlab-tmp-abc12"}
    assert "setting TMPDIR=/tmp/tlab-tmp-abc12 (yours, /home/me/tmp," in log[0]


def test_restart_workaround_is_on_by_default_and_off_with_torch_defaults():
    assert lab_environment({}, torch_defaults=False) == {**FLIGHT_RECORDER, **RESTART_WORKAROUND}
    assert lab_environment({"X": "1"}, torch_defaults=True) == {**FLIGHT_RECORDER, "X": "1"}


def test_lab_flags_stop_at_the_first_torchrun_flag():
    flags, rest = split_lab_flags(["--env=A=b=c", "--nnodes=2", "--env=B=1", "s.py"])
    assert flags.env == {"A": "b=c"} and flags.torch_defaults is False
    assert rest == ["--nnodes=2", "--env=B=1", "s.py"]


def test_malformed_env_flag_is_a_one_line_error():
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        split_lab_flags(["--env=NOVALUE"])
