"""Operator listings that scale with the home: ``threads`` and ``pending`` page through a listing
reader (one query for every thread's latest checkpoint, SQLite or PostgreSQL) and ``stats`` counts in the database
(``EventLog.tally``), with the same rows and figures as the slow path through the saver and Python over every
event, on a small home of each backend."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from checkpoints import open_checkpointer
from checkpoints.event_log import EventLog, open_event_log
from checkpoints.threads import page_of, pending_interrupt, pending_requests, thread_summaries
from graph.app.cli import app
from graph.app.observe import compute_stats, stats_from_tally, tally_events
from graph.builder import build_desk
from graph.contracts.context import RunContext
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing.scripted import KeywordRouter
from tests.conftest import BIG, postgres_database

#: (thread, customer, tenant, messages): answered, paused for approval, two turns, another tenant's.
THREADS = (
    ("a1", "c_ada", "t_demo", ("I was charged twice for my coffee",)),
    ("a2", "c_ada", "t_demo", (BIG,)),
    ("a3", "c_ada", "t_demo", ("where is my card?", "thanks")),
    ("z1", "c_zed", "t_other", ("where is my card?",)),
    ("a4", "c_bob", "t_demo", ("Please refund tx_2001",)),
    ("a5", "c_ada", "t_demo", ("I was charged twice for my coffee",)),
)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db(request, isolated_home) -> Iterator[str]:
    """A home's checkpoint database (and event log, and for PostgreSQL the business store) with :data:`THREADS`,
    an operator ``ann`` (agent) of t_demo and ``oz`` of t_other."""
    if request.param == "sqlite":
        target = str(isolated_home / "switchboard.db")
        _fill(target)
        yield target
        return
    with postgres_database() as url:
        _fill(url)
        yield url


def _fill(target: str) -> None:
    from checkpoints.business import open_store

    settings = Settings.from_env(db=target)
    store = open_store(settings.business_db)
    store.insert_rows({"customers": [{"id": "c_zed", "tenant_id": "t_other", "name": "Zed", "email": "z@example.org",
                                      "flags": "{}"}]})
    store.add_operator("ann", "t_demo", ["agent"])
    store.add_operator("oz", "t_other", ["agent"])
    router = KeywordRouter()
    saver = open_checkpointer(target)
    desk = build_desk(model=OfflineChatModel(router=router), checkpointer=saver, settings=settings, router=router,
                      store=store)
    for thread, customer, tenant, messages in THREADS:
        conv = Conversation(thread, desk=desk, context=RunContext(user_id=customer, tenant_id=tenant))
        for text in messages:
            conv.send(text)
    _close(saver)


def _close(saver) -> None:
    pool = getattr(saver, "conn", None)
    if hasattr(pool, "getconn"):
        pool.close()


def _reader(db: str):
    if db.startswith("postgresql://"):
        from checkpoints.postgres_reader import PostgresCheckpointReader

        return PostgresCheckpointReader(db)
    from checkpoints.sqlite_reader import SqliteCheckpointReader

    return SqliteCheckpointReader(db)


def test_the_listing_reader_gives_the_savers_summaries_and_pending_requests(db):
    saver, reader = open_checkpointer(db), _reader(db)
    try:
        slow = thread_summaries(saver)
        assert thread_summaries(reader) == slow
        assert [r["thread_id"] for r in slow] == ["a5", "a4", "z1", "a3", "a2", "a1"]  # newest first
        assert thread_summaries(reader, tenant_id="t_other") == [r for r in slow if r["tenant_id"] == "t_other"]
        ids = [r["thread_id"] for r in slow]
        paused = dict(pending_requests(reader, ids))
        assert paused == {t: pending_interrupt(saver, t) for t in ids if pending_interrupt(saver, t) is not None}
        assert list(paused) == ["a4", "a2"] and paused["a2"]["kind"] == "refund_approval"
        assert pending_interrupt(reader, "a2") == pending_interrupt(saver, "a2")
        assert pending_interrupt(reader, "a1") is None and pending_interrupt(reader, "nope") is None
    finally:
        reader.close()
        _close(saver)


def test_pages_cover_the_listing_once_in_order():
    rows = list(range(7))
    pages = [page_of(iter(rows), 3, off) for off in (0, 3, 6)]
    assert [p.rows for p in pages] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [p.total for p in pages] == [7, 7, 7] and [p.next_offset for p in pages] == [3, 6, None]
    assert page_of(rows, None).rows == rows and page_of(rows, None, 5).rows == [5, 6]
    assert page_of(rows, 3, 10).rows == [] and page_of(rows, 3, 10).next_offset is None
    assert page_of([], 50).total == 0
    with pytest.raises(ValueError):
        page_of(rows, -1)


def _synthetic(log: EventLog) -> None:
    """Events the small home's conversations do not make: both kinds of loop, a missing run id, a replayed side
    effect, repeated and distinct questions, token counts, errors and timeouts, an event of no thread."""
    rows = [
        ("loop_detected", {"thread_id": "a1", "run_id": "r-x", "detail": {"type": "bounce_back"}}),
        ("loop_detected", {"thread_id": "a1", "run_id": "r-x", "detail": {"type": "fingerprint"}}),
        ("loop_detected", {"thread_id": "a3", "run_id": None, "detail": {}}),
        ("run_started", {"thread_id": "a3", "run_id": None}),
        ("interrupt", {"thread_id": "a3", "run_id": None}),
        ("tool_finished", {"thread_id": "a3", "status": "replayed"}),
        ("agent_finished", {"thread_id": "a1", "agent": "billing", "detail": {"question": "which card?"}}),
        ("agent_finished", {"thread_id": "a1", "agent": "billing", "detail": {"question": "which card?"}}),
        ("agent_finished", {"thread_id": "a3", "agent": "cards", "detail": {"question": "which card?"}}),
        ("agent_finished", {"thread_id": "a3", "agent": "cards", "status": "error", "detail": {"question": ""}}),
        ("agent_finished", {"thread_id": "z1", "agent": "cards", "status": "timeout"}),
        ("agent_started", {"thread_id": "z1", "agent": "ghost", "task_id": ""}),
        ("model_called", {"thread_id": "a1", "input_tokens": 120, "output_tokens": 7}),
        ("model_called", {"thread_id": "z1", "input_tokens": 5}),
        ("run_completed", {"thread_id": "a1", "run_id": "r-y", "status": "fallback"}),
        ("run_completed", {"thread_id": "a1", "run_id": "r-z", "status": None}),
        ("access_denied", {"thread_id": None, "reason": "no thread"}),
    ]
    log.record_many([(kind, {**f, "ts": "2030-01-01T00:00:00.000000+00:00" if i % 2 else None})
                     for i, (kind, f) in enumerate(rows)])


def test_stats_counted_in_the_database_equal_the_count_over_every_event(db):
    log = open_event_log(db)
    try:
        before = log.tally(None)
        _synthetic(log)
        events = log.events()
        threads = sorted({e.thread_id for e in events if e.thread_id})
        for ids in (None, threads, ["a1", "a3"], ["z1"], []):
            for since in (None, "2029-12-31T00:00:00", "2031-01-01T00:00:00"):
                slow = tally_events(e for e in events if (ids is None or e.thread_id in ids)
                                    and (since is None or e.ts >= since))
                assert log.tally(ids, since=since) == slow, (ids, since)
        everything = log.tally(None)
        added = {k: getattr(everything, k) - getattr(before, k) for k in ("loop_runs", "bounce_backs", "replayed",
                                                                            "questions", "repeated_questions", "runs")}
        assert added == {"loop_runs": 2, "bounce_backs": 1, "replayed": 1, "questions": 3, "repeated_questions": 1,
                         "runs": 1}  # one run without an id
        assert everything.input_tokens == (before.input_tokens or 0) + 125
        assert stats_from_tally(everything) == compute_stats(events)
    finally:
        log.close()


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def test_threads_and_pending_page_and_stats_match_the_slow_path(db, monkeypatch):
    from rich.console import Console

    from graph.app import cli

    monkeypatch.setattr(cli, "console", Console(width=250))
    everything = json.loads(_cli("threads", "--db", db, "--as", "ann", "--json").output)
    assert [r["thread_id"] for r in everything] == ["a5", "a4", "a3", "a2", "a1"]  # --json: every row by default
    page = json.loads(_cli("threads", "--db", db, "--as", "ann", "--json", "--limit", "2", "--offset", "1").output)
    assert page == everything[1:3]
    table = _cli("threads", "--db", db, "--as", "ann", "--limit", "2", "--offset", "2")
    assert table.exit_code == 0, table.output
    shown = [line.split()[1] for line in table.output.splitlines() if line.startswith("│")]
    assert shown == ["a3", "a2"] and "threads 3-4 of 5 (newest first); next page: --offset 4" in table.output
    last = _cli("threads", "--db", db, "--as", "ann", "--limit", "2", "--offset", "4").output
    assert "threads 5-5 of 5 (newest first)" in last and "next page" not in last
    full = _cli("threads", "--db", db, "--as", "ann").output  # one page holds them all: no page line
    assert " a1 " in full and "of 5" not in full
    waiting = json.loads(_cli("pending", "--db", db, "--as", "ann", "--json").output)
    assert [r["thread_id"] for r in waiting] == ["a4", "a2"]
    assert json.loads(_cli("pending", "--db", db, "--as", "ann", "--json", "--offset", "1").output) == waiting[1:]
    assert "approvals 1-1 of 2 (newest first); next page: --offset 1" in _cli("pending", "--db", db, "--as", "ann",
                                                                               "--limit", "1").output
    assert json.loads(_cli("pending", "--db", db, "--as", "oz", "--json").output) == []
    log = open_event_log(db)
    try:
        for who, mine in (("ann", {"a1", "a2", "a3", "a4", "a5"}), ("oz", {"z1"})):
            stats = json.loads(_cli("stats", "--db", db, "--as", who, "--json").output)
            assert stats == compute_stats([e for e in log.events() if e.thread_id in mine]).as_dict()
    finally:
        log.close()


def test_a_file_the_reader_cannot_read_is_listed_through_the_saver(isolated_home, monkeypatch):
    """The reader steps aside (Unreadable while listing) and the checkpointer lists the same rows."""
    from checkpoints import sqlite_reader

    target = str(isolated_home / "switchboard.db")
    _fill(target)
    expected = json.loads(_cli("threads", "--db", target, "--as", "ann", "--json").output)

    def unreadable(self, channels=None):
        raise sqlite_reader.Unreadable("a layout it does not know")
        yield  # pragma: no cover

    monkeypatch.setattr(sqlite_reader.SqliteCheckpointReader, "iter_latest_channel_values", unreadable)
    monkeypatch.setattr(sqlite_reader.SqliteCheckpointReader, "pending_interrupts", unreadable)
    assert json.loads(_cli("threads", "--db", target, "--as", "ann", "--json").output) == expected
    assert [r["thread_id"] for r in json.loads(_cli("pending", "--db", target, "--as", "ann", "--json").output)] == \
        ["a4", "a2"]
    assert Path(target).exists()
