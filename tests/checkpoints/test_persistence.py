"""State survives a process restart with the SQLite checkpointer."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess]

REPO = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent('''
    import json, sys
    from checkpoints import open_checkpointer
    from graph import build_graph
    from graph.conversation import Conversation
    from graph.contracts.settings import Settings
    from nodes.embedded.offline_model import OfflineChatModel
    from tests.conftest import KeywordRouter
    db, biz, text = sys.argv[1], sys.argv[2], sys.argv[3]
    r = KeywordRouter()
    s = Settings.from_env(db=db, business_db=biz)
    g = build_graph(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(db), settings=s, router=r)
    res = Conversation("persist-1", graph=g).send(text)
    v = g.get_state({"configurable": {"thread_id": "persist-1"}}).values
    print(json.dumps({"agent": res.agent, "turn": res.turn, "path": [h.to_agent for h in res.handoff_path],
                      "messages": len(v["messages"]), "active": v["active_agent"]}))
''')


def _run(tmp_path: Path, text: str) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "cp.db"), str(tmp_path / "biz.db"), text],
                         cwd=REPO, capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "SWITCHBOARD_HOME": str(tmp_path / "home")})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_thread_survives_process_restart(tmp_path):
    first = _run(tmp_path, "Where is my refund?")
    assert first["agent"] == "refunds" and first["turn"] == 1
    second = _run(tmp_path, "and the older refund?")  # a new Python process, same database file
    assert second["turn"] == 2
    assert second["messages"] > first["messages"]
    assert second["path"] == ["refunds"]  # continued at the stored active agent, without triage
    assert second["active"] == "refunds"
