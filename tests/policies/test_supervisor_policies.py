"""Unit tests of supervisor mode's pure policies: compound detection, the merge function, expert-call planning,
expert tool-call arbitration, the multi-handoff rule and the edge table."""

from __future__ import annotations

import itertools

import pytest

from graph.contracts.state_values import TaskState
from nodes.embedded import compound
from nodes.testing.state import packet
from policies import experts, handoff, merge
from policies.edges import (
    DEFAULT_EDGE_TABLE,
    END,
    EXPERT_NODE,
    EXPERTS,
    FALLBACK,
    MERGE_NODE,
    SUPERVISOR,
    TRIAGE,
    handoff_targets,
    is_legal_handoff,
    longest_legal_path,
)
from policies.handoff import ToolCallView


# ---------------------------------------------------------------- edge table
def test_supervisor_edges():
    assert is_legal_handoff(TRIAGE, SUPERVISOR)
    assert handoff_targets(SUPERVISOR) == ()  # the supervisor never hands control on
    for s in EXPERTS:
        assert not is_legal_handoff(s, SUPERVISOR)
    edges = DEFAULT_EDGE_TABLE.edges()
    for e in [(SUPERVISOR, EXPERT_NODE), (EXPERT_NODE, MERGE_NODE), (MERGE_NODE, END), (MERGE_NODE, FALLBACK),
              (SUPERVISOR, FALLBACK), (SUPERVISOR, END)]:
        assert e in edges
    assert (EXPERT_NODE, END) not in edges and (EXPERT_NODE, FALLBACK) not in edges
    assert SUPERVISOR not in DEFAULT_EDGE_TABLE.entry
    assert longest_legal_path() == longest_legal_path(start=TRIAGE)  # the budget is unchanged by the new edge


# ---------------------------------------------------------------- compound detection
@pytest.mark.parametrize("text,parts", [
    ("Why was I charged twice, and when will my refund arrive?", ["Why was I charged twice", "when will my refund arrive?"]),
    ("I lost my card. Also, where is my transfer?", ["I lost my card.", "Also, where is my transfer?"]),
    ("I was charged twice and I'd like the money back for the extra one.",
     ["I was charged twice and I'd like the money back for the extra one."]),
    ("my card is blocked and can you also check my refund", ["my card is blocked", "can you also check my refund"]),
    ("   ", []),
    ("?! ...", []),
    # fragments of fewer than MIN_SEGMENT_WORDS words join their neighbour
    ("There is a fee on my account. Why?", ["There is a fee on my account. Why?"]),
    ("Hi. I lost my card. Thanks!", ["Hi. I lost my card. Thanks!"]),
    ("Thanks. When will the money be back on my account?", ["Thanks. When will the money be back on my account?"]),
    ("Hi! Why?", ["Hi! Why?"]),
])
def test_split_requests(text, parts):
    assert compound.split_requests(text) == parts


def test_detect_compound_needs_two_experts_above_threshold():
    two = compound.detect_compound([{"billing": 0.9, "refunds": 0.05}, {"refunds": 0.7, "billing": 0.2}])
    assert two.compound and two.experts == ("billing", "refunds")
    assert two.segment_experts == (("billing",), ("refunds",))
    assert two.objectives(["a", "b"]) == {"billing": "a", "refunds": "b"}
    assert "billing 0.90" in two.reason and "refunds 0.70" in two.reason
    # the same expert twice is one intent
    same = compound.detect_compound([{"billing": 0.9}, {"billing": 0.8}])
    assert not same.compound and same.experts == ("billing",)
    assert same.objectives(["a", "b"]) == {"billing": "a b"}
    # below the threshold does not count; non-experts never count
    weak = compound.detect_compound([{"billing": 0.9}, {"refunds": compound.COMPOUND_THRESHOLD - 0.01}])
    assert not weak.compound
    other = compound.detect_compound([{"billing": 0.9}, {"other": 0.99}, {"clarify": 0.99}])
    assert not other.compound
    # one segment is one intent: two close experts for the same segment are ambiguity, not two requests
    one_seg = compound.detect_compound([{"refunds": 0.46, "billing": 0.45, "policy": 0.09}], threshold=0.4)
    assert not one_seg.compound and one_seg.experts == ("refunds",)
    tie = compound.detect_compound([{"cards": 0.45, "billing": 0.45}, {"refunds": 0.9}], threshold=0.4)
    assert tie.compound and tie.segment_experts == (("billing",), ("refunds",))  # tie broken by name
    with pytest.raises(ValueError):
        compound.detect_compound([{"billing": 1.0}], threshold=0)
    with pytest.raises(ValueError):
        two.objectives(["only one"])


# ---------------------------------------------------------------- merge
def _task(tid, expert, objective="q"):
    return {"task_id": tid, "expert": expert, "objective": objective}


def _result(tid, expert, status="ok", answer=None, facts=(), questions=(), error=None, actions=(), refs=()):
    return {"task_id": tid, "expert": expert, "status": status, "answer": answer if answer is not None else f"{expert} answer",
            "facts": [{"key": k, "value": v, "source": s} for k, v, s in facts], "open_questions": list(questions),
            "error": error, "proposed_actions": list(actions), "evidence_refs": list(refs)}


V, U = "system_verified", "user_said"
TASKS = [_task("a", "billing", "why twice"), _task("b", "refunds", "where is my refund")]


def test_merge_combines_in_plan_order_whatever_the_arrival_order():
    ra = _result("a", "billing", facts=[("transaction_id", "tx_1008", V), ("amount", "4.50 GBP", V)],
                 questions=["Which card?"], refs=["tx_1008"])
    rb = _result("b", "refunds", facts=[("transaction_id", "tx_1005", V), ("refund_id", "rf_1", V)],
                 questions=["which card?", "Anything else?"], refs=["rf_1", "tx_1005"])
    one = merge.merge_expert_results(TASKS, [ra, rb])
    other = merge.merge_expert_results(TASKS, [rb, ra])
    assert one == other
    assert one.status == "complete" and not one.gaps and not one.conflicts
    assert [p.answer for p in one.parts] == ["billing answer", "refunds answer"]
    # two different transactions are not a conflict: both kept, attributed
    tx = {(f.value, f.experts) for f in one.facts if f.key == "transaction_id"}
    assert tx == {("tx_1008", ("billing",)), ("tx_1005", ("refunds",))}
    assert one.open_questions == ("Which card?", "Anything else?")  # case-insensitive union
    assert one.evidence_refs == ("rf_1", "tx_1005", "tx_1008")


def test_system_verified_wins_over_user_said():
    ra = _result("a", "billing", facts=[("amount", "4.50 GBP", V)])
    rb = _result("b", "refunds", facts=[("amount", "5.00 GBP", U)])
    out = merge.merge_expert_results(TASKS, [ra, rb])
    amounts = [(f.value, f.source) for f in out.facts if f.key == "amount"]
    assert amounts == [("4.50 GBP", V)]
    (c,) = out.conflicts
    assert c.resolved_to == "4.50 GBP" and c.rule == "system_verified over user_said" and not c.question


def test_identical_facts_merge_and_keep_every_expert():
    ra = _result("a", "billing", facts=[("merchant", "Blue Bottle", U)])
    rb = _result("b", "refunds", facts=[("merchant", "Blue Bottle", V)])
    out = merge.merge_expert_results(TASKS, [ra, rb])
    (f,) = out.facts
    assert f.source == V and f.experts == ("billing", "refunds")


def test_must_agree_unresolved_conflict_asserts_nothing_and_asks():
    ra = _result("a", "billing", facts=[("transaction_id", "tx_1008", V), ("amount", "4.50 GBP", V)])
    rb = _result("b", "refunds", facts=[("transaction_id", "tx_1008", V), ("amount", "4.60 GBP", V)])
    out = merge.merge_expert_results(TASKS, [ra, rb])
    assert not [f for f in out.facts if f.key == "amount"]
    (c,) = out.conflicts
    assert c.resolved_to is None and c.subject == "tx_1008" and "unresolved" in c.rule
    assert set(c.values) == {("billing", "4.50 GBP", V), ("refunds", "4.60 GBP", V)}
    assert c.question in out.open_questions and "4.50 GBP" in c.question and "4.60 GBP" in c.question
    # a key that need not agree is kept side by side
    rules = merge.MergeRules(must_agree=frozenset())
    out2 = merge.merge_expert_results(TASKS, [ra, rb], rules)
    assert {f.value for f in out2.facts if f.key == "amount"} == {"4.50 GBP", "4.60 GBP"} and not out2.conflicts


def test_failures_continue_or_fail():
    ok = _result("a", "billing")
    bad = _result("b", "refunds", status="failed", error="RuntimeError: boom")
    cont = merge.merge_expert_results(TASKS, [ok, bad])
    assert cont.status == "partial" and [p.status for p in cont.parts] == ["ok", "failed"]
    (g,) = cont.gaps
    assert (g.expert, g.objective, g.status, g.reason) == ("refunds", "where is my refund", "failed", "RuntimeError: boom")
    fail = merge.merge_expert_results(TASKS, [ok, bad], merge.MergeRules(on_failure="fail"))
    assert fail.status == "failed" and "refunds failed" in fail.reason
    # a missing result is a gap too; results for other tasks or the wrong expert are ignored
    missing = merge.merge_expert_results(TASKS, [ok, _result("zz", "refunds"), _result("b", "cards")])
    assert [g.status for g in missing.gaps] == ["missing"] and set(missing.ignored) == {"zz", "b"}
    # nothing answered: failed whatever the setting
    none = merge.merge_expert_results(TASKS, [bad, _result("a", "billing", status="timeout", error="no result within 1 s")])
    assert none.status == "failed" and "no expert returned a result" in none.reason
    with pytest.raises(ValueError):
        merge.MergeRules(on_failure="ignore")  # type: ignore[arg-type]


def test_proposed_actions_union():
    act = {"tool": "request_refund", "args": {"transaction_id": "tx_1008"}}
    out = merge.merge_expert_results(TASKS, [_result("a", "billing", actions=[act]), _result("b", "refunds", actions=[act])])
    assert out.proposed_actions == ({**act, "expert": "billing"},)


def test_merge_is_order_independent_over_permutations():
    tasks = [*TASKS, _task("c", "cards")]
    results = [_result("a", "billing", facts=[("amount", "1.00 GBP", U), ("transaction_id", "tx_1", V)]),
               _result("b", "refunds", facts=[("amount", "2.00 GBP", V), ("transaction_id", "tx_1", V)]),
               _result("c", "cards", status="timeout", error="slow")]
    outs = {merge.merge_expert_results(tasks, list(p)) for p in itertools.permutations(results)}
    assert len(outs) == 1
    (out,) = outs
    assert out.status == "partial" and [f.value for f in out.facts if f.key == "amount"] == ["2.00 GBP"]



# ---------------------------------------------------------------- expert-call planning and expert calls
_V_COUNTER = itertools.count(1)


def _v(name, args=None, valid=True):
    return ToolCallView(id=f"c{next(_V_COUNTER)}", name=name, args=args or {}, valid=valid, error=None if valid else "bad json")


def test_plan_expert_calls_rules():
    calls = [_v("expert_billing", {"objective": "why twice"}), _v("expert_refunds"), _v("expert_billing"),
             _v("transfer_to_cards"), _v("expert_nobody"), _v("expert_cards", valid=False), _v("expert_policy")]
    plan = experts.plan_expert_calls(calls, EXPERTS, max_experts=2, default_objective="whole request")
    assert [(o.expert, o.objective) for o in plan.calls] == [("billing", "why twice"), ("refunds", "whole request")]
    msgs = [o.message for o in plan.refused]
    assert "already called" in msgs[0] and "does not hand off" in msgs[1] and "unknown tool" in msgs[2]
    assert "not valid JSON" in msgs[3] and "at most 2 experts" in msgs[4]
    assert len(plan.outcomes) == len(calls)
    assert not experts.plan_expert_calls([_v("expert_cards")], ("billing",), 3, "x").calls  # unavailable expert


def test_expert_never_hands_off_and_never_changes_state():
    calls = [_v("refund_status"), _v("request_refund", {"transaction_id": "tx_1"}), _v("transfer_to_billing"),
             _v("freeze_card"), _v("rm_rf"), _v("refund_status", valid=False)]
    out = experts.arbitrate_expert_tools("refunds", calls, {"refund_status", "request_refund"}, {"request_refund"})
    assert [o.action for o in out] == ["execute", "proposed", "refused", "refused", "refused", "refused"]
    assert "cannot hand off" in out[2].message and "proposed action" in out[1].message
    assert experts.expert_of_tool("expert_billing") == "billing" and experts.expert_of_tool("transfer_to_x") is None


# ---------------------------------------------------------------- several handoffs in one message
def _packet_for(target, call):
    return packet(to_agent=target, reason=call.args.get("reason") or "")


def _two_handoffs():
    return [ToolCallView("h1", "transfer_to_billing", {"reason": "charge"}),
            ToolCallView("h2", "transfer_to_refunds", {"reason": "refund"}),
            ToolCallView("h3", "transfer_to_billing", {"reason": "again"}),
            ToolCallView("h4", "transfer_to_clarify", {"reason": "?"})]


def test_multi_handoff_first_rule_picks_one_and_says_why():
    arb = handoff.arbitrate(TRIAGE, _two_handoffs(), frozenset(), _packet_for, None)
    assert arb.winner.target == "billing" and not arb.fanout
    assert all("only one handoff per message" in o.message for o in arb.outcomes[1:])


def test_multi_handoff_supervisor_rule_turns_the_set_into_a_fanout():
    seen = []

    def packet_for(target, call):
        seen.append((target, call.args.get("reason")))
        return _packet_for(target, call)

    arb = handoff.arbitrate(TRIAGE, _two_handoffs(), frozenset(), packet_for, None, multi_handoff="supervisor")
    assert arb.winner is None
    assert [(o.call_id, o.target) for o in arb.fanout] == [("h1", "billing"), ("h2", "refunds")]
    assert all("supervisor fan-out" in o.message for o in arb.outcomes) and len(arb.outcomes) == 4
    assert [o.action for o in arb.outcomes] == ["fanout", "fanout", "skipped", "skipped"]
    assert seen == [(SUPERVISOR, "several handoffs in one message (billing, refunds) become a supervisor fan-out")]


def test_multi_handoff_supervisor_rule_falls_back_to_first_when_it_does_not_apply():
    # from billing (no edge to the supervisor): first legal wins
    calls = [ToolCallView("a", "transfer_to_refunds", {"facts": {"transaction_id": "tx"}}),
             ToolCallView("b", "transfer_to_cards")]
    arb = handoff.arbitrate("billing", calls, frozenset(), _packet_for, None, multi_handoff="supervisor")
    assert not arb.fanout and arb.winner is not None
    # one expert only
    one = handoff.arbitrate(TRIAGE, [ToolCallView("a", "transfer_to_cards"), ToolCallView("b", "transfer_to_clarify")],
                            frozenset(), _packet_for, None, multi_handoff="supervisor")
    assert not one.fanout and one.winner.target == "cards"
    # the task guard of the supervisor edge fails: ordinary rule
    owned = handoff.arbitrate(TRIAGE, _two_handoffs(), frozenset(), _packet_for, TaskState(status="open", current_owner="cards"),
                              multi_handoff="supervisor")
    assert not owned.fanout
    with pytest.raises(ValueError):
        handoff.arbitrate(TRIAGE, [], frozenset(), _packet_for, None, multi_handoff="random")


@pytest.mark.parametrize("segments,expected", [
    (["I just moved some money to my savings.", "Why was I charged a fee?"], [False, True]),
    (["My card was declined at the shop.", "Also, where is my refund?"], [True, True]),
    (["Can you freeze my card", "I also want to know my balance"], [True, True]),
    (["It was very embarrassing.", "Thanks."], [False, False]),
])
def test_only_segments_that_ask_something_carry_an_intent(segments, expected):
    assert compound.asks_something(segments) == expected
