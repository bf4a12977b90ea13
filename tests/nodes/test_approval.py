"""Human approval: pause/resume across processes, exactly-once refunds, concurrency, cancellation, bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, InputError
from graph.conversation import Conversation
from tests.conftest import ANN, BIG, SMALL, approver_desk, executed_refunds

REPO = Path(__file__).resolve().parents[2]
BEN = RunContext.for_operator("ben", "t_demo")


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "graph.app.cli", *args, "--db", str(home / "switchboard.db")],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "SWITCHBOARD_HOME": str(home)})


def test_small_refund_is_auto_approved_and_paid(isolated_home):
    g, store = approver_desk(isolated_home)
    r = Conversation("t", graph=g).send(SMALL)
    assert r.status == "answered" and r.agent == "refunds"
    assert "paid back" in r.text and "tx_1008" in r.text
    assert [h.to_agent for h in r.handoff_path][-3:] == ["risk", "refund_execute", "refunds"]
    assert len(executed_refunds(store)) == 1


@pytest.mark.subprocess
def test_big_refund_pauses_then_another_process_approves_once(isolated_home):
    g, store = approver_desk(isolated_home)
    r = Conversation("t-big", graph=g).send(BIG)
    assert r.status == "awaiting_approval" and r.pending.amount_minor == 2380
    assert r.pending.risk_flags and r.pending.refund_id
    assert executed_refunds(store) == []
    listed = _cli(isolated_home, "pending", "--as", "ann")
    assert listed.returncode == 0 and "t-big" in listed.stdout
    first = _cli(isolated_home, "resume", "t-big", "--approve", "--as", "ann", "--note", "receipt checked")
    assert first.returncode == 0, first.stderr
    assert "paid back" in first.stdout
    paid = executed_refunds(store)
    assert len(paid) == 1 and paid[0].transaction_id == "tx_1001"
    second = _cli(isolated_home, "resume", "t-big", "--approve", "--as", "ben")
    assert second.returncode == 2 and "already decided: approve by operator:ann" in second.stderr
    assert len(executed_refunds(store)) == 1
    decisions = store.list_decisions(r.pending.task_id)
    assert [(d.approver, d.decision, d.note) for d in decisions] == [("operator:ann", "approve", "receipt checked")]
    assert store.get_task(r.pending.task_id).status == "completed"


def test_reject_pays_nothing_and_refunds_agent_answers(isolated_home):
    g, store = approver_desk(isolated_home)
    conv = Conversation("t", graph=g)
    conv.send(BIG)
    note = "internal: customer flagged by fraud team, do not tell him"
    task_id = Conversation("t", graph=g).pending()["task_id"]
    r = Conversation("t", graph=g, context=ANN).resume({"decision": "reject", "note": note})
    assert r.agent == "refunds" and "not approved" in r.text and "our team could not approve" in r.text
    assert "fraud" not in r.text and "internal" not in r.text  # the note is internal: the customer never sees it
    state = g.get_state({"configurable": {"thread_id": "t"}}).values
    assert all("fraud" not in str(m.content) for m in state["messages"])
    assert all("fraud" not in str(f) for f in state["handoff"].known_facts)
    assert [(d.decision, d.note) for d in store.list_decisions(task_id)] == [("reject", note)]  # kept for operators
    assert executed_refunds(store) == []


@pytest.mark.subprocess
@pytest.mark.parametrize("note, message", [("bad\x1b[2J", "the note contains control character U+001B at position 3"),
                                           ("x" * 2001, "the note is 2001 characters; the limit is 2000")])
def test_bad_note_is_refused_one_line_nothing_stored(isolated_home, note, message):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    cfg = {"configurable": {"thread_id": "t"}}
    before = g.get_state(cfg).config["configurable"]["checkpoint_id"]
    r = _cli(isolated_home, "resume", "t", "--reject", "--as", "ann", "--note", note)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {message}"), (r.returncode, r.stderr)
    g, store = approver_desk(isolated_home)
    assert g.get_state(cfg).config["configurable"]["checkpoint_id"] == before
    req = Conversation("t", graph=g).pending()
    assert req is not None and store.list_decisions(req["task_id"]) == []


@pytest.mark.parametrize("bad", [{"decision": "maybe"}, {"decision": "approve", "approver": "  "},
                                 {}, {"decision": "approve", "amount": 1}, "yes"])
def test_malformed_decision_refused_thread_unchanged(isolated_home, bad):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    cfg = {"configurable": {"thread_id": "t"}}
    before = g.get_state(cfg).config["configurable"]["checkpoint_id"]
    with pytest.raises(InputError, match="malformed decision"):
        Conversation("t", graph=g, context=ANN).resume(bad)
    assert g.get_state(cfg).config["configurable"]["checkpoint_id"] == before
    assert Conversation("t", graph=g).pending() is not None
    assert executed_refunds(store) == []


@pytest.mark.subprocess
def test_cli_errors_are_one_line_and_change_nothing(isolated_home):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    Conversation("idle", graph=g).send("where is my refund?")
    unknown = _cli(isolated_home, "resume", "nope", "--approve", "--as", "ann")
    assert unknown.returncode == 2 and unknown.stderr.strip().startswith("error: unknown thread")
    idle = _cli(isolated_home, "resume", "idle", "--approve", "--as", "ann")
    assert idle.returncode == 2 and "nothing pending" in idle.stderr
    both = _cli(isolated_home, "resume", "t", "--approve", "--reject", "--as", "ann")
    assert both.returncode == 2 and "exactly one" in both.stderr
    blank = _cli(isolated_home, "resume", "t", "--approve", "--as", " ")
    assert blank.returncode == 2 and len(blank.stderr.strip().splitlines()) == 1
    assert Conversation("t", graph=g).pending() is not None and executed_refunds(store) == []


def test_customer_cannot_approve(isolated_home):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    with pytest.raises(AccessDenied, match="not authorized"):
        Conversation("t", graph=g).resume({"decision": "approve"})  # the customer's own context
    with pytest.raises(ValueError, match="cannot claim roles"):  # a customer claiming the approver role: refused
        Conversation("t", graph=g, context=RunContext(roles=("approver",))).resume({"decision": "approve"})
    assert Conversation("t", graph=g).pending() is not None


def test_cancel_then_approve_executes_nothing(isolated_home):
    g, store = approver_desk(isolated_home)
    conv = Conversation("t", graph=g)
    conv.send(BIG)
    assert conv.send("Actually, cancel my refund please").text.startswith("Cancel refund")
    r = conv.send("yes")
    assert r.agent == "refunds" and "cancelled" in r.text
    with pytest.raises(InputError, match="already decided: cancel by customer:c_ada"):
        Conversation("t", graph=g, context=ANN).resume({"decision": "approve"})
    assert executed_refunds(store) == []
    assert [x.status for x in store.list_refunds("c_ada") if x.transaction_id == "tx_1001"] == ["cancelled"]


def test_cancel_out_of_band_then_approve_is_already_decided(isolated_home):
    g, store = approver_desk(isolated_home)
    r = Conversation("t", graph=g).send(BIG)
    store.decide_approval(r.pending.task_id, "dc_phone", "customer:c_ada", "cancel", "called the bank",
                          refund_id=r.pending.refund_id)
    with pytest.raises(InputError, match="already decided: cancel"):
        Conversation("t", graph=g, context=ANN).resume({"decision": "approve"})
    assert executed_refunds(store) == []


RACE = r'''
import sys, os, time
from graph.contracts.context import RunContext
from graph.conversation import Conversation
from graph.app.cli import _approval_desk
from graph.contracts.errors import InputError
from pathlib import Path
d = _approval_desk(Path(sys.argv[1]))
conv = Conversation("race", desk=d, context=RunContext.for_operator(sys.argv[3], "t_demo"))
Path(sys.argv[2] + "." + sys.argv[3] + ".ready").touch()  # readiness signal: the graph is built
while not Path(sys.argv[2]).exists():
    time.sleep(0.001)
try:
    r = conv.resume({"decision": "approve"})
    print("OK", r.status)
except InputError as exc:
    print("ERR", exc)
'''


@pytest.mark.subprocess
def test_two_processes_resume_at_once_exactly_one_refund(isolated_home, tmp_path):
    g, store = approver_desk(isolated_home)
    Conversation("race", graph=g).send(BIG)
    go = tmp_path / "go"
    env = {**os.environ, "SWITCHBOARD_HOME": str(isolated_home)}
    procs = [subprocess.Popen([sys.executable, "-c", RACE, str(isolated_home / "switchboard.db"), str(go), name],
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for name in ("ann", "ben")]
    import time

    deadline = time.monotonic() + 120
    ready = [tmp_path / f"go.{name}.ready" for name in ("ann", "ben")]
    while not all(r.exists() for r in ready):  # wait for both readiness signals (not a fixed sleep)
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.02)
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    lines = sorted(o[0].strip().splitlines()[-1] for o in outs)
    assert lines[0].startswith("ERR already decided: approve by operator:"), outs
    assert lines[1] == "OK answered", outs
    assert len(executed_refunds(store)) == 1
