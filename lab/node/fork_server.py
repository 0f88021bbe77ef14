"""The node's fork server, forked from the agent once torch is loaded, not started afresh.

multiprocessing's forkserver execs a new interpreter that imports its preload list: on a
node that is torch a second time, after the agent (torchrun) has imported it once. On two
cores with two nodes starting together that second import was most of the start-up (about
2.5 s of the 4.3-5.0 s from launch to the first step, lab/bench/startup.py). Here the agent,
torch loaded, forks the server, which has it already and imports the rest of its preload
list (multiprocessing's own `preload`) while the agent goes on: the server is the same
program at the same point, serving multiprocessing's own protocol
(`multiprocessing.forkserver.main`), so torchrun's workers are forked exactly as before.

The fork happens before the agent starts any thread (its exporter, its rendezvous store,
its watchers), so the server starts with one thread, as an exec'd one would. It owns no
write end of the "alive" pipe: when the agent exits, the server sees EOF and exits too.
Written against Python 3.11's multiprocessing (the version the venv and the images pin);
`fork_server_here` checks the attributes it sets and refuses another layout in one line.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from multiprocessing import connection, forkserver, resource_tracker, util
from typing import Any

_connection: Any = connection  # arbitrary_address is not in its stubs
_SERVER_STATE = ("_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid")


def fork_server_here(preload: list[str] | None = None) -> int:
    """Fork multiprocessing's fork server from this process; returns its pid. The server
    imports `preload` (modules) before it serves, as an exec'd one would.

    Call it from the main thread, with no other thread running: a forked process keeps
    only the forking thread, and a lock another thread held stays held in the child."""
    server: Any = forkserver._forkserver  # private attributes: checked just below
    if not all(hasattr(server, name) for name in _SERVER_STATE):
        raise RuntimeError(f"this Python's multiprocessing.forkserver has no {_SERVER_STATE}: cannot fork its server")
    if server._forkserver_pid is not None:
        raise RuntimeError("a fork server is already running in this process")
    resource_tracker.ensure_running()  # the workers' tracker, as ForkServer.ensure_running starts it
    listener = socket.socket(socket.AF_UNIX)
    address = _connection.arbitrary_address("AF_UNIX")
    listener.bind(address)
    if not util.is_abstract_socket_namespace(address):
        os.chmod(address, 0o600)
    listener.listen()
    alive_r, alive_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):  # else the server's workers would print it again at exit
        stream.flush()
    pid = os.fork()
    if pid == 0:
        _serve(listener, alive_r, alive_w, preload or [])
    listener.close()
    os.close(alive_r)
    server._forkserver_address, server._forkserver_alive_fd, server._forkserver_pid = address, alive_w, pid
    return pid


def forget_start_method() -> None:
    """In a process forked from the server: multiprocessing set its start method from the
    parent's; a fresh interpreter has none, and a script may set its own (set_start_method
    would raise "context has already been set" otherwise)."""
    import multiprocessing

    multiprocessing.set_start_method(None, force=True)


def _serve(listener: socket.socket, alive_r: int, alive_w: int, preload: list[str]) -> None:
    """The child: multiprocessing's server loop, until the agent's end of the pipe closes."""
    code = 0
    try:
        os.close(alive_w)
        forkserver.main(listener.fileno(), alive_r, preload=preload)
    except SystemExit as e:  # main's way out: every client gone
        code = e.code if isinstance(e.code, int) else 0
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        os._exit(code)  # never the agent's atexit handlers, nor its buffered output
