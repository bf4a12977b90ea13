"""Load test of the served desk on loopback: concurrent 3-turn conversations through the official
``langgraph_sdk`` client, some refunds approved through the other instance, one instance SIGKILLed midway.

Modes (each on a fresh store, measured one after the other, same workload):

* ``sqlite1`` — one process: ``langgraph dev`` (in-memory checkpoints) with our stores in SQLite files;
* ``pg1`` — ``switchboard serve --instances 1`` (Aegra) with every store in one PostgreSQL database;
* ``pg2`` — ``switchboard serve --instances 2``; conversations alternate between the instances, approvals are resumed
  through the other instance, and instance 1 is SIGKILLed once ``--kill-at`` of the turns are done (the launcher
  restarts it);
* ``lgpg2`` (not in the default modes) — the same as ``pg2`` on ``switchboard serve --engine langgraph-pg`` (LangGraph's
  Agent Server on the PostgreSQL + Redis runtime, from the separate ``.venv-langgraph-pg``; ``--engine-venv``).

Each conversation is its own customer (seeded here: a £23.80 payment and a duplicated coffee charge), 3 turns:
"charged twice" (triage → billing), then either a refund of the £23.80 payment (``--approval-share`` of them: pauses
for an approver, resumed by operator ``ops`` through the other instance) or a card question, then a thank-you.
A turn whose request fails (instance killed, connection refused) is settled from the thread's stored state: answered
already; stored but unfinished → ``Conversation.recover()`` over the shared database (``recovered``), or with
``--settle next`` left to the customer's next message, which the served graph finishes first (``left_to_next_message``;
the last turn of a conversation is still recovered); never stored → sent again (``resent``). Checked at the end: lost
turns (a user message without an answer, or missing), duplicate refunds (more than one executed refund or side effect
per refund), interleaved turns (two user messages in a row),
the ledger (executed refunds in the one database = approvals), stuck approvals (a refund approved but never paid, or
a thread still waiting for a decision) and, on Aegra, run records left ``pending`` / ``running`` (those of the killed
instance are marked by the launcher's sweep, ``graph.service.serve.sweep_orphaned_runs``).

Usage: ``python bench/serve_load.py [--conversations 200] [--concurrency 16] [--modes sqlite1,pg1,pg2]
[--approval-share 0.2] [--kill-at 0.4] [--limit-s 900] [--settle recover|next] [--json out.json]
[--engine-venv DIR]`` (``--modes lgpg2`` for
the langgraph-pg engine). PostgreSQL: ``--pg`` or
SWITCHBOARD_TEST_POSTGRES (default ``postgresql://postgres@127.0.0.1:5432/test``); each mode creates and drops its own
database. Bounded: no new conversation starts after ``--limit-s`` seconds per mode. Exit 1 when an invariant fails
(lost, duplicate, interleaved, stuck, left running, ledger).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TURN1 = "I was charged twice for my coffee"
CARD = "Where is my card?"
THANKS = "Thanks, that is all"


@dataclass
class Stats:
    """What one mode measured."""

    latencies: list[float] = field(default_factory=list)
    turns: int = 0
    resumes: int = 0
    errors: int = 0
    recovered: int = 0
    resent: int = 0
    resume_fallbacks: int = 0
    recover_busy: int = 0
    left_to_next: int = 0
    kill: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, seconds: float) -> None:
        with self.lock:
            self.latencies.append(seconds)
            self.turns += 1

    def bump(self, name: str) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + 1)


def _free_ports(n: int) -> int:
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n < 65535 and all(_port_free(first + i) for i in range(n)):
            return first
    raise RuntimeError("no free consecutive ports")


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:  # loopback
            return resp.status == 200
    except OSError:
        return False


def seed_customers(store: Any, n: int) -> list[str]:
    """``n`` verified customers ``c_lt<i>`` of tenant t_demo, each with a £23.80 payment ``tx_lt<i>a`` (20 days ago)
    and a coffee charged twice (``tx_lt<i>b``/``c``, two days ago)."""
    now = datetime.now(UTC)
    rows: dict[str, list[dict]] = {"customers": [], "cards": [], "transactions": []}
    ids = [f"c_lt{i}" for i in range(n)]
    for i, cid in enumerate(ids):
        rows["customers"].append({"id": cid, "tenant_id": "t_demo", "name": f"Load Tester {i}",
                                  "email": f"lt{i}@example.com",
                                  "flags": json.dumps({"plan": "standard", "identity_verified": True, "country": "GB"})})
        rows["cards"].append({"id": f"card_lt{i}", "customer_id": cid, "last4": f"{1000 + i % 9000}",
                              "status": "active", "kind": "physical"})
        day = (now - timedelta(days=2)).replace(hour=8, minute=12, second=0, microsecond=0)
        for suffix, merchant, amount, when in (("a", "Tesco", 2380, now - timedelta(days=20)),
                                               ("b", "Blue Bottle Coffee", 450, day),
                                               ("c", "Blue Bottle Coffee", 450, day + timedelta(minutes=7))):
            rows["transactions"].append({"id": f"tx_lt{i}{suffix}", "customer_id": cid, "card_id": f"card_lt{i}",
                                         "merchant": merchant, "amount_minor": amount, "currency": "GBP",
                                         "kind": "card_payment", "status": "posted",
                                         "created_at": when.strftime("%Y-%m-%dT%H:%M:%SZ"), "reference": None})
    store.insert_rows(rows)
    return ids


class Target:
    """A running server (one or more instances) with its stores."""

    def __init__(self, mode: str, pg: str, home: Path, engine_venv: str | None = None):
        self.mode, self.pg, self.home, self.engine_venv = mode, pg, home, engine_venv
        self.proc: subprocess.Popen | None = None
        self.db_url: str | None = None
        self.instances = 2 if mode in ("pg2", "lgpg2") else 1
        self.engine = "langgraph-pg" if mode == "lgpg2" else "aegra"
        self.port = _free_ports(self.instances)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH_", "LANGCHAIN_", "OPENAI_"))}
        self.env.update(SWITCHBOARD_HOME=str(home), PYTHONUNBUFFERED="1", LANGGRAPH_CLI_NO_ANALYTICS="1",
                        LANGGRAPH_NO_VERSION_CHECK="true", LANGSMITH_TRACING="false")

    def store_target(self) -> str:
        return self.db_url if self.db_url else str(self.home / "business.db")

    def start(self) -> None:
        self.out = self.home.parent / f"{self.mode}.out"
        sink = self.out.open("w")
        bin_dir = Path(sys.executable).parent
        if self.mode == "sqlite1":
            (self.home.parent / "graph").symlink_to(REPO / "graph")  # langgraph.json names ./graph/service/auth.py
            cmd = [str(bin_dir / "langgraph"), "dev", "--config", str(REPO / "langgraph.json"), "--host", "127.0.0.1",
                   "--port", str(self.port), "--no-browser", "--no-reload"]
            ready = lambda: _healthy(f"http://127.0.0.1:{self.port}/ok")  # noqa: E731
        else:
            cmd = [str(bin_dir / "switchboard"), "serve", "--instances", str(self.instances), "--port", str(self.port),
                   "--db", str(self.db_url), "--engine", self.engine]
            if self.engine == "langgraph-pg" and self.engine_venv:
                cmd += ["--engine-venv", self.engine_venv]
            ready = lambda: f"serving {self.instances} instance" in self.out.read_text()  # noqa: E731
        self.proc = subprocess.Popen(cmd, cwd=self.home.parent, env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        deadline = time.monotonic() + 240
        while not ready():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.mode} did not start: {self.out.read_text()[-2000:]}")
            time.sleep(0.3)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT if self.mode != "sqlite1" else signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)

    def pid_of(self, index: int) -> int:
        for _ in range(50):
            try:
                rows = json.loads((self.home / "serve" / self.engine / "instances.json").read_text())
                return next(r["pid"] for r in rows if r["index"] == index)
            except ValueError:  # being rewritten
                time.sleep(0.05)
        raise RuntimeError("instances.json unreadable")


class Load:
    """The workload of one mode."""

    def __init__(self, target: Target, customers: list[str], tokens: dict[str, str], args: argparse.Namespace):
        from langgraph_sdk import get_sync_client

        self.t, self.args, self.stats = target, args, Stats()
        self.customers, self.tokens = customers, tokens
        self.clients = {who: [get_sync_client(url=f"http://127.0.0.1:{target.port + i}",
                                              headers={"Authorization": f"Bearer {tok}"}, timeout=120)
                              for i in range(target.instances)] for who, tok in tokens.items()}
        self.threads: dict[str, dict] = {}
        self.total = len(customers) * 3
        self._desk: Any = None
        self._desk_lock = threading.Lock()

    # -- one conversation ----------------------------------------------------------------------
    def conversation(self, i: int, deadline: float) -> None:
        if time.monotonic() > deadline:
            return
        cid = self.customers[i]
        home = i % self.t.instances
        other = (home + 1) % self.t.instances
        approval = (i % round(1 / self.args.approval_share)) == 0 if self.args.approval_share > 0 else False
        tid = self._call(cid, home, lambda c: c.threads.create())["thread_id"]
        rec = self.threads[tid] = {"customer": cid, "sent": 0, "approval": approval, "tx": f"tx_lt{i}a"}
        texts = (TURN1, f"I want a refund for tx_lt{i}a please" if approval else CARD, THANKS)
        for n, text in enumerate(texts, 1):
            self.turn(tid, rec, cid, home, text, last=n == len(texts))
            if approval and rec["sent"] == 2:
                self.resume(tid, other)

    def turn(self, tid: str, rec: dict, cid: str, inst: int, text: str, last: bool = True) -> None:
        rec["sent"] += 1
        t0 = time.perf_counter()
        try:
            out = self.clients[cid][inst].runs.wait(tid, "switchboard", input={
                "messages": [{"role": "user", "content": text}]})
            ok = isinstance(out, dict) and bool(out.get("outcome") or out.get("pending_approval"))
        except Exception:  # noqa: BLE001 - connection refused / reset while an instance is down
            ok = False
        if not ok:
            self.stats.bump("errors")
            self.settle(tid, rec, cid, inst, text, last)
        self.stats.add(time.perf_counter() - t0)

    def settle(self, tid: str, rec: dict, cid: str, inst: int, text: str, last: bool = True) -> None:
        """A failed turn: answered already, or recover it (with ``--settle next``, a turn stored but cut short is left
        to the customer's next message, which the graph finishes first: ``graph.cut_turns``; the last turn of a
        conversation is still recovered), or send it again."""
        for _ in range(120):
            state = self._try_state(tid, cid, inst)
            if state is None:
                time.sleep(1)
                continue
            msgs = (state.get("values") or {}).get("messages") or []
            humans = sum(1 for m in msgs if m.get("type") == "human")
            if humans >= rec["sent"]:
                if msgs and msgs[-1].get("type") == "ai" and not state.get("next"):
                    rec.setdefault("log", []).append(f"turn {rec['sent']}: answered")
                    return
                if _interrupted(state):
                    rec.setdefault("log", []).append(f"turn {rec['sent']}: paused")
                    return  # paused for approval: the resume follows
                if self.args.settle == "next" and not last and state.get("next") and not _running(state):
                    rec.setdefault("log", []).append(f"turn {rec['sent']}: left to the next message "
                                                     f"(next={state.get('next')})")
                    self.stats.bump("left_to_next")
                    return
                if not self._recover(tid):
                    time.sleep(1)  # the turn is still running on an instance (its run holds the thread): look again
                    continue
                rec.setdefault("log", []).append(f"turn {rec['sent']}: recovered (next={state.get('next')})")
                self.stats.bump("recovered")
                return
            rec.setdefault("log", []).append(f"turn {rec['sent']}: resent (humans={humans})")
            self.stats.bump("resent")
            try:
                self.clients[cid][(inst + 1) % self.t.instances].runs.wait(tid, "switchboard", input={
                    "messages": [{"role": "user", "content": text}]})
            except Exception:  # noqa: BLE001 - loop again: the state decides
                time.sleep(1)
        raise RuntimeError(f"could not settle a turn on {tid}")

    def resume(self, tid: str, inst: int) -> None:
        t0 = time.perf_counter()
        for attempt in range(60):
            try:
                out = self.clients["ops"][(inst + attempt) % self.t.instances].runs.wait(
                    tid, "switchboard", command={"resume": {"decision": "approve", "note": "load test"}})
                if isinstance(out, dict) and out.get("outcome"):
                    break
            except Exception:  # noqa: BLE001 - instance down, or Aegra's thread status lost with a killed run
                pass
            state = self._try_state(tid, self.threads[tid]["customer"], inst)
            log = self.threads[tid].setdefault("log", [])
            if state is not None and not _interrupted(state) and not state.get("next"):
                log.append(f"resume attempt {attempt}: decided already")
                break  # decided already (a retry after a lost response)
            if state is not None and attempt >= 2:
                if _interrupted(state):
                    self._resume_here(tid)  # the engine refuses to resume (its thread status): over the shared DB
                    log.append(f"resume attempt {attempt}: resumed over the shared database")
                else:
                    if not self._recover(tid):  # the resumed run was killed between nodes: finish it
                        time.sleep(1)  # ... unless it still runs on an instance (busy): look again
                        continue
                    log.append(f"resume attempt {attempt}: recovered (next={state.get('next')})")
                    self.stats.bump("recovered")
                    after = self._try_state(tid, self.threads[tid]["customer"], inst)
                    if after is not None and _interrupted(after):
                        # the recovered turn was the refund request itself (cut before its pause): it now waits for
                        # the approval this loop is here to give; the next attempt gives it
                        log.append(f"resume attempt {attempt}: the recovered turn paused for approval")
                        continue
                self.stats.bump("resume_fallbacks")
                break
            time.sleep(1)
        with self.stats.lock:
            self.stats.resumes += 1
            self.stats.latencies.append(time.perf_counter() - t0)

    # -- helpers -------------------------------------------------------------------------------------
    def _call(self, who: str, inst: int, fn: Any) -> Any:
        for attempt in range(60):
            try:
                return fn(self.clients[who][(inst + attempt) % self.t.instances])
            except Exception:  # noqa: BLE001 - instance down: try the other, then wait
                time.sleep(0.5)
        raise RuntimeError("no instance answered")

    def _try_state(self, tid: str, who: str, inst: int) -> dict | None:
        """The thread's state from the first instance that answers, else None."""
        for k in range(self.t.instances):
            try:
                return self.clients[who][(inst + k) % self.t.instances].threads.get_state(tid)
            except Exception:  # noqa: BLE001 - an instance down
                continue
        return None

    def _desk_for_recovery(self) -> Any:
        with self._desk_lock:
            if self._desk is None:
                from checkpoints import open_checkpointer
                from graph.builder import build_desk
                from graph.contracts.settings import Settings

                settings = Settings(db=self.t.store_target())
                self._desk = build_desk(checkpointer=open_checkpointer(settings.db), settings=settings)
            return self._desk

    def _recover(self, tid: str) -> bool:
        """``recover`` as operator ops over the shared database: the interrupted turn is continued with the rights of
        the thread's owner as recorded server-side (``Conversation.recover``), whatever node it stopped before.
        False when the thread is busy (a run of an instance still holds its advisory lock: the turn was slow, not
        killed; with 200 conversations at once a client's wait can end before its run does)."""
        from graph.contracts.context import RunContext
        from graph.contracts.errors import InputError
        from graph.conversation import Conversation

        try:
            r = Conversation(tid, desk=self._desk_for_recovery(),
                             context=RunContext.for_operator("ops", "t_demo")).recover()
        except InputError as exc:
            if "busy" not in str(exc):
                raise
            self.threads[tid].setdefault("log", []).append("recover: thread busy with a running turn")
            self.stats.bump("recover_busy")
            return False
        if r is None:
            self.threads[tid].setdefault("log", []).append("recover found nothing to finish")
        return True

    def _resume_here(self, tid: str) -> None:
        from graph.contracts.context import RunContext
        from graph.conversation import Conversation

        conv = Conversation(tid, desk=self._desk_for_recovery(), context=RunContext.for_operator("ops", "t_demo"))
        if conv.recover() is None:  # a decision claimed by a run that was killed is replayed by recover()
            conv.resume({"decision": "approve", "note": "load test"})


def _interrupted(state: dict) -> bool:
    return any(t.get("interrupts") for t in state.get("tasks") or [])


def _running(state: dict) -> bool:
    """Is a run of an instance still at work on the thread (its checkpoint is younger than 2 s)? A cut turn's last
    checkpoint stops ageing; a slow one's keeps being replaced."""
    created = state.get("created_at")
    if not created:
        return False
    try:
        when = datetime.fromisoformat(str(created).replace("Z", "+00:00"))
    except ValueError:
        return False
    return (datetime.now(UTC) - when).total_seconds() < 2


def run_mode(mode: str, args: argparse.Namespace) -> dict:
    from checkpoints.business import open_store

    tmp = Path(tempfile.mkdtemp(prefix=f"sb-load-{mode}-"))
    home = tmp / "home"
    target = Target(mode, args.pg, home, args.engine_venv)
    dbname = None
    if mode != "sqlite1":
        import psycopg

        dbname = f"sb_load_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.pg, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{dbname}"')
        target.db_url = args.pg.rsplit("/", 1)[0] + "/" + dbname
    try:
        store = open_store(target.store_target())
        customers = seed_customers(store, args.conversations)
        store.add_operator("ops", "t_demo", ["approver", "agent"])
        tokens = {cid: store.issue_token("customer", cid, "t_demo")[1] for cid in customers}
        tokens["ops"] = store.issue_token("operator", "ops", "t_demo")[1]
        target.start()
        load = Load(target, customers, tokens, args)
        killer = threading.Thread(target=_kill_midway, args=(load, args), daemon=True) if load.t.instances == 2 else None
        t0 = time.perf_counter()
        deadline = time.monotonic() + args.limit_s
        if killer:
            killer.start()
        with ThreadPoolExecutor(args.concurrency) as pool:
            list(pool.map(lambda i: load.conversation(i, deadline), range(args.conversations)))
        wall = time.perf_counter() - t0
        if killer:
            killer.join(timeout=130)
            load.stats.kill["failed_requests_after_kill"] = load.stats.errors - load.stats.kill.get("errors_before", 0)
        checks = verify(load, open_store(target.store_target()))
        if (checks["odd_threads"] or not checks["ledger_ok"]) and dbname:
            print(f"kept database {dbname} for inspection (odd threads or ledger)", file=sys.stderr)
            dbname = None  # not dropped
        lat = sorted(load.stats.latencies)
        return {"mode": mode, "conversations": len(load.threads), "turns": load.stats.turns,
                "resumes": load.stats.resumes, "wall_s": round(wall, 1),
                "turns_per_s": round((load.stats.turns + load.stats.resumes) / wall, 2),
                "p50_ms": round(1000 * statistics.median(lat)), "p95_ms": round(1000 * lat[int(0.95 * (len(lat) - 1))]),
                "request_errors": load.stats.errors, "recovered": load.stats.recovered, "resent": load.stats.resent,
                "resume_fallbacks": load.stats.resume_fallbacks, "left_to_next_message": load.stats.left_to_next,
                "recover_busy": load.stats.recover_busy, "kill": load.stats.kill, **checks}
    finally:
        target.stop()
        if dbname:
            import psycopg

            from checkpoints.business.engine import dispose, resolve_url

            dispose(resolve_url(str(target.db_url)))
            with psycopg.connect(args.pg, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _kill_midway(load: Load, args: argparse.Namespace) -> None:
    """SIGKILL instance 1 once ``kill_at`` of the turns are done; time how long until it answers again."""
    while load.stats.turns < args.kill_at * load.total:
        time.sleep(0.05)
    pid = load.t.pid_of(1)
    errors_before, at_turns = load.stats.errors, load.stats.turns
    os.kill(pid, signal.SIGKILL)
    killed = time.perf_counter()
    url = f"http://127.0.0.1:{load.t.port + 1}/{'ok' if load.t.engine == 'langgraph-pg' else 'health'}"
    back = None
    while time.perf_counter() - killed < 120:
        if load.t.pid_of(1) != pid and _healthy(url):  # restarted by the launcher and answering
            back = round(time.perf_counter() - killed, 1)
            break
        time.sleep(0.1)
    load.stats.kill = {"killed_pid": pid, "at_turns": at_turns, "back_after_s": back, "errors_before": errors_before}


def verify(load: Load, store: Any) -> dict:
    """Lost turns, interleaved turns, duplicate refunds and the ledger, from the stored state."""
    lost = interleaved = unfinished = 0
    odd: list[dict] = []
    for tid, rec in load.threads.items():
        state = load._try_state(tid, rec["customer"], 0) or {}
        rec["paused_at_end"] = _interrupted(state)
        msgs = (state.get("values") or {}).get("messages") or []
        kinds = [m.get("type") for m in msgs]
        humans = kinds.count("human")
        lost += max(0, rec["sent"] - humans)
        lost += sum(1 for a, b in zip(kinds, kinds[1:] + [None]) if a == "human" and b != "ai")  # unanswered
        interleaved += sum(1 for a, b in zip(kinds, kinds[1:]) if a == "human" and b == "human")
        if state.get("next"):
            unfinished += 1
        if humans != rec["sent"] or state.get("next") or "human" in kinds[-1:]:
            odd.append({"thread": tid, "sent": rec["sent"], "kinds": kinds, "next": state.get("next"),
                        "log": rec.get("log", [])})
    executed = duplicates = 0
    with store.engine.connect() as conn:
        from sqlalchemy import text

        per_tx = conn.execute(text("SELECT transaction_id, COUNT(*) FROM refunds WHERE status = 'executed' "
                                   "AND customer_id LIKE 'c_lt%' GROUP BY transaction_id")).all()
        effects = conn.execute(text("SELECT COUNT(*) FROM side_effects WHERE idempotency_key LIKE 'refund-exec:%'")
                               ).scalar_one()
    executed = sum(n for _, n in per_tx)
    duplicates = sum(n - 1 for _, n in per_tx if n > 1)
    approvals = sum(1 for r in load.threads.values() if r["approval"])
    paid = {tx for tx, n in per_tx if n}
    # an approval is stuck when its refund was never paid or its thread still waits for a decision
    stuck = [tid for tid, r in load.threads.items() if r["approval"] and (r["tx"] not in paid or r.get("paused_at_end"))]
    return {"lost_turns": lost, "interleaved_turns": interleaved, "unfinished_threads": unfinished,
            "duplicate_refunds": duplicates, "executed_refunds": executed, "refund_side_effects": effects,
            "approvals": approvals, "stuck_approvals": len(stuck), "runs_left_running": runs_left_running(load),
            "ledger_ok": executed == approvals == effects, "odd_threads": odd[:5]}


def runs_left_running(load: Load) -> int:
    """Aegra's run records still ``pending`` / ``running`` once every conversation is done (``switchboard serve``
    marks those of a killed instance within ``graph.service.serve.ORPHAN_GRACE_S`` + ``SWEEP_EVERY_S`` seconds: waited for
    here, bounded); 0 for the modes without Aegra's tables."""
    if load.t.engine != "aegra" or not load.t.db_url:
        return 0
    import psycopg

    from graph.service.serve import ORPHAN_GRACE_S, SWEEP_EVERY_S

    deadline = time.monotonic() + ORPHAN_GRACE_S + 3 * SWEEP_EVERY_S
    while True:
        with psycopg.connect(load.t.db_url, autocommit=True) as conn:
            left = conn.execute("SELECT COUNT(*) FROM runs WHERE status IN ('pending', 'running')").fetchone()[0]
        if not left or time.monotonic() > deadline:
            return int(left)
        time.sleep(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conversations", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--modes", default="sqlite1,pg1,pg2")
    ap.add_argument("--approval-share", type=float, default=0.2)
    ap.add_argument("--kill-at", type=float, default=0.4)
    ap.add_argument("--limit-s", type=float, default=900)
    ap.add_argument("--settle", choices=("recover", "next"), default="recover",
                    help="a failed turn stored but cut short: recover it at once (default), or leave it to the "
                    "customer's next message (the graph finishes it first; the last turn is recovered)")
    ap.add_argument("--pg", default=os.environ.get("SWITCHBOARD_TEST_POSTGRES") or "postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--engine-venv", default=None, help="lgpg2: the langgraph-pg virtual environment "
                    "(default: the launcher's, .venv-langgraph-pg)")
    args = ap.parse_args()
    results = []
    for mode in args.modes.split(","):
        r = run_mode(mode.strip(), args)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(f"\n{'mode':8} {'turns/s':>8} {'p50 ms':>7} {'p95 ms':>7} {'errors':>6} {'recov':>5} {'resent':>6} "
          f"{'lost':>4} {'dup':>3} {'interl':>6} {'stuck':>5} {'running':>7} {'paid':>7} ledger")
    for r in results:
        print(f"{r['mode']:8} {r['turns_per_s']:>8} {r['p50_ms']:>7} {r['p95_ms']:>7} {r['request_errors']:>6} "
              f"{r['recovered']:>5} {r['resent']:>6} {r['lost_turns']:>4} {r['duplicate_refunds']:>3} "
              f"{r['interleaved_turns']:>6} {r['stuck_approvals']:>5} {r['runs_left_running']:>7} "
              f"{str(r['executed_refunds']) + '/' + str(r['approvals']):>7} "
              f"{'ok' if r['ledger_ok'] else 'MISMATCH'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    bad = [r for r in results if r["lost_turns"] or r["duplicate_refunds"] or r["interleaved_turns"]
           or r["stuck_approvals"] or r["runs_left_running"] or not r["ledger_ok"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
