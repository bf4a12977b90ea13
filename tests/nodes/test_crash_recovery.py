"""Crash windows of the approval flow, deterministic and random (SIGKILL)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from graph.contracts.context import RunContext
from graph.conversation import Conversation
from tests.conftest import BIG, approver_desk, executed_refunds

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
APPROVER = RunContext.for_operator("ann", "t_demo")  # registered by tests.nodes.test_approval._setup


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the graph catches it."""


def test_crash_after_payment_before_checkpoint_pays_once(isolated_home, monkeypatch):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    real = store.execute_refund

    def pay_then_die(refund_id, key):
        real(refund_id, key)
        raise Crash()

    monkeypatch.setattr(store, "execute_refund", pay_then_die)
    with pytest.raises(Crash):
        Conversation("t", graph=g, context=APPROVER).resume({"decision": "approve"})
    assert len(executed_refunds(store)) == 1  # the money left, but the checkpoint does not know yet
    monkeypatch.setattr(store, "execute_refund", real)
    r = Conversation("t", graph=g, context=APPROVER).recover()
    assert r is not None and r.status == "answered" and "paid back" in r.text
    assert len(executed_refunds(store)) == 1  # replayed by idempotency key, not paid twice
    assert Conversation("t", graph=g).recover() is None  # nothing left to do


def test_crash_after_claim_before_resume_is_not_a_lost_approval(isolated_home):
    g, store = approver_desk(isolated_home)
    r = Conversation("t", graph=g).send(BIG)
    store.decide_approval(r.pending.task_id, "dc_claimed", "operator:ann", "approve", "ok", refund_id=r.pending.refund_id)
    # the approver's process died here: the store knows the decision, the thread is still paused
    out = Conversation("t", graph=g, context=APPROVER).recover()
    assert out.status == "answered" and len(executed_refunds(store)) == 1
    assert [d.id for d in store.list_decisions(r.pending.task_id)] == ["dc_claimed"]


def test_cleanly_pending_thread_is_left_alone_by_recover(isolated_home):
    g, store = approver_desk(isolated_home)
    Conversation("t", graph=g).send(BIG)
    assert Conversation("t", graph=g, context=APPROVER).recover() is None
    assert Conversation("t", graph=g).pending() is not None and executed_refunds(store) == []


def test_random_sigkill_runs_keep_invariants(tmp_path):
    """A few runs of bench/crash_approval.py (the note reports 50): zero duplicates, zero lost approvals."""
    out = subprocess.run([sys.executable, "bench/crash_approval.py", "--runs", "6", "--seed", "11"], cwd=REPO,
                         capture_output=True, text=True, timeout=600)
    summary = [ln for ln in out.stdout.splitlines() if ln.startswith("SUMMARY")]
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert summary and '"duplicate_refunds": 0' in summary[0] and '"lost_approvals": 0' in summary[0]
