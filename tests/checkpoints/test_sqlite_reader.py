"""The listing commands' read-only look at a SQLite checkpoint file (checkpoints.sqlite_reader) gives what the saver's
API gives (thread summaries, the pending approval), imports no LangGraph, and steps aside for a file it cannot read."""

from __future__ import annotations

import subprocess
import sys

import pytest

from checkpoints import open_checkpointer
from checkpoints.sqlite_reader import SqliteCheckpointReader, Unreadable
from checkpoints.threads import pending_interrupt, thread_summaries
from graph.contracts.views import plain
from graph.conversation import Conversation
from tests.conftest import BIG, REPO, approver_desk


def test_the_reader_lists_threads_and_the_pending_approval_as_the_saver_does(isolated_home):
    g, _ = approver_desk(isolated_home)
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


def _reader_in_fresh_process(home, body: str, packages: tuple[str, ...]) -> list[str]:
    """Run ``body`` (``R`` is the reader class, ``db`` the checkpoint file's path) in a new interpreter, then print the
    ``packages`` it imported; returns the printed lines (the process must exit 0)."""
    code = (f"import sys; from checkpoints.sqlite_reader import SqliteCheckpointReader as R; "
            f"db = {str(home / 'switchboard.db')!r}; {body}; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {packages!r}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_the_reader_imports_no_langgraph(isolated_home):
    g, _ = approver_desk(isolated_home)
    Conversation("t-big", graph=g).send(BIG)
    lines = _reader_in_fresh_process(
        isolated_home, "from checkpoints.threads import thread_summaries as s; r = R(db); "
        "print(len(s(r)), r.pending_interrupt('t-big')['kind'])", ("langgraph", "langchain_core", "pydantic"))
    assert lines == ["1 refund_approval", "[]"]


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


def _light(values: dict) -> dict:
    """What ``history`` reads of state values: the owner and the transcript channels, messages as (role, id, name,
    content, tool-call ids)."""
    from checkpoints.threads import _role

    msgs = [(_role(m), m.id, m.name, str(m.content), [c["id"] for c in m.tool_calls or []] if _role(m) == "ai" else [])
            for m in values.get("messages") or []]
    return {"owner": plain(values.get("owner")), "messages": msgs,
            "handoff_path": [plain(h) for h in values.get("handoff_path") or []],
            "expert_calls": values.get("expert_calls") or []}


def test_the_reader_rebuilds_the_transcript_as_the_saver_does(isolated_home):
    """``history`` reads a SQLite file without LangGraph: the same transcript, turns and rows as the saver's replay
    (a multi-turn thread, a thread paused for approval, a turn resumed after the approval)."""
    from checkpoints.threads import thread_turns, thread_values
    from graph.app.cli_output import history_rows
    from tests.conftest import ANN
    g, _ = approver_desk(isolated_home)
    chat = Conversation("t-multi", graph=g)
    for text in ("I was charged twice for my coffee", "yes please refund the duplicate", "and where is my new card?",
                 "thanks, bye"):
        chat.send(text)
    assert Conversation("t-big", graph=g).send(BIG).status == "awaiting_approval"
    db = isolated_home / "switchboard.db"
    saver, reader = open_checkpointer(db), SqliteCheckpointReader(db)
    for tid in ("t-multi", "t-big", "resumed"):
        if tid == "resumed":
            tid = "t-big"
            Conversation(tid, graph=g, context=ANN).resume({"decision": "approve"})
            assert pending_interrupt(reader, tid) is None
        by_saver, by_reader = thread_values(saver, tid), thread_values(reader, tid)
        assert _light(by_reader) == _light(by_saver) and len(by_saver["messages"]) > 2
        for key in ("turn", "owner", "outcome", "pending_approval", "active_agent"):  # the models as their JSON
            assert plain(by_reader.get(key)) == plain(by_saver.get(key))
        rows = [history_rows(thread_turns(s, tid, v), pending_interrupt(s, tid)) for s, v in
                ((saver, by_saver), (reader, by_reader))]
        assert rows[0] == rows[1] and rows[0]
    assert len(thread_turns(reader, "t-multi")) == 4 and thread_values(reader, "nope") == {}


def test_the_transcript_fold_is_add_messages(isolated_home):
    """Replacement by id, RemoveMessage and REMOVE_ALL_MESSAGES fold as ``graph.contracts.state.messages_reducer`` does."""
    from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    from checkpoints.sqlite_reader import _ext_typed, _fold_messages, _load
    from graph.contracts.state import messages_reducer

    serde = JsonPlusSerializer()
    batches = [
        [[HumanMessage("a", id="1"), AIMessage("b", id="2", name="triage")], [HumanMessage("c", id="3")],
         [AIMessage("b2", id="2", name="billing"), RemoveMessage(id="1")], [HumanMessage("d", id="4")]],
        [[HumanMessage("a", id="1")], [RemoveMessage(id=REMOVE_ALL_MESSAGES), HumanMessage("z", id="9")],
         [AIMessage("y", id="8")]],
    ]
    for writes in batches:
        expected = [(type(m).__name__, m.id, str(m.content), m.name) for m in messages_reducer([], writes)]
        stored = [_load(*serde.dumps_typed(w), _ext_typed) for w in writes]
        assert [(m.kind, m.id, str(m.content), m.name) for m in _fold_messages(stored)] == expected


def test_history_reads_the_file_without_langgraph(isolated_home):
    g, _ = approver_desk(isolated_home)
    Conversation("t-big", graph=g).send(BIG)
    lines = _reader_in_fresh_process(
        isolated_home, "from checkpoints.threads import thread_turns as t; print(len(t(R(db), 't-big')))",
        ("langgraph", "langchain_core", "sqlalchemy"))
    assert lines == ["1", "[]"]
