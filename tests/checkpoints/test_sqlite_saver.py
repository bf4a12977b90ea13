"""Short channel versions of our SQLite saver: increasing, and threads written by LangGraph's SqliteSaver go on."""

from __future__ import annotations

import sqlite3
from typing import Annotated

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from typing_extensions import TypedDict

from checkpoints import open_checkpointer
from checkpoints.sqlite_saver import CompactSqliteSaver, compact_next_version
from graph.contracts.state import ensure_ids, messages_reducer


class _S(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], DeltaChannel(messages_reducer, snapshot_frequency=3)]
    turns: int


def _app(saver):
    g = StateGraph(_S)
    g.add_node("echo", lambda s: {"messages": ensure_ids([AIMessage(f"echo {len(s['messages'])}")]),
                                  "turns": int(s.get("turns") or 0) + 1})
    g.add_edge(START, "echo")
    return g.compile(checkpointer=saver)


def _turn(app, i: int) -> dict:
    return app.invoke({"messages": ensure_ids([HumanMessage(f"hello {i}")])}, {"configurable": {"thread_id": "t"}})


def test_versions_are_short_and_increasing_also_after_langgraphs_long_form():
    assert compact_next_version(None) == "00000001"
    assert compact_next_version("00000041") == "00000042"
    long = SqliteSaver(sqlite3.connect(":memory:")).get_next_version("0" * 31 + "7.5", None)
    assert len(long) > 30 and long.startswith("0" * 31 + "8.")
    nxt = compact_next_version(long)
    assert nxt == "00000009" and nxt > long > "0" * 31 + "7.5"


def test_open_checkpointer_uses_it(tmp_path):
    saver = open_checkpointer(tmp_path / "c.db")
    assert isinstance(saver, CompactSqliteSaver) and isinstance(saver, SqliteSaver)
    _turn(_app(saver), 1)
    versions = saver.get_tuple({"configurable": {"thread_id": "t"}}).checkpoint["channel_versions"]
    assert versions and all(len(str(v)) == 8 for v in versions.values())


def test_a_thread_written_with_long_versions_continues(tmp_path):
    path = tmp_path / "c.db"
    old = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    for i in range(4):  # past one snapshot of the transcript (snapshot_frequency=3)
        _turn(_app(old), i)
    old.conn.close()
    app = _app(open_checkpointer(path))
    for i in range(4, 8):
        out = _turn(app, i)
    texts = [m.content for m in out["messages"]]
    assert texts == [t for i in range(8) for t in (f"hello {i}", f"echo {2 * i + 1}")]
    assert out["turns"] == 8


def _values(saver, config) -> list:
    return [(m.id, m.content) for m in _app(saver).get_state(config).values["messages"]]


def test_histories_read_incrementally_are_langgraphs_at_every_checkpoint_and_after_a_fork(tmp_path):
    """The saver walks back only to the last history it returned; every checkpoint of the thread, a
    fork from an older one included, reads back as LangGraph's own SqliteSaver reads it."""
    path = tmp_path / "c.db"
    saver = open_checkpointer(path)
    app = _app(saver)
    cfg = {"configurable": {"thread_id": "t"}}
    for i in range(6):  # past snapshots (snapshot_frequency=3)
        _turn(app, i)
        app.get_state(cfg)
    older = list(app.get_state_history(cfg))[5].config
    app.update_state(older, {"messages": ensure_ids([HumanMessage("forked")])})
    _turn(app, 6)
    plain = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    for snap in app.get_state_history(cfg):
        assert _values(saver, snap.config) == _values(plain, snap.config)
    assert [m.content for m in app.get_state(cfg).values["messages"]][-3:-1] == ["forked", "hello 6"]


def test_a_read_returns_the_values_written_and_a_deleted_thread_is_forgotten(tmp_path):
    saver = open_checkpointer(tmp_path / "c.db")
    app = _app(saver)
    cfg = {"configurable": {"thread_id": "t"}}
    out = _turn(app, 0)
    first = app.get_state(cfg).values["messages"]
    assert all(a is b for a, b in zip(first, out["messages"]))  # the objects the run wrote, not copies
    again = app.get_state(cfg).values["messages"]
    assert all(a is b for a, b in zip(first, again)) and len(again) == 2  # and the same objects on the next read
    saver.delete_thread("t")
    assert not saver._histories and not saver._written
    assert app.get_state(cfg).values == {}
