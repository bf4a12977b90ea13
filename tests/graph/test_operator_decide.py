"""An operator can decide a refund no conversation waits on (the demo bank's ``rf_5001`` has no approval task, and
``switchboard tasks`` offers more than ``tasks close`` for it).

``tasks approve/reject ID`` keep the money path's guarantees: the house rules' approval tier, the approver checks of a
resume, one decision per task, one payment per task (idempotency key).
"""

from __future__ import annotations

from checkpoints.business import open_store
from graph.app.operator_cli import threadless_execution_key, threadless_task_id
from graph.contracts.context import RunContext
from graph.conversation import Conversation
from nodes.testing.ledger import approve_refund
from tests.conftest import invoke_cli


def _said(result) -> str:
    """What a command printed, or the one-line error it raised (``graph.app.cli.main`` prints it and exits 2)."""
    return result.output + str(result.exception or "")


def _paid(store, refund_id: str) -> list:
    return [t for t in store.list_transactions("c_ada", limit=100) + store.list_transactions("c_bob", limit=100)
            if t.reference == refund_id and t.kind == "transfer_in"]


def test_the_demo_refund_is_listed_with_how_to_decide_it_and_an_approver_pays_it_once(home):
    store = open_store(home / "business.db")
    listed = invoke_cli("tasks", "--as", "agt")
    assert "rf_5001" in listed.output and "tasks approve ID" in listed.output, listed.output
    refused = invoke_cli("tasks", "approve", "rf_5001", "--as", "agt")  # an agent may read, not decide
    assert refused.exit_code != 0 and store.load_refund("rf_5001").status == "requested"
    done = invoke_cli("tasks", "approve", "rf_5001", "--as", "ann", "--note", "receipt checked")
    assert done.exit_code == 0 and "paid refund rf_5001 of £59.99" in done.output, done.output
    assert store.load_refund("rf_5001").status == "executed" and len(_paid(store, "rf_5001")) == 1
    task = store.get_task(threadless_task_id("rf_5001"))
    assert task.status == "completed" and task.refund_id == "rf_5001"
    assert [(d.approver, d.decision, d.final) for d in store.list_decisions(task.id)] == \
        [("operator:ann", "approve", True)]
    again = invoke_cli("tasks", "approve", "rf_5001", "--as", "ben")
    assert again.exit_code != 0 and "nothing to decide" in _said(again) and len(_paid(store, "rf_5001")) == 1
    assert "rf_5001" not in invoke_cli("tasks", "--as", "agt").output
    assert sorted(e.outcome for e in store.audit_entries(action="tasks approve")) == ["allowed", "denied"]


def test_reject_pays_nothing_and_the_customer_may_not_decide_their_own_refund(home):
    store = open_store(home / "business.db")
    store.add_operator("ada_op", "t_demo", ["approver"], customer_id="c_ada")
    own = invoke_cli("tasks", "approve", "rf_5001", "--as", "ada_op")
    assert own.exit_code != 0 and "customer" in _said(own) and store.load_refund("rf_5001").status == "requested"
    rejected = invoke_cli("tasks", "reject", "rf_5001", "--as", "ann")
    assert rejected.exit_code == 0 and "nothing paid" in rejected.output, rejected.output
    assert store.load_refund("rf_5001").status == "rejected" and _paid(store, "rf_5001") == []


def test_a_refund_paused_on_a_thread_is_decided_by_resume_not_by_tasks(home):
    store = open_store(home / "business.db")
    task = next(t for t in store.list_tasks(("awaiting_approval",)) if t.thread_id == "p")
    refused = invoke_cli("tasks", "approve", task.id, "--as", "ann")
    assert refused.exit_code != 0 and "resume p --approve" in _said(refused), _said(refused)
    assert store.load_refund(task.refund_id).status == "requested"


def test_the_higher_tier_needs_two_different_approvers(home):
    store = open_store(home / "business.db")
    rf = store.request_refund("c_bob", "tx_2001", 620, "GBP", "customer request", None)  # Bob is unverified: 2
    first = invoke_cli("tasks", "approve", rf.id, "--as", "ann")
    assert first.exit_code == 0 and "waits for 1 more approver" in first.output, first.output
    assert store.load_refund(rf.id).status == "requested" and _paid(store, rf.id) == []
    twice = invoke_cli("tasks", "approve", rf.id, "--as", "ann")
    assert twice.exit_code != 0 and _paid(store, rf.id) == []
    second = invoke_cli("tasks", "approve", rf.id, "--as", "ben")
    assert second.exit_code == 0 and "paid refund" in second.output and len(_paid(store, rf.id)) == 1


def test_an_approval_cut_short_before_the_payment_is_paid_once_on_a_repeat(home):
    store = open_store(home / "business.db")
    task_id = threadless_task_id("rf_5001")
    store.create_task(task_id, "", "human_approval", refund_id="rf_5001")
    store.update_task(task_id, 1, status="awaiting_approval")
    store.decide_approval(task_id, "dc_cut", "operator:ann", "approve", refund_id="rf_5001")  # then the process died
    assert store.load_refund("rf_5001").status == "approved" and _paid(store, "rf_5001") == []
    done = invoke_cli("tasks", "approve", "rf_5001", "--as", "ben")
    assert done.exit_code == 0 and len(_paid(store, "rf_5001")) == 1, done.output
    assert store.side_effect_result(threadless_execution_key(task_id)) is not None
    assert invoke_cli("tasks", "approve", "rf_5001", "--as", "ben").exit_code != 0 and len(_paid(store, "rf_5001")) == 1


# -- a refund a conversation holds -----------------------------------------------------------------------------------


def _paused(store):
    """The task and refund thread "p" of the ``home`` fixture is paused on."""
    task = next(t for t in store.list_tasks(("awaiting_approval",)) if t.thread_id == "p")
    return task, store.load_refund(task.refund_id)


def test_a_refund_paused_on_a_thread_named_by_its_refund_id_is_refused_too(home):
    """``tasks approve|reject rf_…`` (the refund id, not the task's) on a refund that thread "p" waits on is refused
    with a pointer to ``resume p``: nothing is paid or decided, no second task is opened, and the thread's own
    approval then pays the refund."""
    store = open_store(home / "business.db")
    task, refund = _paused(store)
    for verb in ("approve", "reject"):
        refused = invoke_cli("tasks", verb, refund.id, "--as", "ann")
        assert refused.exit_code != 0 and f"resume p --{verb} --as ann" in _said(refused), _said(refused)
        assert "\n" not in str(refused.exception).strip()
    assert store.load_refund(refund.id).status == "requested" and _paid(store, refund.id) == []
    assert [t.id for t in store.tasks_of_refund(refund.id)] == [task.id]  # no second task was opened
    assert store.list_decisions(task.id) == []
    done = invoke_cli("resume", "p", "--approve", "--as", "ben")
    assert done.exit_code == 0 and "paid back" in done.output, done.output
    assert len(_paid(store, refund.id)) == 1 and store.get_task(task.id).status == "completed"


def test_resume_after_a_payment_outside_the_conversation_reports_it_paid_not_a_payment_failure(home):
    store = open_store(home / "business.db")
    task, refund = _paused(store)
    approve_refund(store, refund.id, ("operator:zed",), task_id="task-elsewhere")  # decided and paid elsewhere
    store.execute_refund(refund.id, "refund-exec:elsewhere")  # paid under another key while the thread waited
    r = invoke_cli("resume", "p", "--approve", "--as", "ben")
    said = _said(r)
    assert r.exit_code == 0 and "paid back" in said and "payment failed" not in said and "fallback" not in said, said
    assert "already paid" in said, said  # the operator's line (stderr)
    assert len(_paid(store, refund.id)) == 1 and store.get_task(task.id).status == "completed"
    assert "p" not in invoke_cli("pending", "--as", "ann").output.split()


def test_closing_the_task_of_a_paid_refund_never_says_nothing_was_paid(home):
    store = open_store(home / "business.db")
    task, refund = _paused(store)
    approve_refund(store, refund.id, ("operator:zed",), task_id="task-elsewhere")
    store.execute_refund(refund.id, "refund-exec:elsewhere")
    closed = invoke_cli("tasks", "close", task.id, "--as", "ann")
    said = _said(closed)
    assert closed.exit_code == 0 and "already paid" in said and "nothing paid" not in said, said
    assert store.load_refund(refund.id).status == "executed" and store.get_task(task.id).status == "completed"
    assert [d.decision for d in store.list_decisions(task.id)] == []  # no "close" decision over a paid refund
    from tests.conftest import approver_desk
    told = Conversation("p", graph=approver_desk(home)[0]).state["messages"][-1].content
    assert "paid back" in told and "Nothing was paid" not in told, told
    again = invoke_cli("tasks", "close", task.id, "--as", "ann")
    assert again.exit_code != 0 and "already paid" in _said(again) and "nothing to close" in _said(again)
    orphan = store.request_refund("c_ada", "tx_1003", 100, "GBP", "customer request", None)
    approve_refund(store, orphan.id, ("operator:zed",))
    store.execute_refund(orphan.id, "refund-exec:elsewhere2")
    no_task = invoke_cli("tasks", "close", orphan.id, "--as", "ann")
    assert no_task.exit_code != 0 and "already paid" in _said(no_task), _said(no_task)


def test_an_approval_on_another_task_of_the_refund_counts_for_four_eyes(home):
    """Four eyes hold per refund: ann's approval on another task of a two-approver refund counts, so her
    ``resume --approve`` on the thread is refused ("already approved refund") and nothing is paid."""
    from tests.conftest import approver_desk
    store = open_store(home / "business.db")
    g = approver_desk(home)[0]
    Conversation("b", graph=g, context=RunContext(user_id="c_bob")).send("Please refund tx_2001")
    task = next(t for t in store.list_tasks(("awaiting_approval",)) if t.thread_id == "b")
    other = store.create_task(threadless_task_id(task.refund_id), "", "human_approval", refund_id=task.refund_id)
    store.update_task(other.id, other.version, status="awaiting_approval")
    store.decide_approval(other.id, "dc_old", "operator:ann", "approve", refund_id=task.refund_id, required_approvals=2)
    twice = invoke_cli("resume", "b", "--approve", "--as", "ann")
    assert twice.exit_code != 0 and "already approved refund" in _said(twice), _said(twice)
    assert store.list_decisions(task.id) == [] and _paid(store, task.refund_id) == []
