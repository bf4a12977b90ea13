"""The approval interrupt in LangChain's human-in-the-loop shape, through ``graph.invoke``: the payload is a valid
``HITLRequest`` (checked against the installed langchain's own types) beside our keys; a resume in the HITL decision
shape is taken with the same authority, four-eyes and idempotency rules as ``{"decision": …}``; a decision type the
request does not offer is refused with one line and the thread unchanged."""

from __future__ import annotations

import pytest
from langchain.agents.middleware.human_in_the_loop import HITLRequest, HITLResponse
from langgraph.types import Command
from pydantic import TypeAdapter

from graph.contracts.approval import HITL_DECISIONS, from_hitl, interrupt_payload, parse_decision
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, InputError
from graph.contracts.views import customer_request
from graph.conversation import Conversation
from nodes.approval_flow import canonical_resume, decision_key
from tests.conftest import ANN, BIG, approver_desk, executed_refunds

BEN = RunContext.for_operator("ben", "t_demo")
ADA = RunContext()
BOB = RunContext(user_id="c_bob")
BOB_REFUND = "Please refund tx_2001, I never got my sandwich"  # identity not verified: two approvers
APPROVE = {"decisions": [{"type": "approve"}]}


def _cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def _paused(g, thread: str, text: str = BIG, ctx: RunContext = ADA) -> dict:
    out = g.invoke({"messages": [{"role": "user", "content": text}]}, _cfg(thread), context=ctx)
    [intr] = out["__interrupt__"]
    return intr.value


def _checkpoint(g, thread: str) -> str:
    return g.get_state(_cfg(thread)).config["configurable"]["checkpoint_id"]


def test_the_interrupt_is_a_hitl_request_and_keeps_our_keys(isolated_home):
    g, _store = approver_desk(isolated_home)
    value = _paused(g, "h1")
    TypeAdapter(HITLRequest).validate_python(value)  # the installed langchain's own type accepts it
    [action] = value["action_requests"]
    assert action["name"] == "refund"
    assert action["args"] == {"refund_id": value["refund_id"], "transaction_id": "tx_1001", "amount": "£23.80",
                              "amount_minor": 2380, "currency": "GBP", "reason": value["reason"]}
    assert "1 approver(s) required, 0 so far" in action["description"] and "tx_1001" in action["description"]
    assert value["review_configs"] == [{"action_name": "refund", "allowed_decisions": ["approve", "reject"]}]
    # the existing payload keys are all still there for existing clients
    assert {"kind", "task_id", "thread_id", "customer_id", "refund_id", "amount_minor", "currency", "risk_flags",
            "approvals_required", "approvals", "deadline"} <= set(value)
    assert value["kind"] == "refund_approval" and value["approvals"] == []
    # built from the typed request the state keeps (PendingApproval.request), the same as from its JSON form
    pa = g.get_state(_cfg("h1")).values["pending_approval"]
    assert pa.waiting and interrupt_payload(pa.request, []) == value
    assert interrupt_payload(pa.request.model_dump(mode="json"), []) == value
    # a customer's view of the interrupt never carries the action (its description names the risk and the customer)
    assert "action_requests" not in customer_request(value) and "review_configs" not in customer_request(value)


def test_a_hitl_approve_pays_once_as_the_runs_principal(isolated_home):
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h2")
    TypeAdapter(HITLResponse).validate_python(APPROVE)  # what we accept is what langchain's UIs send
    out = g.invoke(Command(resume=APPROVE), _cfg("h2"), context=ANN)
    assert "__interrupt__" not in out and "paid back" in out["outcome"].text
    assert [(d.approver, d.decision) for d in store.list_decisions(value["task_id"])] == [("operator:ann", "approve")]
    assert len(executed_refunds(store)) == 1
    # a second click in either shape: one line, nothing paid twice
    for again in (APPROVE, {"decision": "approve"}):
        with pytest.raises(InputError, match="already decided: approve by operator:ann"):
            g.invoke(Command(resume=again), _cfg("h2"), context=BEN)
    assert len(executed_refunds(store)) == 1


def test_a_hitl_reject_message_is_the_internal_note(isolated_home):
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h3")
    note = "internal: receipt looks edited"
    out = Conversation("h3", graph=g, context=ANN).resume({"decisions": [{"type": "reject", "message": note}]})
    assert out.agent == "refunds" and "not approved" in out.text and "edited" not in out.text
    assert [(d.decision, d.note) for d in store.list_decisions(value["task_id"])] == [("reject", note)]
    assert executed_refunds(store) == []


def test_four_eyes_in_the_hitl_shape_and_mixed_with_ours(isolated_home):
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h4", BOB_REFUND, BOB)
    assert value["approvals_required"] == 2
    out = g.invoke(Command(resume=APPROVE), _cfg("h4"), context=ANN)
    [again] = out["__interrupt__"]  # the first approval is recorded; the thread waits for a second approver
    assert again.value["approvals"] == ["operator:ann"]
    assert "2 approver(s) required, 1 so far" in again.value["action_requests"][0]["description"]
    before = _checkpoint(g, "h4")
    with pytest.raises(AccessDenied, match="already approved"):  # the same approver twice, in the other shape too
        g.invoke(Command(resume={"decision": "approve"}), _cfg("h4"), context=ANN)
    with pytest.raises(AccessDenied):
        g.invoke(Command(resume=APPROVE), _cfg("h4"), context=ANN)
    assert _checkpoint(g, "h4") == before
    done = g.invoke(Command(resume={"decision": "approve"}), _cfg("h4"), context=BEN)
    assert "paid back" in done["outcome"].text
    assert [(d.approver, d.decision) for d in store.list_decisions(value["task_id"]) if d.decision == "approve"] == \
        [("operator:ann", "approve"), ("operator:ben", "approve")]
    assert len([r for r in store.list_refunds("c_bob") if r.status == "executed"]) == 1


def test_the_customer_may_not_approve_in_the_hitl_shape(isolated_home):
    g, store = approver_desk(isolated_home)
    _paused(g, "h5")
    before = _checkpoint(g, "h5")
    with pytest.raises(AccessDenied):
        g.invoke(Command(resume=APPROVE), _cfg("h5"), context=ADA)
    assert _checkpoint(g, "h5") == before and executed_refunds(store) == []


@pytest.mark.parametrize("resume, says", [
    ({"decisions": [{"type": "edit", "edited_action": {"name": "refund", "args": {"amount_minor": 1}}}]},
     "'edit' is not offered for a refund approval; allowed: approve, reject"),
    ({"decisions": [{"type": "respond", "message": "paid"}]}, "'respond' is not offered"),
    ({"decisions": [{"type": "accept"}]}, "'accept' is not offered"),
    ({"decisions": [{"type": "approve"}, {"type": "approve"}]}, "one decision expected (one refund action), got 2"),
    ({"decisions": []}, "one decision expected (one refund action), got 0"),
    ({"decisions": [{"type": "approve", "message": "ok"}]}, "approve takes no message"),
    ({"decisions": [{"type": "approve"}], "decision": "approve"}, "holds only decisions, not decision"),
    ({"decisions": ["approve"]}, "decisions.0: a mapping expected, not str"),
    ({"decisions": [{"type": "reject", "message": "bad\x1b[2J"}]}, "control character"),
])
def test_a_decision_type_we_do_not_offer_is_refused_one_line_thread_unchanged(isolated_home, resume, says):
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h6")
    before = _checkpoint(g, "h6")
    with pytest.raises(InputError) as err:
        g.invoke(Command(resume=resume), _cfg("h6"), context=ANN)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert _checkpoint(g, "h6") == before and store.list_decisions(value["task_id"]) == []
    assert executed_refunds(store) == []
    # the thread still waits for the right decision
    assert "paid back" in g.invoke(Command(resume=APPROVE), _cfg("h6"), context=ANN)["outcome"].text


def test_both_shapes_of_one_decision_are_one_decision():
    assert parse_decision(APPROVE) == parse_decision({"decision": "approve"})
    assert from_hitl({"decisions": [{"type": "reject", "message": "no"}]}) == {"decision": "reject", "note": "no"}
    assert decision_key(canonical_resume(APPROVE), "tk", 0, "p") == decision_key({"decision": "approve"}, "tk", 0, "p")
    assert set(HITL_DECISIONS) == {"approve", "reject"}
    request = {"refund_id": "rf_1", "transaction_id": "tx_1", "amount": "£1.00", "customer_id": "c_x",
               "approvals_required": 1}
    assert interrupt_payload(request, [])["action_requests"][0]["args"] == {"refund_id": "rf_1", "transaction_id": "tx_1",
                                                                            "amount": "£1.00"}


@pytest.mark.parametrize("resume, says", [
    ({"decisions": [{"type": "APPROVE"}]}, "'APPROVE' is not offered"),
    ({"decisions": [{"type": "approve "}]}, "'approve ' is not offered"),
    ({"decisions": [{"type": " Approve"}]}, "' Approve' is not offered"),
    ({"decisions": [{"type": ["approve"]}]}, "['approve'] is not offered"),
    ({"decisions": [{"type": {"approve": True}}]}, "is not offered"),
    ({"decisions": [{}]}, "None is not offered"),
    ({"decisions": {"0": {"type": "approve"}}}, "one decision expected (one refund action), got dict"),
    ({"decisions": "approve"}, "one decision expected (one refund action), got str"),
    ({"decisions": None}, "got NoneType"),
    ({"decisions": [{"type": "approve", "args": {"amount_minor": 1}}]}, "approve takes no args"),
    ({"decisions": [{"type": "approve", "approver": "ben"}]}, "approve takes no approver"),
    ({"decisions": [{"type": "approve", "decision_id": "dc_mine"}]}, "approve takes no decision_id"),
    ({"decisions": [{"type": "reject", "message": "x" * 2001}]}, "the limit is 2000"),
    ({"decisions": [{"type": "reject", "message": {"text": "nested"}}]}, "the note must be text, not dict"),
    ({"decisions": [{"type": "reject", "message": 42}]}, "the note must be text, not int"),
    pytest.param({"decisions": [{"type": "reject", "message": "ok \u202eevil"}]}, "U+202E", marks=pytest.mark.xfail(
        strict=True, reason="graph.contracts.inputs.check_message refuses C0/C1 controls but not Unicode bidi overrides "
        "(U+202A-202E, U+2066-2069): a note shown to operators in pending/history can reorder what they read; the "
        "rule is shared with every customer message, so changing it is a desk-wide input decision")),
    ({"decisions": [{"type": "approve"}], "config": {"approver": "ben"}}, "holds only decisions, not config"),
])
def test_a_careless_or_hostile_hitl_resume_is_refused_one_line_thread_unchanged(isolated_home, resume, says):
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h7")
    before = _checkpoint(g, "h7")
    with pytest.raises(InputError) as err:
        g.invoke(Command(resume=resume), _cfg("h7"), context=ANN)
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert _checkpoint(g, "h7") == before and store.list_decisions(value["task_id"]) == []
    assert executed_refunds(store) == []


def test_the_same_approver_twice_through_both_shapes_and_a_fresh_decision_id_is_one_approval(isolated_home):
    """Four-eyes: ann's HITL approval, then ann again as ``{"decision": …}`` with a fresh ``decision_id`` (a new
    idempotency key, so no replay hides it) and naming herself as approver: refused every time, nothing paid."""
    g, store = approver_desk(isolated_home)
    value = _paused(g, "h8", BOB_REFUND, BOB)
    g.invoke(Command(resume=APPROVE), _cfg("h8"), context=ANN)
    before = _checkpoint(g, "h8")
    for again in ({"decision": "approve", "decision_id": "dc_fresh_1"},
                  {"decision": "approve", "decision_id": "dc_fresh_2", "approver": "ann"},
                  {"decision": "approve", "approver": "operator:ann"}):
        with pytest.raises(AccessDenied, match="already approved"):
            g.invoke(Command(resume=again), _cfg("h8"), context=ANN)
    # ann may not borrow ben's name either
    with pytest.raises(AccessDenied, match="the approver is the caller"):
        g.invoke(Command(resume={"decision": "approve", "approver": "ben"}), _cfg("h8"), context=ANN)
    assert _checkpoint(g, "h8") == before
    assert [d.approver for d in store.list_decisions(value["task_id"]) if d.decision == "approve"] == ["operator:ann"]
    assert [r for r in store.list_refunds("c_bob") if r.status == "executed"] == []


def test_an_operator_who_is_the_refunds_customer_may_not_approve_it_in_either_shape(isolated_home):
    g, store = approver_desk(isolated_home)
    store.add_operator("bobby", "t_demo", ["approver"], customer_id="c_bob")
    value = _paused(g, "h9", BOB_REFUND, BOB)
    bobby = RunContext.for_operator("bobby", "t_demo")
    for resume in (APPROVE, {"decision": "approve"}, {"decisions": [{"type": "reject", "message": "mine"}]}):
        with pytest.raises(AccessDenied, match="is the refund's customer"):
            g.invoke(Command(resume=resume), _cfg("h9"), context=bobby)
    assert store.list_decisions(value["task_id"]) == []


def test_a_replay_in_the_other_shape_after_payment_pays_nothing_more(isolated_home):
    """ann approves in our shape and it is paid; the same approval replayed as HITL by ann, and by ben: one payment."""
    g, store = approver_desk(isolated_home)
    _paused(g, "h10")
    g.invoke(Command(resume={"decision": "approve"}), _cfg("h10"), context=ANN)
    for ctx in (ANN, BEN):
        with pytest.raises(InputError, match="already decided"):
            g.invoke(Command(resume=APPROVE), _cfg("h10"), context=ctx)
    assert len(executed_refunds(store)) == 1
