"""lab.node.quick_exit: a node's agent, keeper and ranks leave with the status the interpreter
would give, their output flushed, and without its teardown (no atexit handler runs)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lab.node.quick_exit import status_of


def _raise(error: BaseException):
    def main():
        raise error

    return main


@pytest.mark.parametrize(
    ("main", "status"),
    [
        (lambda: None, 0),
        (lambda: 0, 0),
        (lambda: 3, 3),
        (_raise(SystemExit(4)), 4),
        (_raise(SystemExit(None)), 0),
        (_raise(SystemExit("usage: no script given")), 1),
        (_raise(ValueError("bad")), 1),
        (_raise(KeyboardInterrupt()), 130),
    ],
)
def test_the_status_is_the_one_the_interpreter_would_give(main, status):
    assert status_of(main) == status


def test_what_the_interpreter_would_print_is_printed(capsys):
    status_of(_raise(SystemExit("usage: no script given")))
    status_of(_raise(ValueError("a bad flag")))
    err = capsys.readouterr().err
    assert "usage: no script given" in err
    assert "Traceback" in err and "ValueError: a bad flag" in err


def _child(body: str) -> subprocess.CompletedProcess:
    program = (
        "import atexit, sys\n"
        "from lab.node.quick_exit import run_and_exit_now\n"
        "atexit.register(lambda: print('teardown ran', flush=True))\n"
        "sys.stdout.write('written, not flushed')\n" + body
    )
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)


def test_a_process_leaves_with_its_output_flushed_and_no_teardown():
    done = _child("run_and_exit_now(lambda: 5)\n")
    assert done.returncode == 5
    assert done.stdout == "written, not flushed"  # flushed; the atexit handler never ran


def test_an_uncaught_exception_is_printed_and_the_status_is_1():
    failed = _child("run_and_exit_now(lambda: 1 / 0)\n")
    assert failed.returncode == 1
    assert "ZeroDivisionError" in failed.stderr
    assert failed.stdout == "written, not flushed"
