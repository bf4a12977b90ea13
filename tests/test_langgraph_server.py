"""`langgraph dev` (langgraph-cli, in-memory server) serves the graph from langgraph.json on 127.0.0.1.

Starts the server in the background on a free port with ``--no-browser`` and the CLI's analytics and version
check switched off (nothing leaves the machine), polls ``/ok`` with a time bound, runs one conversation turn
through the server's HTTP API, checks that the run's events reached the event log, and stops the server.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from checkpoints.event_log import open_event_log

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[1]
STARTUP_LIMIT_S = 120


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _call(url: str, body: dict | None = None, timeout: float = 60) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"},
                                 method="POST" if body is not None else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def offline_env(home: Path) -> dict:
    """The environment for a local `langgraph dev` that sends nothing anywhere."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))}
    env.update(LANGGRAPH_CLI_NO_ANALYTICS="1", LANGGRAPH_NO_VERSION_CHECK="true", LANGSMITH_TRACING="false",
               SWITCHBOARD_HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def test_langgraph_dev_serves_the_graph(tmp_path):
    port = _free_port()
    home = tmp_path / "home"
    log = (tmp_path / "server.log").open("w")
    exe = Path(sys.executable).parent / "langgraph"
    proc = subprocess.Popen([str(exe), "dev", "--config", str(REPO / "langgraph.json"), "--host", "127.0.0.1",
                             "--port", str(port), "--no-browser", "--no-reload"],
                            cwd=tmp_path, env=offline_env(home), stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_LIMIT_S
        ok = None
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                ok = _call(f"{base}/ok", timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        assert ok is not None and ok.get("ok") is True, (tmp_path / "server.log").read_text()[-3000:]
        assistants = _call(f"{base}/assistants/search", {})
        assert [a["graph_id"] for a in assistants] == ["switchboard"]
        thread = _call(f"{base}/threads", {})["thread_id"]
        out = _call(f"{base}/threads/{thread}/runs/wait",
                    {"assistant_id": "switchboard",
                     "input": {"messages": [{"role": "user", "content": "I was charged twice for my coffee"}]}})
        assert out["outcome"]["agent"] == "billing" and out["outcome"]["status"] == "answered"
        kinds = [e.kind for e in open_event_log(home / "switchboard.db").events(thread)]
        assert kinds[0] == "run_started" and kinds[-1] == "run_completed" and "handoff_accepted" in kinds
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
