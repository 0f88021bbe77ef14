"""make test's system tier runs two tests at a time and relies on pytest-xdist's loadgroup to
keep tests that share a fixed resource (loopback ports, the test Ray cluster) in one worker.
With pytest 9 the groups silently vanished (xdist 3.8 tags the nodeid pytest 9 no longer
reads) and loopback labs collided; this proves, with the installed versions, that they hold."""

import pytest

pytest_plugins = ["pytester"]

SUITE = """
import os, pathlib, time
import pytest

pytestmark = pytest.mark.xdist_group("shared")  # as tests/test_ci_fresh_venv.py marks a module

@pytest.mark.parametrize("i", range(4))
def test_grouped(i):
    time.sleep(0.3)
    pathlib.Path(f"grouped{i}").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""

OTHERS = """
import os, pathlib, time

def test_free_a():
    time.sleep(0.5)
    pathlib.Path("free_a").write_text(os.environ["PYTEST_XDIST_WORKER"])

def test_free_b():
    time.sleep(0.5)
    pathlib.Path("free_b").write_text(os.environ["PYTEST_XDIST_WORKER"])
"""


def test_a_groups_tests_run_in_one_worker(pytester: pytest.Pytester):
    pytester.makepyfile(test_grouped=SUITE, test_others=OTHERS)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    grouped = {(pytester.path / f"grouped{i}").read_text() for i in range(4)}
    assert len(grouped) == 1, f"the group's tests ran in {sorted(grouped)}"
