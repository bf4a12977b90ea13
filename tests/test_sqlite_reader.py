"""The listing commands' read-only look at a SQLite checkpoint file (checkpoints.sqlite_reader) gives what the saver's
API gives (thread summaries, the pending approval), imports no LangGraph, and steps aside for a file it cannot read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from checkpoints import open_checkpointer
from checkpoints.sqlite_reader import SqliteCheckpointReader, Unreadable
from checkpoints.threads import pending_interrupt, thread_summaries
from graph.conversation import Conversation
from tests.test_approval import BIG, REPO, _setup


def test_the_reader_lists_threads_and_the_pending_approval_as_the_saver_does(isolated_home):
    g, _ = _setup(isolated_home)
    assert Conversation("t-big", graph=g).send(BIG).status == "awaiting_approval"
    assert Conversation("t-small", graph=g).send("I was charged twice for my coffee").status == "answered"
    db = isolated_home / "switchboard.db"
    saver, reader = open_checkpointer(db), SqliteCheckpointReader(db)
    listed = thread_summaries(reader)
    assert [r["thread_id"] for r in listed] == ["t-small", "t-big"]
    assert listed == thread_summaries(saver) and thread_summaries(reader, tenant_id="t_other") == []
    paused = pending_interrupt(reader, "t-big")
    assert paused == pending_interrupt(saver, "t-big")
    assert paused["kind"] == "refund_approval" and paused["amount_minor"] == 2380
    assert pending_interrupt(reader, "t-small") is None and pending_interrupt(reader, "nope") is None


def test_the_reader_imports_no_langgraph(isolated_home):
    g, _ = _setup(isolated_home)
    Conversation("t-big", graph=g).send(BIG)
    code = ("import sys; from checkpoints.sqlite_reader import SqliteCheckpointReader as R; "
            "from checkpoints.threads import thread_summaries as s; "
            f"r = R({str(isolated_home / 'switchboard.db')!r}); print(len(s(r)), r.pending_interrupt('t-big')['kind']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('langgraph', 'langchain_core', 'pydantic')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1 refund_approval", "[]"]


def test_a_file_it_cannot_read_is_unreadable(tmp_path):
    bad = tmp_path / "garbage.db"
    bad.write_bytes(b"not a database at all" * 100)
    with pytest.raises(Unreadable):
        SqliteCheckpointReader(bad).latest_channel_values()
    other = tmp_path / "other.db"
    import sqlite3

    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(Unreadable):
        SqliteCheckpointReader(other)
