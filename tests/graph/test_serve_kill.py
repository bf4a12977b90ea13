"""An instance of ``switchboard serve`` (Aegra, 2 instances, PostgreSQL) SIGKILLed mid-turn, at a known point: a run is
held just before a node (``nodes.testing.hold`` through ``SWITCHBOARD_TEST_HOLD``), the instance running it is
killed, the launcher restarts it. Checked: the cut turn is answered (by the customer's next message through the other
instance; a resumed approval by ``switchboard recover``), the engine's run record does not stay ``running``
(``graph.service.serve.sweep_orphaned_runs``), and the ledger pays the refund once. Bounded: every wait has a deadline, the
holds end by themselves, the launcher is stopped afterwards; loopback only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoints.business import open_store
from nodes.testing.served import START_LIMIT_S, launched
from nodes.testing.served import interrupts as _interrupts
from tests.conftest import postgres_database

BIG = "I want a refund for tx_1001 please"  # £23.80: pauses for one approver
TURN = "I was charged twice for my coffee"

THANKS = "Thanks, that is all"
WAIT_S = 90


def _wait_for(what: str, check, limit: float = WAIT_S):  # a predicate returning a value
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _kill_instance(served, index: int) -> None:
    listing = Path(served.out).parent / "home" / "serve" / "aegra" / "instances.json"
    pid = next(r["pid"] for r in json.loads(listing.read_text()) if r["index"] == index)
    restarts = served.out.read_text().count(f"instance {index}: back on port")
    os.kill(pid, signal.SIGKILL)
    _wait_for(f"instance {index} to come back",
              lambda: served.out.read_text().count(f"instance {index}: back on port") > restarts, START_LIMIT_S)


def _run_status(client, tid: str, run_id: str) -> str:
    return client.runs.get(tid, run_id)["status"]


def _db_run_status(url: str, run_id: str) -> str:
    """The status of Aegra's run record (the operator's API view of another customer's thread is refused)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return str(conn.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,)).fetchone()[0])  # type: ignore[index]


@pytest.mark.postgres
@pytest.mark.subprocess
@pytest.mark.slow
def test_a_turn_cut_by_a_killed_instance_is_answered_and_its_run_does_not_stay_running(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cut_dir, pay_dir = tmp_path / "hold-billing", tmp_path / "hold-refund"
    cut_dir.mkdir()
    pay_dir.mkdir()
    monkeypatch.setenv("SWITCHBOARD_TEST_HOLD", f"billing:{cut_dir},refund_execute:{pay_dir}")
    with postgres_database() as url, launched(url, tmp_path) as served:
        # 1. a first turn killed with billing pending; the customer's next message, through the other instance
        ada0, ada1 = served.client("c_ada", 0), served.client("c_ada", 1)
        tid = ada0.threads.create()["thread_id"]
        run = ada0.runs.create(tid, "switchboard", input={"messages": [{"role": "user", "content": TURN}]})
        _wait_for("the run to reach billing", lambda: (cut_dir / "held").exists())
        _kill_instance(served, 0)
        state = ada1.threads.get_state(tid)
        assert state["next"] == ["billing"]  # stored up to triage's hand-off: the turn was cut short
        _wait_for("the killed run to be marked", lambda: _run_status(ada1, tid, run["run_id"]) != "running")
        assert _run_status(ada1, tid, run["run_id"]) == "error"
        assert "stopped before it finished" in served.out.read_text() or "left running" in served.out.read_text()
        out = ada1.runs.wait(tid, "switchboard", input={"messages": [{"role": "user", "content": THANKS}]})
        assert out["turn"] == 2 and out["outcome"]["status"] == "answered"
        msgs = ada1.threads.get_state(tid)["values"]["messages"]
        humans = [i for i, m in enumerate(msgs) if m["type"] == "human"]
        assert [msgs[i]["content"] for i in humans] == [TURN, THANKS]
        answer = msgs[humans[1] - 1]  # the cut turn was answered before the next message was taken
        assert answer["type"] == "ai" and answer["name"] == "billing" and answer["content"], answer
        assert msgs[-1]["type"] == "ai" and msgs[-1]["content"]
        assert not ada1.threads.get_state(tid)["next"]

        # 2. an approved refund killed just before the payment; `switchboard recover` pays it, once
        tid2 = ada1.threads.create()["thread_id"]
        paused = ada1.runs.wait(tid2, "switchboard", input={"messages": [{"role": "user", "content": BIG}]})
        refund_id = paused["pending_approval"]["refund_id"]
        assert _interrupts(ada1.threads.get_state(tid2))
        ann1 = served.client("ann", 1)
        resume = ann1.runs.create(tid2, "switchboard", command={"resume": {"decision": "approve", "note": "ok"}})
        _wait_for("the resumed run to reach refund_execute", lambda: (pay_dir / "held").exists())
        _kill_instance(served, 1)
        ada0 = served.client("c_ada", 0)  # Aegra shows a thread to its creator only
        assert ada0.threads.get_state(tid2)["next"] == ["refund_execute"]
        _wait_for("the killed resume to be marked", lambda: _db_run_status(served.url, resume["run_id"]) != "running")
        assert _db_run_status(served.url, resume["run_id"]) == "error"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "OPENAI_", "SWITCHBOARD_TEST_"))}
        env["SWITCHBOARD_HOME"] = str(tmp_path / "home")
        cli = [str(Path(sys.executable).parent / "switchboard"), "recover", tid2, "--as", "ann", "--db", served.url]
        done = subprocess.run(cli, capture_output=True, text=True, timeout=180, env=env)
        said = " ".join(done.stdout.split())  # the console wraps long lines
        assert done.returncode == 0 and f"{tid2}: found an interrupted run; finished it -> answered" in said, \
            (done.stdout, done.stderr)
        again = subprocess.run(cli, capture_output=True, text=True, timeout=180, env=env)
        assert again.returncode == 0 and "nothing to recover" in " ".join(again.stdout.split()), again.stdout
        store = open_store(served.url)
        assert store.load_refund(refund_id).status == "executed"
        assert [r.id for r in store.list_refunds("c_ada") if r.status == "executed"] == [refund_id]
        with store.engine.connect() as conn:
            from sqlalchemy import text

            effects = conn.execute(text("SELECT COUNT(*) FROM side_effects WHERE idempotency_key LIKE 'refund-exec:%'")
                                   ).scalar_one()
        assert effects == 1
        final = ada0.threads.get_state(tid2)
        assert not final["next"] and "paid back" in final["values"]["outcome"]["text"]


@pytest.mark.postgres
def test_the_sweep_marks_only_runs_nobody_runs() -> None:
    """Stale runs whose thread lock is free are marked ``error`` (their thread ``idle``, or ``interrupted`` when its
    checkpoint waits for an approval); a recent run, and a run whose thread a live run holds, are left alone."""
    import psycopg

    from checkpoints.locks import thread_lock
    from graph.service.serve import ORPHAN_ERROR, sweep_orphaned_runs

    with postgres_database() as url:
        assert sweep_orphaned_runs(url) == []  # no Aegra tables: nothing to do
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE TABLE thread (thread_id TEXT PRIMARY KEY, status TEXT, updated_at TIMESTAMPTZ)")
            conn.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY, thread_id TEXT, status TEXT, error_message TEXT, "
                         "updated_at TIMESTAMPTZ)")
            conn.execute("CREATE TABLE checkpoints (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT)")
            conn.execute("CREATE TABLE checkpoint_writes (thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, "
                         "channel TEXT)")
            for tid in ("t-dead", "t-held", "t-new", "t-paused"):
                conn.execute("INSERT INTO thread VALUES (%s, 'busy', now())", (tid,))
            conn.execute("INSERT INTO runs VALUES ('r-dead', 't-dead', 'running', NULL, now() - interval '1 hour'), "
                         "('r-held', 't-held', 'running', NULL, now() - interval '1 hour'), "
                         "('r-new', 't-new', 'running', NULL, now()), "
                         "('r-paused', 't-paused', 'pending', NULL, now() - interval '1 hour')")
            conn.execute("INSERT INTO checkpoints VALUES ('t-paused', '', '1'), ('t-paused', '', '2')")
            conn.execute("INSERT INTO checkpoint_writes VALUES ('t-paused', '', '2', '__interrupt__')")
        with thread_lock(url, "t-held", 5.0):  # a live run of the graph on t-held
            marked = sweep_orphaned_runs(url)
        assert sorted(marked) == [("r-dead", "t-dead", "idle"), ("r-paused", "t-paused", "interrupted")]
        with psycopg.connect(url, autocommit=True) as conn:
            runs = dict(conn.execute("SELECT run_id, status FROM runs").fetchall())
            threads = dict(conn.execute("SELECT thread_id, status FROM thread").fetchall())
            [why] = conn.execute("SELECT error_message FROM runs WHERE run_id = 'r-dead'").fetchone()
        assert runs == {"r-dead": "error", "r-held": "running", "r-new": "running", "r-paused": "error"}
        assert threads == {"t-dead": "idle", "t-held": "busy", "t-new": "busy", "t-paused": "interrupted"}
        assert why == ORPHAN_ERROR
        assert sweep_orphaned_runs(url) == [("r-held", "t-held", "idle")]  # its run ended without a word: now marked
        assert sweep_orphaned_runs(url) == []  # each run once
