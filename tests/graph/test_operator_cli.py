"""The CLI acts as an operator: --as / SWITCHBOARD_OPERATOR,
refusals that are one line, exit 2 and recorded; tenant scoping; redaction with --reveal; operators, tokens, stuck
tasks, overdue approvals."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkpoints import open_checkpointer
from checkpoints.business import open_store
from checkpoints.event_log import open_event_log
from graph.app.cli_output import OPERATOR_KEYS, RECOVER_KEYS, RECOVERED_KEYS, TASK_KEYS
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied
from graph.conversation import Conversation
from tests.conftest import approver_desk, invoke_cli

REPO = Path(__file__).resolve().parents[2]


def _cli(home: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "SWITCHBOARD_OPERATOR"}
    full.update(SWITCHBOARD_HOME=str(home), COLUMNS="250", **(env or {}))
    return subprocess.run([sys.executable, "-m", "graph.app.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env=full)


# -- refusals ----------------------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_refusals_are_one_line_exit_2_and_recorded(home):
    store = open_store(home / "business.db")
    store.add_operator("gone", "t_demo", ["agent"])
    store.set_operator_enabled("gone", False)
    cases = [
        (("threads",), "pass --as NAME or set SWITCHBOARD_OPERATOR", "unknown"),
        (("threads", "--as", "nobody"), "unknown operator 'nobody'", "operator:nobody"),
        (("history", "p", "--as", "gone"), "operator gone is disabled", "operator:gone"),
        (("resume", "p", "--approve", "--as", "agt"), "operator agt lacks the role approver", "operator:agt"),
        (("operators", "list", "--as", "ann"), "operator ann lacks the role admin", "operator:ann"),
        (("resume", "p", "--approve", "--as", "ann", "--approver", "ben"), "--approver ben does not match --as ann",
         "operator:ann"),
    ]
    for args, message, actor in cases:
        r = _cli(home, *args)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (args, r.stderr)
        assert store.audit_entries(actor=actor, limit=1)[0].outcome == "denied", args
    assert Conversation("p", graph=approver_desk(home)[0]).pending() is not None  # nothing decided
    kinds = open_event_log(home / "switchboard.db").events("p", kinds=["access_denied"])
    assert {e.detail["principal"] for e in kinds} >= {"operator:gone", "operator:agt", "operator:ann"}


@pytest.mark.subprocess
def test_chat_on_another_customers_thread_is_refused_and_recorded(home):
    g, _ = approver_desk(home)
    before = g.get_state({"configurable": {"thread_id": "p"}}).config["configurable"]["checkpoint_id"]
    r = _cli(home, "chat", "cancel my refund", "--thread", "p", "--user", "c_bob")
    assert r.returncode == 2 and r.stderr.strip() == "error: thread p is not one of your threads", r.stderr
    assert r.stdout == ""  # no "thread p" header for a refused turn
    assert g.get_state({"configurable": {"thread_id": "p"}}).config["configurable"]["checkpoint_id"] == before
    [ev] = open_event_log(home / "switchboard.db").events("p", kinds=["access_denied"])
    assert ev.detail["principal"] == "customer:c_bob" and ev.detail["action"] == "turn"
    r = _cli(home, "chat", "hello", "--thread", "new", "--user", "c_nobody")
    assert r.returncode == 2 and "unknown customer 'c_nobody'" in r.stderr


@pytest.mark.subprocess
def test_environment_names_the_operator_and_the_deprecated_alias_still_works(home):
    r = _cli(home, "pending", env={"SWITCHBOARD_OPERATOR": "agt"})
    assert r.returncode == 0 and "p" in r.stdout and "0/1" in r.stdout, r.stderr
    r = _cli(home, "resume", "p", "--approve", "--approver", "ann", "--note", "ok")
    assert r.returncode == 0, r.stderr
    assert "paid back" in r.stdout and "deprecated" in r.stderr


# -- tenant scoping and redaction ----------------------------------------------------------------------------------


def _other_tenant(home: Path) -> None:
    store = open_store(home / "business.db")
    store.insert_rows({"customers": [{"id": "c_zed", "tenant_id": "t_other", "name": "Zed", "email": "z@example.org",
                                      "flags": "{}"}]})
    store.add_operator("oz", "t_other", ["agent", "approver"])
    g, _ = approver_desk(home)
    Conversation("z", graph=g, context=RunContext(user_id="c_zed", tenant_id="t_other")).send("where is my card?")


def test_operators_see_only_their_tenant(home):
    _other_tenant(home)
    mine = invoke_cli("threads", "--as", "agt")
    assert mine.exit_code == 0 and " p " in mine.output and " z " not in mine.output, mine.output
    theirs = invoke_cli("threads", "--as", "oz")
    assert theirs.exit_code == 0 and " z " in theirs.output and " p " not in theirs.output, theirs.output
    for args in (("history", "z", "--as", "agt"), ("trace", "z", "--as", "agt"), ("recover", "z", "--as", "agt")):
        r = invoke_cli(*args)
        assert isinstance(r.exception, AccessDenied) and "not a thread of tenant t_demo" in str(r.exception), args
    r = invoke_cli("resume", "p", "--approve", "--as", "oz")
    assert isinstance(r.exception, AccessDenied) and "tenant t_other" in str(r.exception)
    pend = invoke_cli("pending", "--as", "oz")
    assert pend.exit_code == 0 and "nothing is waiting" in pend.output
    stats = invoke_cli("stats", "--as", "oz", "--json")
    assert stats.exit_code == 0 and '"threads": 1' in stats.output


@pytest.mark.subprocess
def test_a_refused_chat_prints_nothing_on_stdout_and_an_accepted_one_its_header(home):
    empty = _cli(home, "chat", "", "--thread", "e1")
    assert empty.returncode == 2 and empty.stdout == "" and empty.stderr.strip() == "error: the message is empty"
    ok = _cli(home, "chat", "where is my card?", "--thread", "e2", "--stream")
    assert ok.returncode == 0 and ok.stdout.splitlines()[0] == "thread e2", ok.stdout


def test_a_customer_cannot_tell_another_customers_thread_from_an_unknown_one(home):
    from graph.contracts.errors import InputError

    bob = RunContext(user_id="c_bob", tenant_id="t_demo")
    g, _ = approver_desk(home)
    with pytest.raises(InputError) as unknown:
        Conversation("nope", graph=g, context=bob).resume({"decision": "cancel"})
    with pytest.raises(AccessDenied) as foreign:
        Conversation("p", graph=g, context=bob).resume({"decision": "cancel"})
    assert str(unknown.value) == "thread nope is not one of your threads"
    assert str(foreign.value) == "thread p is not one of your threads"
    with pytest.raises(AccessDenied) as turn:
        Conversation("p", graph=g, context=bob).send("hello")
    assert str(turn.value) == "thread p is not one of your threads"


def test_draw_thread_needs_an_operator_of_the_tenant_and_confirms_no_thread_id(home, monkeypatch):
    # draw --thread needs an operator of the thread's tenant, and its refusal does not tell whether the thread exists
    _other_tenant(home)
    monkeypatch.delenv("SWITCHBOARD_OPERATOR", raising=False)
    nobody = invoke_cli("draw", "--format", "ascii", "--thread", "p")
    assert isinstance(nobody.exception, AccessDenied) and "triage" not in nobody.output
    mine = invoke_cli("draw", "--format", "ascii", "--thread", "p", "--as", "agt")
    assert mine.exit_code == 0 and "triage -> refunds" in mine.output, mine.output
    foreign = invoke_cli("draw", "--format", "ascii", "--thread", "z", "--as", "agt")
    unknown = invoke_cli("draw", "--format", "ascii", "--thread", "nope", "--as", "agt")
    assert isinstance(foreign.exception, AccessDenied) and isinstance(unknown.exception, AccessDenied)
    assert str(foreign.exception) == "thread z is not a thread of tenant t_demo"
    assert str(unknown.exception) == "thread nope is not a thread of tenant t_demo"  # the same answer: no oracle
    for cmd in ("history", "trace"):  # the inspection commands answer an unknown thread the same way
        r = invoke_cli(cmd, "nope", "--as", "agt")
        assert isinstance(r.exception, AccessDenied) and str(r.exception) == "thread nope is not a thread of tenant t_demo"
    assert invoke_cli("draw", "--format", "ascii").exit_code == 0  # the plain graph needs nobody


def test_history_and_trace_hide_personal_data_unless_revealed(home):
    g, _ = approver_desk(home)
    text = "My card 4242 4242 4242 4242 was used; mail ada@example.com or call +44 20 7946 0958"
    Conversation("pii", graph=g).send(text)
    shown = invoke_cli("history", "pii", "--as", "agt")
    assert shown.exit_code == 0, shown.output
    assert "4242 4242 4242 4242" not in shown.output and "•••• 4242" in shown.output
    assert "ada@example.com" not in shown.output and "+44 20 7946 0958" not in shown.output
    trace = invoke_cli("trace", "pii", "--as", "agt", "--json")
    assert trace.exit_code == 0 and "ada@example.com" not in trace.output
    store = open_store(home / "business.db")
    assert store.audit_entries(action="history --reveal") == []
    revealed = invoke_cli("history", "pii", "--as", "agt", "--reveal")
    assert revealed.exit_code == 0 and "ada@example.com" in revealed.output
    [entry] = store.audit_entries(action="history --reveal")
    assert entry.actor == "operator:agt" and entry.target == "thread:pii" and entry.outcome == "allowed"


# -- operators and tokens --------------------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_first_admin_bootstrap_then_admin_only(isolated_home):
    r = _cli(isolated_home, "operators", "add", "ann", "--tenant", "t_demo", "--role", "approver")
    assert r.returncode == 2 and "the first operator of a home must be an admin" in r.stderr
    r = _cli(isolated_home, "operators", "add", "ida", "--tenant", "t_demo", "--role", "admin")
    assert r.returncode == 0, r.stderr
    r = _cli(isolated_home, "operators", "add", "eve", "--tenant", "t_demo", "--role", "admin")
    assert r.returncode == 2 and "pass --as NAME" in r.stderr  # the window closed with the first admin
    store = open_store(isolated_home / "business.db")
    assert store.get_operator("eve") is None
    store.add_operator("ida2", "t_other", ["admin"])
    r = _cli(isolated_home, "operators", "add", "ann", "--tenant", "t_demo", "--role", "approver", "--as", "ida2")
    assert r.returncode == 2 and "administers tenant t_other, not t_demo" in r.stderr
    for bad, msg in ((("risk-policy", "approver"), "reserved"), (("ann", "boss"), "roles must be")):
        r = _cli(isolated_home, "operators", "add", bad[0], "--tenant", "t_demo", "--role", bad[1], "--as", "ida")
        assert r.returncode == 2 and msg in r.stderr, r.stderr
    r = _cli(isolated_home, "operators", "add", "ann", "--tenant", "t_demo", "--role", "approver", "--role", "agent",
             "--as", "ida")
    assert r.returncode == 0 and store.get_operator("ann").roles == ("agent", "approver")
    assert _cli(isolated_home, "operators", "disable", "ida", "--as", "ida").returncode == 2  # not oneself
    r = _cli(isolated_home, "operators", "disable", "ann", "--as", "ida")
    assert r.returncode == 0 and not store.get_operator("ann").enabled
    added = [(a.actor, a.target) for a in store.audit_entries(action="operators add", limit=20) if a.outcome == "allowed"]
    assert added == [("operator:ida", "operator:ann"), ("bootstrap", "operator:ida")]


def test_bootstrap_ignores_an_exported_operator_until_the_first_admin_exists(isolated_home):
    env = {"SWITCHBOARD_OPERATOR": "ann"}  # someone's shell profile, on a home with no operator yet
    r = _cli(isolated_home, "operators", "add", "ida", "--tenant", "t_demo", "--role", "admin", env=env)
    assert r.returncode == 0 and "added operator ida" in r.stdout, r.stderr
    r = _cli(isolated_home, "operators", "add", "eve", "--tenant", "t_demo", "--role", "admin", env=env)
    assert r.returncode == 2 and r.stderr.strip() == "error: unknown operator 'ann'"  # now it names who acts
    store = open_store(isolated_home / "business.db")
    assert store.get_operator("eve") is None
    assert [(a.actor, a.target) for a in store.audit_entries(action="operators add", limit=5)
            if a.outcome == "allowed"] == [("bootstrap", "operator:ida")]


def test_tokens_are_printed_once_and_stored_hashed(home):
    issued = invoke_cli("tokens", "issue", "--customer", "c_ada", "--label", "ada's phone", "--as", "ida")
    assert issued.exit_code == 0, issued.output
    token = [ln for ln in issued.output.splitlines() if ln.startswith("sbt_")][0]
    store = open_store(home / "business.db")
    [record] = store.list_tokens("t_demo")
    assert store.resolve_token(token).id == record.id and record.principal_id == "c_ada"
    raw = open_store(home / "business.db").engine.connect().exec_driver_sql(
        "SELECT token_sha256 FROM tokens").scalar()
    assert raw == hashlib.sha256(token.encode()).hexdigest() and token not in raw
    listed = invoke_cli("tokens", "list", "--as", "ida")
    assert record.id in listed.output and token not in listed.output
    assert invoke_cli("tokens", "issue", "--operator", "ann", "--as", "ann").exception is not None  # not an admin
    assert isinstance(invoke_cli("tokens", "issue", "--customer", "c_nobody", "--as", "ida").exception, AccessDenied)
    assert invoke_cli("tokens", "revoke", record.id, "--as", "ida").exit_code == 0
    assert store.resolve_token(token) is None


# -- stuck tasks and deadlines ---------------------------------------------------------------------------------------


def test_stuck_task_of_a_deleted_thread_is_listed_and_closed(home):
    g, store = approver_desk(home)
    r = Conversation("lost", graph=g, context=RunContext(user_id="c_bob")).send("Please refund tx_2001, I never got "
                                                                              "my sandwich")
    task_id, refund_id = r.pending.task_id, r.pending.refund_id
    assert task_id not in invoke_cli("tasks", "--stuck", "--as", "agt").output
    open_checkpointer(home / "switchboard.db").delete_thread("lost")
    listed = invoke_cli("tasks", "--stuck", "--as", "agt")
    assert listed.exit_code == 0 and task_id in listed.output and "thread gone" in listed.output, listed.output
    refused = invoke_cli("tasks", "close", task_id, "--as", "agt")
    assert isinstance(refused.exception, AccessDenied) and "lacks the role approver" in str(refused.exception)
    closed = invoke_cli("tasks", "close", task_id, "--as", "ann", "--note", "thread lost in migration")
    assert closed.exit_code == 0 and "customer was not told" in closed.output, closed.output
    assert store.get_task(task_id).status == "cancelled" and store.load_refund(refund_id).status == "cancelled"
    [dec] = store.list_decisions(task_id)
    assert (dec.approver, dec.decision, dec.note) == ("operator:ann", "close", "thread lost in migration")
    assert task_id not in invoke_cli("tasks", "--stuck", "--as", "agt").output
    assert [e.outcome for e in store.audit_entries(action="tasks close")] == ["allowed", "denied"]


def test_closing_a_paused_task_tells_the_customer_and_pays_nothing(home):
    _, store = approver_desk(home)
    req = Conversation("p", graph=approver_desk(home)[0]).pending()
    closed = invoke_cli("tasks", "close", req["task_id"], "--as", "ann")
    assert closed.exit_code == 0 and "customer told on thread p" in closed.output, closed.output
    g, _ = approver_desk(home)
    assert Conversation("p", graph=g).pending() is None
    text = Conversation("p", graph=g).result().text
    assert "closed" in text and "Nothing was paid" in text
    assert store.load_refund(req["refund_id"]).status == "cancelled"
    assert [r for r in store.list_refunds("c_ada") if r.status == "executed"] == []


def test_orphan_refund_is_listed_and_cancelled(home):
    store = open_store(home / "business.db")
    listed = invoke_cli("tasks", "--stuck", "--as", "agt")
    assert "rf_5001" in listed.output and "no task decides this refund" in listed.output  # the demo bank's own
    assert invoke_cli("tasks", "close", "rf_5001", "--as", "ann").exit_code == 0
    assert store.load_refund("rf_5001").status == "cancelled"


def test_overdue_approvals_are_listed_and_expired(home, monkeypatch):
    """Overdue means past the deadline stored with the request when it was made: the deciding process's
    SWITCHBOARD_APPROVAL_DEADLINE_H neither expires p (72 h, requested by the fixture) nor spares q (0.72 s)."""
    assert "nothing is overdue" in invoke_cli("pending", "--overdue", "--as", "agt").output
    monkeypatch.setenv("SWITCHBOARD_APPROVAL_DEADLINE_H", "0.0002")  # 0.72 s: the deadline of NEW requests only
    g, _ = approver_desk(home)
    q = Conversation("q", graph=g, context=RunContext(user_id="c_bob")).send("Refund tx_2002 please")
    assert q.pending is not None, q.text
    time.sleep(1.0)
    monkeypatch.setenv("SWITCHBOARD_APPROVAL_DEADLINE_H", "0.0001")
    overdue = invoke_cli("pending", "--overdue", "--as", "agt")
    assert overdue.exit_code == 0 and " q " in overdue.output and " p " not in overdue.output, overdue.output
    assert isinstance(invoke_cli("recover", "--expire", "--as", "agt").exception, AccessDenied)
    monkeypatch.setenv("SWITCHBOARD_APPROVAL_DEADLINE_H", "1000")  # a long setting now spares nothing already due
    expired = invoke_cli("recover", "--expire", "--as", "ann")
    assert expired.exit_code == 0 and "expired 1 overdue approval" in expired.output, expired.output
    assert "q: expired" in expired.output and "p: expired" not in expired.output, expired.output
    store = open_store(home / "business.db")
    assert [r for r in store.list_refunds("c_bob") if r.status == "executed"] == []
    g, _ = approver_desk(home)
    assert Conversation("p", graph=g).pending() is not None  # p's deadline is days away
    assert Conversation("q", graph=g).pending() is None and "expired" in Conversation("q", graph=g).result().text
    assert [r.status for r in store.list_refunds("c_bob") if r.id == q.pending.refund_id] == ["expired"]
    again = invoke_cli("recover", "--expire", "--as", "ann")  # says what it found: nothing, out of how many threads
    assert again.exit_code == 0 and "nothing to expire: checked 2 threads" in again.output, again.output
    doc = json.loads(invoke_cli("recover", "--expire", "--as", "ann", "--json").stdout)
    assert doc == {"action": "expire", "checked": 2, "finished": []}


def test_recover_expire_json_lists_each_expired_refund(home, monkeypatch):
    monkeypatch.setenv("SWITCHBOARD_APPROVAL_DEADLINE_H", "0.0002")
    g, _ = approver_desk(home)
    q = Conversation("q", graph=g, context=RunContext(user_id="c_bob")).send("Refund tx_2002 please")
    assert q.pending is not None, q.text
    time.sleep(1.0)
    out = invoke_cli("recover", "--expire", "--as", "ann", "--json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)  # stdout holds the one JSON document only
    assert tuple(doc) == RECOVER_KEYS and doc["action"] == "expire" and doc["checked"] == 2, doc
    [row] = doc["finished"]
    assert tuple(row) == RECOVERED_KEYS and row["thread_id"] == "q" and row["refund_id"] == q.pending.refund_id
    assert row["status"] == "answered" and "expired" in row["text"] and "Nothing was paid" in row["text"], row


def test_tasks_and_operators_list_print_json_with_stable_keys(home):
    ops = invoke_cli("operators", "list", "--as", "ida", "--json")
    assert ops.exit_code == 0, ops.output
    rows = json.loads(ops.stdout)
    assert all(tuple(r) == OPERATOR_KEYS for r in rows) and {r["id"] for r in rows} == {"ann", "ben", "agt", "ida"}
    ann = next(r for r in rows if r["id"] == "ann")
    assert ann["roles"] == ["approver"] and ann["enabled"] is True and ann["tenant_id"] == "t_demo"
    assert ann["customer_id"] is None and ann["created_at"].endswith("Z")
    listed = invoke_cli("tasks", "--as", "agt", "--json")
    assert listed.exit_code == 0, listed.output
    tasks = json.loads(listed.stdout)
    assert all(tuple(t) == TASK_KEYS for t in tasks), tasks
    paused = next(t for t in tasks if t["thread_id"] == "p")
    assert paused["kind"] == "task" and paused["status"] == "awaiting_approval" and paused["stuck"] is False
    assert paused["stuck_because"] is None and paused["refund_id"].startswith("rf_")
    orphan = next(t for t in tasks if t["id"] == "rf_5001")  # the demo bank's refund that no task decides
    assert orphan == {"id": "rf_5001", "kind": "refund", "refund_id": "rf_5001", "customer_id": "c_ada",
                      "thread_id": None, "status": "requested", "stuck": True,
                      "stuck_because": "no task decides this refund"}
    stuck = json.loads(invoke_cli("tasks", "--stuck", "--as", "agt", "--json").stdout)
    assert [t["id"] for t in stuck] == ["rf_5001"]
    rec = invoke_cli("recover", "--as", "agt", "--json")
    assert rec.exit_code == 0 and json.loads(rec.stdout) == {"action": "recover", "checked": 1, "finished": []}
    text = invoke_cli("recover", "--as", "agt")
    assert "nothing to recover: checked 1 thread;" in text.output, text.output


def test_operator_tables_are_not_cut_when_piped(home, monkeypatch):
    """``operators list`` and ``tasks`` do not cut dates ("2026-11-30T23…") at 80 columns when piped: piped, a table is
    as wide as its cells need (``graph.app.cli_output.print_table``), even with COLUMNS=40."""
    from rich.console import Console

    from graph.app import operator_cli

    monkeypatch.setattr(operator_cli, "console", Console())  # stdout as CliRunner gives it: not a terminal
    monkeypatch.setenv("COLUMNS", "40")
    r = invoke_cli("operators", "list", "--as", "ida")
    assert r.exit_code == 0, r.output
    assert "…" not in r.stdout and "own customer account" in r.stdout, r.stdout
    created = [op.created_at for op in open_store(home / "business.db").list_operators("t_demo")]
    assert created and all(c in r.stdout for c in created), r.stdout
