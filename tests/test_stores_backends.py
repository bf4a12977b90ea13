"""Every store of ours on both backends: the event log, the checkpoints, the per-thread lock, a whole approval flow
through ``Conversation`` and ``switchboard db upgrade``. Each test taking ``db_url`` runs on a SQLite file and
(marked ``postgres``) on a fresh PostgreSQL database, where one ``--db`` URL holds every store."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from checkpoints.business import open_store
from checkpoints.event_log import open_event_log
from checkpoints.locks import thread_lock
from graph.context import RunContext
from graph.errors import InputError
from graph.settings import Settings
from tests.conftest import postgres_database

ANN = RunContext.for_operator("ann", "t_demo")
BEN = RunContext.for_operator("ben", "t_demo")
BIG = "I want a refund for tx_1001 please"  # £23.80: above the auto-approval limit, one approver


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, isolated_home) -> Iterator[str]:
    """The checkpoint database of a test: a SQLite file in the test's home, or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        yield str(isolated_home / "switchboard.db")
        return
    with postgres_database() as url:
        yield url


# -- settings --------------------------------------------------------------------------------------


def test_business_store_follows_a_postgres_db(monkeypatch: pytest.MonkeyPatch) -> None:
    pg = "postgresql://u@h:5432/desk"
    assert Settings(db=pg).business_db == pg
    assert Settings(db=pg, business_db="/tmp/b.db").business_db == "/tmp/b.db"
    assert Settings(db="/tmp/x.db").business_db.endswith("business.db")
    monkeypatch.setenv("SWITCHBOARD_DB", pg)
    assert Settings().business_db == pg


# -- event log -------------------------------------------------------------------------------------


def test_event_log_idempotent_and_shared(db_url: str) -> None:
    log = open_event_log(db_url)
    assert log.record("run_started", key="k1", thread_id="t1", run_id="r1") is not None
    assert log.record("run_started", key="k1", thread_id="t1", run_id="r1") is None  # same key: stored once
    other = open_event_log(db_url)  # another process's connections
    assert [e.event_key for e in other.events("t1")] == ["k1"]
    other.record("run_completed", key="k2", thread_id="t2", run_id="r2", status="ok")
    assert log.thread_ids() == ["t2", "t1"]
    log.close()
    other.close()


def test_event_log_concurrent_writers(db_url: str) -> None:
    log = open_event_log(db_url)

    def write(n: int) -> None:
        for i in range(20):
            log.record("agent_started", key=f"w{n}-{i % 10}", thread_id=f"t{n}", agent="triage")

    workers = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(len(log.events(f"t{n}")) for n in range(4)) == [10, 10, 10, 10]
    log.close()


# -- the per-thread lock ---------------------------------------------------------------------------


def test_thread_lock_serialises_and_times_out(db_url: str) -> None:
    with thread_lock(db_url, "t1", 1.0):
        with pytest.raises(InputError, match="busy with another turn"):
            with thread_lock(db_url, "t1", 0.2):
                pass
        with thread_lock(db_url, "t2", 0.2):  # another thread's lock is free
            pass
    with thread_lock(db_url, "t1", 0.2):  # released
        pass


def _hold_lock(db: str, home: str, ready) -> None:
    os.environ["SWITCHBOARD_HOME"] = home
    with thread_lock(db, "held", 5.0):
        ready.set()
        time.sleep(60)


@pytest.mark.postgres
@pytest.mark.subprocess
def test_advisory_lock_released_when_its_process_is_killed(isolated_home) -> None:
    with postgres_database() as url:
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        proc = ctx.Process(target=_hold_lock, args=(url, str(isolated_home), ready))
        proc.start()
        assert ready.wait(60)
        with pytest.raises(InputError, match="busy"):
            with thread_lock(url, "held", 0.3):
                pass
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        started = time.monotonic()
        with thread_lock(url, "held", 10.0):  # the server dropped the dead session's lock
            assert time.monotonic() - started < 10


# -- a whole approval flow on one database ---------------------------------------------------------


def test_approval_flow_on_one_database(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from graph.conversation import Conversation

    monkeypatch.setenv("SWITCHBOARD_DB", db_url)
    settings = Settings()
    store = open_store(settings.business_db)
    for name in ("ann", "ben"):
        store.add_operator(name, "t_demo", ["approver"])
    r = Conversation("r1").send(BIG)
    assert r.status == "awaiting_approval"
    # "another process": a new desk, new connections to the same database
    done = Conversation("r1", context=ANN).resume({"decision": "approve", "note": "receipt checked"})
    assert done.agent == "refunds" and "approved" in done.text
    with pytest.raises(InputError, match="already decided"):
        Conversation("r1", context=BEN).resume({"decision": "approve"})
    assert [r.status for r in store.list_refunds("c_ada") if r.status == "executed"] == ["executed"]
    with store.engine.connect() as conn:  # paid once: one side effect for the one refund
        assert conn.execute(text("SELECT COUNT(*) FROM side_effects")).scalar_one() == 1
    kinds = [e.kind for e in open_event_log(settings.db).events("r1")]
    assert kinds.count("interrupt") == 1 and kinds.count("resumed") == 1
    if db_url.startswith("postgresql"):
        assert settings.business_db == db_url  # every store in the one database


# -- switchboard db upgrade ------------------------------------------------------------------------


def test_db_upgrade_creates_every_store(db_url: str) -> None:
    from graph.cli import app

    runner = CliRunner()
    first = runner.invoke(app, ["db", "upgrade", "--db", db_url])
    assert first.exit_code == 0, first.output
    assert "revision 0003" in first.output
    again = runner.invoke(app, ["db", "upgrade", "--db", db_url])  # idempotent
    assert again.exit_code == 0, again.output
    if db_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(db_url) as conn:
            names = {r[0] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")}
        assert {"events", "checkpoints", "checkpoint_writes", "refunds", "operators"} <= names


# -- served runs: one run at a time per thread -----------------------------------------------------


@pytest.mark.postgres
def test_thread_run_guard_refuses_a_run_on_a_busy_thread(isolated_home) -> None:
    from checkpoints import open_checkpointer
    from graph.builder import build_graph
    from nodes.thread_guard import ThreadRunGuard

    with postgres_database() as url:
        graph = build_graph(checkpointer=open_checkpointer(url), settings=Settings(db=url), events=url,
                            run_callbacks=[ThreadRunGuard(url)])
        cfg = {"configurable": {"thread_id": "busy"}}
        turn = {"messages": [{"role": "user", "content": "Where is my card?"}]}
        with thread_lock(url, "busy", 1.0):  # another run (or a CLI turn) holds the thread
            with pytest.raises(InputError, match="busy with another turn"):
                graph.invoke(turn, cfg, context=RunContext())
        assert graph.get_state(cfg).values == {}  # refused before reading or writing a checkpoint
        assert graph.invoke(turn, cfg, context=RunContext())["turn"] == 1
        assert graph.invoke(turn, cfg, context=RunContext())["turn"] == 2  # released after each run
        with thread_lock(url, "busy", 0.5):  # and free now
            pass


# -- recovery of a turn killed between its input and its first node -------------------------------


@pytest.mark.parametrize("keep", ["input", "entry"])
def test_recover_continues_a_turn_killed_before_its_first_node(isolated_home, keep: str) -> None:
    """An engine that writes checkpoints in the background (LangGraph's default durability, "async") and is killed
    right after storing a run's input leaves the new message in state and no next node. An operator's ``recover``
    continues that turn as the customer's (the entry node refuses operators' turns, and its refusal would take the
    customer's message out)."""
    import sqlite3

    from graph.conversation import Conversation

    db = str(isolated_home / "switchboard.db")
    open_store(Settings(db=db).business_db).add_operator("ann", "t_demo", ["approver"])
    Conversation("k", db=db).send("I was charged twice for my coffee")
    Conversation("k", db=db).send("Where is my card?")
    conn = sqlite3.connect(db)  # forget everything of turn 2 after its input checkpoint, as a killed engine would
    rows = conn.execute("SELECT checkpoint_id, json_extract(metadata, '$.source'), json_extract(metadata, '$.step') "
                        "FROM checkpoints WHERE thread_id = 'k' ORDER BY checkpoint_id").fetchall()
    last_input = [r for r in rows if r[1] == "input"][-1]
    kept = last_input[0] if keep == "input" else min(r[0] for r in rows if r[0] > last_input[0])  # + entry's step
    later = [r[0] for r in rows if r[0] > kept]
    conn.executemany("DELETE FROM checkpoints WHERE thread_id = 'k' AND checkpoint_id = ?", [(c,) for c in later])
    conn.executemany("DELETE FROM writes WHERE thread_id = 'k' AND checkpoint_id = ?",
                     [(c,) for c in later + ([kept] if keep == "entry" else [])])  # entry killed before its writes
    conn.commit()
    conn.close()
    stuck = Conversation("k", db=db)
    snap = stuck.graph.get_state(stuck.config)
    assert tuple(snap.next) == (() if keep == "input" else ("entry",))
    assert snap.values["messages"][-1].content == "Where is my card?"  # stored, unanswered
    r = Conversation("k", db=db, context=RunContext.for_operator("ann", "t_demo")).recover()
    assert r is not None and r.turn == 2 and r.agent
    msgs = stuck.graph.get_state(stuck.config).values["messages"]
    assert [m.content for m in msgs if m.type == "human"] == ["I was charged twice for my coffee", "Where is my card?"]
    assert msgs[-1].type == "ai"
