"""A fork server for the documentation examples (``tests/scenarios/test_docs_examples.py``): runs ``switchboard …`` commands and
Python snippets in a child forked from a process that has already imported the project, so a documented command
costs its own work, not the interpreter's start-up and LangGraph's imports (seconds each on a loaded machine).

What runs is what a user runs: the child gets the command's argv, environment, working folder and standard streams
(the shim's own file descriptors, passed over a Unix socket) and calls the ``switchboard`` entry point
(``graph.app.cli.main``) or executes the snippet as ``__main__``; its exit status goes back to the shim. Nothing is
shared between two commands but the imported modules: each is a fresh fork.

    python tests/docs_runner.py serve SOCKET     # the server (the test starts it)
    SB_DOCS_SOCKET=SOCKET switchboard ARGS…      # the shim, written by :func:`write_shim`
"""

from __future__ import annotations

import json
import os
import socket
import sys
import traceback
from pathlib import Path

__all__ = ["serve", "write_shim", "run_python"]

#: The shim put first on PATH as ``switchboard`` (stdlib only, started with -IS: a few milliseconds).
SHIM = '''#!{python} -IS
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["SB_DOCS_SOCKET"])
msg = {{"kind": "cli", "argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}
socket.send_fds(s, [json.dumps(msg).encode()], [0, 1, 2])
s.shutdown(socket.SHUT_WR)
data = b""
while chunk := s.recv(64):
    data += chunk
sys.exit(int(data or b"1"))
'''


def write_shim(folder: Path) -> Path:
    """Write the ``switchboard`` shim into ``folder`` (made executable) and return its path."""
    path = folder / "switchboard"
    path.write_text(SHIM.format(python=sys.executable))
    path.chmod(0o755)
    return path


def run_python(sock_path: str, code: str, env: dict[str, str], cwd: str, stdout: int, stderr: int) -> int:
    """Run ``code`` as ``__main__`` in a fork of the server at ``sock_path`` (stdin empty, output to the file
    descriptors ``stdout``/``stderr``); returns its exit status."""
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(sock_path)
            msg = {"kind": "python", "code": code, "env": env, "cwd": cwd}
            socket.send_fds(s, [json.dumps(msg).encode()], [devnull, stdout, stderr])
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(64):
                data += chunk
        return int(data or b"1")
    finally:
        os.close(devnull)


def _warm() -> None:
    """Import what every command needs (CLI, builder, conversation, stores, the offline model and the shipped
    router), without opening any database or home."""
    import nodes.embedded.offline_model  # noqa: F401
    from checkpoints import open_checkpointer  # noqa: F401
    from checkpoints.business import repository  # noqa: F401
    from checkpoints.business.migrate import upgrade  # noqa: F401
    from nodes.router import default_router

    default_router().route("warm up")


def _child(msg: dict, fds: list[int]) -> int:
    for target, fd in zip((0, 1, 2), fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(msg["cwd"])
    os.environ.clear()
    os.environ.update(msg["env"])
    sys.path[0] = msg["cwd"]
    if msg["kind"] == "cli":
        from graph.app.cli import main

        sys.argv = ["switchboard", *msg["argv"]]
        try:
            main()
        except SystemExit as exc:
            code = exc.code
            return code if isinstance(code, int) else (0 if code is None else 1)
        return 0
    sys.argv = ["-"]
    try:
        exec(compile(msg["code"], "<docs example>", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the snippet failed: its traceback on its stderr, exit 1
        traceback.print_exc()
        return 1
    return 0


def serve(sock_path: str) -> None:
    """Warm up, then answer requests on ``sock_path`` one at a time, each in a fork, until killed."""
    _warm()
    sys.stdout.flush()
    sys.stderr.flush()
    server = socket.socket(socket.AF_UNIX)
    server.bind(sock_path)
    server.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        with conn:
            data, fds, _, _ = socket.recv_fds(conn, 4 << 20, 3)
            while chunk := conn.recv(1 << 20):
                data += chunk
            pid = os.fork()
            if pid == 0:
                server.close()
                code = 1
                try:
                    code = _child(json.loads(data), fds)
                finally:
                    try:
                        sys.stdout.flush()
                        sys.stderr.flush()
                    finally:
                        os._exit(code)
            for fd in fds:
                os.close(fd)
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            conn.sendall(str(code if code >= 0 else 128 - code).encode())


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "serve":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        serve(sys.argv[2])
    else:
        sys.exit("usage: python tests/docs_runner.py serve SOCKET")
