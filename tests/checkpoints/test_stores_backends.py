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
from langchain_core.callbacks import BaseCallbackHandler
from sqlalchemy import text
from typer.testing import CliRunner

from checkpoints.business import SCHEMA_VERSION, open_store
from checkpoints.event_log import open_event_log
from checkpoints.locks import thread_lock
from graph.contracts.context import RunContext
from graph.contracts.errors import InputError
from graph.contracts.settings import Settings
from graph.contracts.state_values import Owner
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
    from graph.app.cli import app

    runner = CliRunner()
    first = runner.invoke(app, ["db", "upgrade", "--db", db_url])
    assert first.exit_code == 0, first.output
    assert f"business store at revision {SCHEMA_VERSION}" in first.output, first.output
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


# -- recovery continues the owner's turn with the owner's rights -----------------------------------


class _Killed(BaseException):
    """Stands for a SIGKILL: not an Exception, so no node or policy of ours catches it."""


class _KillBefore(BaseCallbackHandler):
    """A callback that stops the run when node ``node`` is about to start (as if the process died right there)."""

    raise_error = True
    run_inline = True

    def __init__(self, node: str):
        self.node = node

    def on_chain_start(self, serialized, inputs, *, metadata=None, **kw) -> None:
        if (metadata or {}).get("langgraph_node") == self.node:
            raise _Killed(f"killed before {self.node}")


def _killed_turn(db: str, thread: str, text_: str, node: str, context: RunContext | None = None):
    """Send ``text_`` on ``thread`` through ``Conversation`` and kill the run just before ``node`` starts; return
    the thread's snapshot afterwards."""
    from graph.conversation import Conversation

    conv = Conversation(thread, db=db, context=context)
    config = {"configurable": {"thread_id": thread}, "callbacks": [_KillBefore(node)]}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(type(conv), "config", property(lambda self: config))
        with pytest.raises(_Killed):
            conv.send(text_)
    return conv.graph.get_state({"configurable": {"thread_id": thread}})


def test_recover_between_triage_and_refunds_requests_the_refund_as_the_owner(db_url: str) -> None:
    """The load test's lost approval: a turn killed after triage handed over to refunds and before refunds ran. An
    operator's ``recover`` continues it with the rights of the customer who started the thread, so the refund is
    requested (and pauses for approval), and the operator is recorded as who triggered the recovery."""
    from graph.conversation import Conversation

    store = open_store(Settings(db=db_url).business_db)
    store.add_operator("ann", "t_demo", ["approver"])
    snap = _killed_turn(db_url, "kr", BIG, "refunds")
    assert tuple(snap.next) == ("refunds",) and snap.values["owner"].customer_id == "c_ada"
    assert not [r for r in store.list_refunds("c_ada") if r.transaction_id == "tx_1001"]
    r = Conversation("kr", db=db_url, context=ANN).recover()
    assert r is not None and r.status == "awaiting_approval" and r.pending.amount == "£23.80"
    assert [x.status for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"] == ["requested"]
    rec = [e for e in open_event_log(db_url).events("kr") if e.kind == "recovered"]
    assert len(rec) == 1 and rec[0].detail["triggered_by"] == "operator:ann"
    assert rec[0].detail["continued_as"] == "customer:c_ada" and rec[0].detail["next"] == ["refunds"]
    assert store.audit_entries(action="recover", actor="operator:ann")[0].target == "thread:kr"
    # the approval then goes through as usual: paid once
    done = Conversation("kr", db=db_url, context=ANN).resume({"decision": "approve"})
    assert "approved" in done.text
    assert [x.status for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"] == ["executed"]


def test_recover_refuses_an_operator_of_another_tenant_and_keeps_the_turn(db_url: str) -> None:
    from graph.contracts.errors import AccessDenied
    from graph.conversation import Conversation

    store = open_store(Settings(db=db_url).business_db)
    store.add_operator("zed", "t_other", ["approver"])
    _killed_turn(db_url, "kz", BIG, "refunds")
    with pytest.raises(AccessDenied, match="not authorized"):
        Conversation("kz", db=db_url, context=RunContext.for_operator("zed", "t_other")).recover()
    conv = Conversation("kz", db=db_url)
    assert tuple(conv.graph.get_state(conv.config).next) == ("refunds",)  # untouched
    r = conv.recover()  # the owner may finish their own turn
    assert r is not None and r.status == "awaiting_approval"


def test_a_first_turn_killed_before_its_entry_node_is_recovered_as_its_owner(db_url: str) -> None:
    """The owner is recorded before the graph runs (``Conversation.send`` -> ``thread_owners``), so a first turn
    that never reached its entry node (the state names no owner yet) is still finished by an operator's recover,
    and no other customer can take the thread over in the meantime."""
    from graph.contracts.errors import AccessDenied
    from graph.conversation import Conversation

    store = open_store(Settings(db=db_url).business_db)
    store.add_operator("ann", "t_demo", ["approver"])
    snap = _killed_turn(db_url, "kf", "I was charged twice for my coffee", "entry")
    assert tuple(snap.next) == ("entry",) and not snap.values.get("owner")  # stored, never entered
    assert store.thread_owner("kf").customer_id == "c_ada"
    with pytest.raises(AccessDenied, match="is not one of your threads"):
        Conversation("kf", db=db_url, context=RunContext.for_customer("c_bob", "t_demo")).send("hello")
    r = Conversation("kf", db=db_url, context=ANN).recover()
    assert r is not None and r.turn == 1 and r.agent
    values = Conversation("kf", db=db_url).state
    assert values["owner"] == Owner(customer_id="c_ada", tenant_id="t_demo")
    assert [m.type for m in values["messages"]][-1] == "ai"
    assert Conversation("kf", db=db_url, context=ANN).recover() is None  # finished: nothing left


def test_cli_recover_finds_a_first_turn_by_its_recorded_owner(db_url: str) -> None:
    from graph.app.cli import app

    open_store(Settings(db=db_url).business_db).add_operator("ann", "t_demo", ["approver"])
    _killed_turn(db_url, "kc", "Where is my card?", "entry")
    out = CliRunner().invoke(app, ["recover", "kc", "--as", "ann", "--db", db_url])
    assert out.exit_code == 0, out.output
    assert "kc: found an interrupted run; finished it" in out.output
