"""LangSmith compatibility: with LANGSMITH_TRACING=true a run is traced with no code change; by default nothing
is sent.  A local stand-in for the LangSmith API on 127.0.0.1 records what the langsmith client posts."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

# A plain script using only the public API; nothing in it (or in switchboard) mentions LangSmith.  The last line
# waits for LangChain's background tracer so the test does not depend on exit-time flushing.
SCRIPT = """
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from graph import build_graph
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing.scripted import KeywordRouter
r = KeywordRouter()
g = build_graph(model=OfflineChatModel(router=r), checkpointer=InMemorySaver(), router=r)
out = g.invoke({"messages": [HumanMessage("I was charged twice for my coffee")]}, {"configurable": {"thread_id": "ls"}})
print("answered by", out["outcome"].agent)
from langchain_core.tracers.langchain import wait_for_all_tracers
wait_for_all_tracers()
"""

pytestmark = [pytest.mark.subprocess]


class _Recorder(BaseHTTPRequestHandler):
    requests: list = []

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        type(self).requests.append((self.command, self.path, body))
        payload = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PATCH = do_PUT = _answer

    def log_message(self, *args):  # quiet
        pass


def _run(env_extra: dict, tmp_path: Path) -> tuple[list, str]:
    _Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))}
        env.update(SWITCHBOARD_HOME=str(tmp_path / "home"), LANGSMITH_ENDPOINT=f"http://127.0.0.1:{server.server_port}",
                   LANGSMITH_API_KEY="lsv2-test-key", LANGSMITH_DISABLE_RUN_COMPRESSION="true", **env_extra)
        proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return list(_Recorder.requests), proc.stdout
    finally:
        server.shutdown()
        server.server_close()


def test_nothing_is_sent_by_default(tmp_path):
    """An API key alone (tracing not switched on) sends nothing."""
    requests, out = _run({}, tmp_path)
    assert "answered by billing" in out
    assert requests == []


def test_langsmith_tracing_true_traces_the_graph_without_code_change(tmp_path):
    requests, out = _run({"LANGSMITH_TRACING": "true", "LANGSMITH_PROJECT": "switchboard-test"}, tmp_path)
    assert "answered by billing" in out
    posts = [(path, body) for method, path, body in requests if method == "POST" and "/runs" in path]
    assert posts, [(m, p) for m, p, _ in requests]
    sent = b"".join(body for _, body in posts)
    for name in (b'"switchboard"', b'"triage"', b'"billing"'):  # the root run and the agents' node runs
        assert name in sent
