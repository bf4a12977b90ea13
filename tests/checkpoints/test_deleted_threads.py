"""A deleted thread stays deleted: late checkpoint writes of a run that was in flight are refused by both savers
(``checkpoints.sqlite_saver``, ``checkpoints.postgres_saver``), directly and through the graph."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from checkpoints import open_checkpointer
from graph.contracts.errors import ThreadDeleted
from graph.conversation import Conversation
from nodes.testing.hold import HoldAtNode
from tests.conftest import postgres_database

TURN = "I was charged twice for my coffee"  # entry -> triage -> billing


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver_target(request, tmp_path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "checkpoints.db")
        return
    with postgres_database() as url:
        yield url


def _close(saver: Any) -> None:
    pool = getattr(saver, "conn", None)
    if hasattr(pool, "getconn"):
        pool.close()


def _first_checkpoint(saver: Any, tid: str) -> dict:
    config = {"configurable": {"thread_id": tid, "checkpoint_ns": ""}}
    return saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})


def test_late_put_and_put_writes_after_delete_are_refused(saver_target: str) -> None:
    saver = open_checkpointer(saver_target)
    try:
        before = _first_checkpoint(saver, "t-del")
        _first_checkpoint(saver, "t-kept")
        saver.delete_thread("t-del")
        with pytest.raises(ThreadDeleted, match="thread t-del was deleted"):
            saver.put(before, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        with pytest.raises(ThreadDeleted):
            saver.put_writes(before, [("messages", "late")], "task-1")
        assert saver.get_tuple({"configurable": {"thread_id": "t-del"}}) is None
        assert list(saver.list({"configurable": {"thread_id": "t-del"}})) == []
        assert saver.is_deleted("t-del") and not saver.is_deleted("t-kept")
        saver.delete_thread("t-del")  # deleting again converges on the same state
        # the guarantee lives in the database: a second saver (another process, an engine's saver) is refused too
        other = open_checkpointer(saver_target)
        try:
            with pytest.raises(ThreadDeleted):
                _first_checkpoint(other, "t-del")
            assert other.get_tuple({"configurable": {"thread_id": "t-kept"}}) is not None  # other threads unharmed
        finally:
            _close(other)
    finally:
        _close(saver)


@pytest.mark.postgres
def test_langgraphs_own_postgres_saver_is_refused_too() -> None:
    """The tables are shared with the engines of ``switchboard serve``, whose savers are LangGraph's own."""
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with postgres_database() as url:
        ours = open_checkpointer(url)
        try:
            before = _first_checkpoint(ours, "t-del")
            ours.delete_thread("t-del")
            with psycopg.connect(url, autocommit=True, prepare_threshold=0, row_factory=dict_row) as conn:
                plain = PostgresSaver(conn)
                with pytest.raises(psycopg.Error, match="thread deleted"):
                    plain.put(before, empty_checkpoint(), {"source": "loop", "step": 0}, {})
                with pytest.raises(psycopg.Error, match="thread deleted"):
                    plain.put_writes(before, [("messages", "late")], "task-1")
            assert ours.get_tuple({"configurable": {"thread_id": "t-del"}}) is None
        finally:
            _close(ours)


def test_a_run_in_flight_does_not_revive_its_deleted_thread(saver_target: str, make_desk, store) -> None:
    """graph.invoke in one thread, held just before billing; delete_thread from another; the run's next write is
    refused (ThreadDeleted), and nothing of the thread is left for any reader."""
    saver = open_checkpointer(saver_target)
    reached, release = threading.Event(), threading.Event()
    hold = HoldAtNode("billing", claim=lambda _tid: reached.set() or True, released=release.is_set, limit_s=30)
    desk = make_desk(checkpointer=saver)
    graph = desk.graph.with_config(callbacks=[*desk.graph.config.get("callbacks", []), hold])
    config = {"configurable": {"thread_id": "t-inflight"}}
    failure: list[BaseException] = []

    def run() -> None:
        try:
            Conversation("t-inflight", graph=graph, store=store).send(TURN)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failure.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert reached.wait(30), "the run never reached billing"
        assert graph.get_state(config).values["messages"]  # the turn is stored so far
        saver.delete_thread("t-inflight")
    finally:
        release.set()
        worker.join(60)
    try:
        assert len(failure) == 1 and isinstance(failure[0], ThreadDeleted), failure
        assert saver.get_tuple(config) is None and list(saver.list(config)) == []
        assert graph.get_state(config).values == {}
        with pytest.raises(ThreadDeleted):  # the deleted thread id is not reused
            Conversation("t-inflight", graph=graph, store=store).send("hello again")
        assert graph.get_state(config).values == {}
    finally:
        _close(saver)


def test_tombstones_are_created_on_an_existing_sqlite_file(tmp_path: Path) -> None:
    """A checkpoint file written before tombstones existed gets the table and triggers when it is opened."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    path = tmp_path / "old.db"
    old = SqliteSaver(sqlite3.connect(str(path), check_same_thread=False))
    before = _first_checkpoint(old, "t-old")
    saver = open_checkpointer(path)
    saver.delete_thread("t-old")
    with pytest.raises(ThreadDeleted):
        saver.put(before, empty_checkpoint(), {"source": "loop", "step": 0}, {})
    with pytest.raises(sqlite3.IntegrityError, match="thread deleted"):  # LangGraph's own saver on the file too
        old.put(before, empty_checkpoint(), {"source": "loop", "step": 0}, {})


@pytest.mark.postgres
def test_a_thread_the_engine_deletes_stays_deleted() -> None:
    """Aegra 0.6 deletes only its ``thread`` row; the trigger ``switchboard serve`` installs on that table deletes the
    checkpoints with it and records the tombstone, so a run in flight on another instance cannot write them back."""
    import psycopg

    from checkpoints.postgres_saver import install_engine_thread_tombstones

    with postgres_database() as url:
        saver = open_checkpointer(url)
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                assert not install_engine_thread_tombstones(conn)  # no engine table: nothing to do
                conn.execute("CREATE TABLE thread (thread_id TEXT PRIMARY KEY, status TEXT)")
                assert install_engine_thread_tombstones(conn) and install_engine_thread_tombstones(conn)  # idempotent
                conn.execute("INSERT INTO thread VALUES ('t-eng', 'busy'), ('t-other', 'idle')")
            before = _first_checkpoint(saver, "t-eng")
            _first_checkpoint(saver, "t-other")
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("DELETE FROM thread WHERE thread_id = 't-eng'")  # what Aegra's DELETE /threads does
            assert saver.get_tuple({"configurable": {"thread_id": "t-eng"}}) is None and saver.is_deleted("t-eng")
            with pytest.raises(ThreadDeleted):
                saver.put(before, empty_checkpoint(), {"source": "loop", "step": 0}, {})
            assert saver.get_tuple({"configurable": {"thread_id": "t-other"}}) is not None
        finally:
            _close(saver)
