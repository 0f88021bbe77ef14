"""Which runtime takes which flag: a flag the chosen runtime does not take is refused in one line
naming the runtime that does, and --ray-address, which names the cluster that drives drills on
any runtime, is checked before anything starts."""

import pytest
from conftest import lab_in_process
from test_cli_errors import assert_one_line_error

from lab.bench import free_port
from lab.workloads import script_path


def test_an_unreachable_ray_address_is_a_one_line_error_at_once(lab):
    port = free_port()  # nothing listens there
    for address, words in (
        (f"127.0.0.1:{port}", ["no Ray cluster answers", str(port)]),
        ("nonsense", ["--ray-address", "HOST:PORT"]),
    ):
        out = lab("exercise", "run", "kill-worker", "--ray-address", address, timeout=120)
        assert_one_line_error(out, *words)
        assert not lab.run_dir.exists(), "nothing may be started on bad input"
        out = lab("up", "--runtime", "ray", "--ray-address", address, timeout=120)
        assert_one_line_error(out, *words)
        assert not lab.run_dir.exists(), "nothing may be started on bad input"


def test_the_ray_runtime_without_an_address_says_what_it_needs(lab):
    for args in (["up", "--runtime", "ray"], ["exercise", "run", "kill-worker", "--runtime", "ray"]):
        assert_one_line_error(lab(*args, timeout=120), "--ray-address")


@pytest.mark.parametrize(
    "verb",
    [
        ["run", "--dry-run", "DIR", script_path("ddp_train")],
        ["up", "--dry-run", "DIR"],
        ["exercise", "run", "kill-worker", "DIR"],
    ],
    ids=["run", "up", "drill"],
)
@pytest.mark.parametrize(
    "flags, taker",
    [
        (["--runtime", "local", "--image", "foo:1"], "docker"),
        (["--runtime", "local", "--overlay", "chaos"], "k8s"),
        (["--runtime", "local", "--context", "kind-x"], "k8s"),
        (["--runtime", "docker", "--hosts", "netns"], "local"),
        (["--runtime", "k8s", "--hosts", "userns"], "local"),
        (["--runtime", "docker", "--namespace", "foo"], "k8s"),
        (["--runtime", "k8s", "--prometheus-port", "9999"], "docker"),  # the cluster's Prometheus, not the lab's
        (["--image", "foo:1"], "docker"),  # the default runtime takes no image either
        # Given at its default value, a flag is given all the same: it was once let through in silence.
        (["--runtime", "docker", "--overlay", "cpu-gloo"], "k8s"),
        (["--runtime", "k8s", "--hosts", "auto"], "local"),
        (["--runtime", "local", "--namespace", "default"], "k8s"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, list) else v,
)
def test_a_flag_the_chosen_runtime_does_not_take_is_refused_naming_who_does(lab, capsys, verb, flags, taker):
    i = verb.index("DIR")
    out = lab_in_process(capsys, *verb[:i], *flags, "--run-dir", str(lab.run_dir), *verb[i + 1 :])
    if verb[0] == "exercise" and "k8s" in flags:  # drills do not run on k8s: --runtime's own choices say so
        assert_one_line_error(out, "--runtime", "k8s")
    else:
        assert_one_line_error(out, flags[-2], f"--runtime {taker}")
    assert not lab.run_dir.exists()


def test_ray_address_drives_a_drill_on_any_runtime_and_is_a_ray_flag_elsewhere(lab):
    """For drills --ray-address names the cluster that drives them (any runtime); `lab run` on the
    local runtime takes no cluster."""
    out = lab("run", "--dry-run", "--runtime", "local", "--ray-address", "1.2.3.4:6379", script_path("ddp_train"))
    assert_one_line_error(out, "--ray-address", "--runtime ray")
