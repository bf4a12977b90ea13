"""Handoff contracts (``policies/contracts.py``, ``switchboard check``): today's table passes; a deliberate break names
the edge and the fact; unreachable agents, nodes without a controlled exit and unguarded side effects are found; the
runtime's packet asks for a missing fact and records ``packet_incomplete``; the fact supply the check reads is what
the runtime finds."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from graph.app.contract_check import CheckedPolicy, load_policy, run_check, runtime_supply
from graph.contracts.errors import InputError
from policies.contracts import (
    DEFAULT_CONTRACTS,
    AgentContract,
    FactNeed,
    FactSupply,
    Requirement,
    check_contracts,
    unmet_requirements,
)
from policies.edges import DEFAULT_EDGE_TABLE, HANDOFF_EDGES, EdgeTable
from policies.handoff import REFUND_QUESTION
from tests.conftest import invoke_cli

#: A policy file with one deliberate break: a new ``disputes`` agent, reached from billing, that requires a dispute
#: case id a tool verified — and no tool of billing (or anything before it) verifies one.
BROKEN = '''
from policies.contracts import DEFAULT_CONTRACTS, AgentContract, FactNeed, Requirement
from policies.edges import DEFAULT_EDGE_TABLE, HANDOFF_EDGES, EdgeTable

EDGE_TABLE = EdgeTable(
    handoffs={**HANDOFF_EDGES, "billing": HANDOFF_EDGES["billing"] | {"disputes"}, "disputes": frozenset()},
    entry=DEFAULT_EDGE_TABLE.entry,
    extra=DEFAULT_EDGE_TABLE.extra | {("disputes", "fallback")},
    terminal=DEFAULT_EDGE_TABLE.terminal | {"disputes"},
)
CONTRACTS = {**DEFAULT_CONTRACTS, "disputes": AgentContract("disputes", needs=(
    Requirement("the dispute case", ((FactNeed("dispute_case_id", frozenset({"system_verified"})),),),
                "Which dispute case is it?"),))}
'''


def test_todays_table_and_contracts_pass():
    assert run_check(load_policy(None)) == []
    r = invoke_cli("check")
    assert r.exit_code == 0, r.output
    assert r.output.startswith("ok: ")
    out = json.loads(invoke_cli("check", "--json").output)
    assert out["ok"] is True and out["problems"] == [] and out["checked"]["contracts"] == ["account", "cards", "refunds"]


def test_a_packet_that_cannot_carry_the_required_fact_fails_naming_edge_and_fact(tmp_path):
    policy = tmp_path / "disputes.py"
    policy.write_text(BROKEN)
    r = invoke_cli("check", "--policy", str(policy))
    assert r.exit_code == 1, r.output
    assert ("missing_fact: edge billing → disputes: the packet cannot carry the dispute case, which disputes "
            "requires: dispute_case_id (system_verified)") in r.output
    out = json.loads(invoke_cli("check", "--policy", str(policy), "--json").output)
    assert out["ok"] is False
    assert [(p["kind"], p["edge"], p["fact"]) for p in out["problems"]] == [
        ("missing_fact", ["billing", "disputes"], "dispute_case_id (system_verified)")]


def test_a_tightened_contract_breaks_the_edges_that_cannot_carry_it():
    """refunds accepting only a transaction id a tool verified: triage has no tool, so a packet from it (or from the
    start of a turn, or from the paused dialogue) cannot carry one; billing's tools verify it."""
    verified = AgentContract("refunds", needs=(Requirement(
        "the verified transaction", ((FactNeed("transaction_id", frozenset({"system_verified"})),),), "Which?"),),
        guards=DEFAULT_CONTRACTS["refunds"].guards)
    problems = run_check(CheckedPolicy(DEFAULT_EDGE_TABLE, {**DEFAULT_CONTRACTS, "refunds": verified}))
    assert [(p.kind, p.edge) for p in problems] == [("missing_fact", ("entry", "refunds")),
                                                    ("missing_fact", ("paused_dialogue", "refunds")),
                                                    ("missing_fact", ("triage", "refunds"))]


def _table(**change) -> EdgeTable:
    return replace(DEFAULT_EDGE_TABLE, **change)


def test_unreachable_agents_and_nodes_without_a_controlled_exit_are_found():
    supply = runtime_supply()
    # transfers loses every edge into it: unreachable
    handoffs = {a: ts - {"transfers"} for a, ts in HANDOFF_EDGES.items()}
    cut = _table(handoffs=handoffs, entry=DEFAULT_EDGE_TABLE.entry - {"transfers"})
    assert [(p.kind, p.node) for p in check_contracts(cut, DEFAULT_CONTRACTS, supply)] == [("unreachable",
                                                                                           "transfers")]
    # clarify loses its answer and its fallback: no controlled exit; policy loses only its fallback edge
    extra = DEFAULT_EDGE_TABLE.extra - {("clarify", "fallback"), ("policy", "fallback")}
    stuck = _table(extra=extra, terminal=DEFAULT_EDGE_TABLE.terminal - {"clarify"})
    found = check_contracts(stuck, DEFAULT_CONTRACTS, supply)
    assert [(p.kind, p.node, p.edge) for p in found] == [("no_exit", "clarify", None),
                                                         ("no_exit", "policy", ("policy", "fallback"))]
    assert "every path" not in found[0].message and "answer, fallback or approval" in found[0].message
    # the paused dialogue's exits are human_approval | refunds | fallback: each is a controlled end or reaches one
    assert not [p for p in check_contracts() if p.node == "paused_dialogue"]
    # a contract for an agent the table does not have
    ghost = {**DEFAULT_CONTRACTS, "disputes": AgentContract("disputes")}
    assert [(p.kind, p.node) for p in check_contracts(DEFAULT_EDGE_TABLE, ghost, supply)] == [("unreachable",
                                                                                              "disputes")]


def test_a_side_effect_without_a_guard_names_each_edge_and_tool():
    unguarded = {**DEFAULT_CONTRACTS, "account": AgentContract("account")}
    problems = run_check(CheckedPolicy(DEFAULT_EDGE_TABLE, unguarded))
    into_account = sorted(s for s, t in DEFAULT_EDGE_TABLE.edges() if t == "account")
    assert {(p.edge, p.fact) for p in problems} == {((s, "account"), tool) for s in into_account
                                                    for tool in ("request_operator_case", "withdraw_operator_case")}
    assert all(p.kind == "unguarded_side_effect" for p in problems)
    # a requirement for the tool guards it: cards' freeze and unfreeze need the card
    no_card = {**DEFAULT_CONTRACTS, "cards": AgentContract("cards")}
    assert {p.fact for p in run_check(CheckedPolicy(DEFAULT_EDGE_TABLE, no_card))} == {"freeze_card", "unfreeze_card"}


def test_bad_policy_files_are_bad_input(tmp_path):
    assert isinstance(invoke_cli("check", "--policy", str(tmp_path / "none.py")).exception, InputError)
    (tmp_path / "boom.py").write_text("raise RuntimeError('no')\n")
    (tmp_path / "empty.py").write_text("X = 1\n")
    (tmp_path / "wrong.py").write_text("EDGE_TABLE = {'triage': ['billing']}\n")
    # a file that ends the process would end `switchboard check` with its code: 0, a passed check for a CI gate
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "lines.py").write_text("raise RuntimeError('first\\nsecond\\nthird')\n")
    for name, words in (("boom.py", "RuntimeError: no"), ("empty.py", "neither EDGE_TABLE nor CONTRACTS"),
                        ("wrong.py", "must be a policies.edges.EdgeTable"), ("exits.py", r"called sys.exit\(0\)"),
                        ("lines.py", "RuntimeError: first$")):
        with pytest.raises(InputError, match=words) as err:
            load_policy(tmp_path / name)
        assert "\n" not in str(err.value)


def test_contract_types_refuse_nonsense():
    with pytest.raises(ValueError):
        FactNeed("transaction_id", frozenset({"rumour"}))
    with pytest.raises(ValueError):
        Requirement("nothing", (), "?")
    with pytest.raises(ValueError):
        Requirement("empty alternative", ((),), "?")


def test_unmet_requirements_by_name_and_source():
    refunds = DEFAULT_CONTRACTS["refunds"]
    said = {"source": "user_said"}
    assert unmet_requirements(refunds, [{"key": "transaction_id", "value": "tx_1", "source": "model_written"}]) == ()
    assert unmet_requirements(refunds, [{"key": "merchant", "value": "Tesco", **said},
                                        {"key": "amount", "value": "4.50 GBP", **said}]) == ()
    # merchant and amount must be vouched for: a model-written merchant does not meet it; an empty id is no id
    missing = unmet_requirements(refunds, [{"key": "merchant", "value": "Tesco", "source": "model_written"},
                                           {"key": "amount", "value": "4.50 GBP", **said},
                                           {"key": "transaction_id", "value": "", **said}])
    assert [r.name for r in missing] == ["the transaction to refund"]
    # conditional requirements (before a tool) are not asked on arrival; an agent without a contract needs nothing
    assert unmet_requirements(DEFAULT_CONTRACTS["cards"], []) == ()
    assert unmet_requirements(None, []) == ()


def test_the_supply_the_check_reads_is_what_the_runtime_finds(tmp_path):
    """USER_SAID_KEYS is what extract_facts finds; every tool whose result yields facts declares their keys, and a
    run of each on the demo bank yields only declared keys."""
    from checkpoints.business import BusinessStore
    from nodes.facts import USER_SAID_KEYS, VERIFIED_KEYS, extract_facts, facts_from_tool_result
    from nodes.tools import ToolContext, run_tool

    said = extract_facts("refund tx_1007 and tx_1008 (rf_5001, tr_3002) on my card ending 4242, card_ada_virt, £4.50")
    assert set(said) == USER_SAID_KEYS
    store = BusinessStore(tmp_path / "b.db", now=lambda: datetime(2025, 3, 14, 12, tzinfo=UTC))
    store.seed_demo()
    ada = ToolContext(customer_id="c_ada", tenant_id="t_demo", thread_id="th", task_id="task")
    calls = [("find_duplicate_charges", {}), ("refund_status", {"refund_id": "rf_5001"}),
             ("check_refund_eligibility", {"transaction_id": "tx_1008"}),
             ("explain_transaction", {"transaction_id": "tx_1009"}), ("card_status", {}),
             ("transfer_status", {"transfer_id": "tr_3002"}), ("lookup_policy", {"topic": "fees"}),
             ("request_refund", {"transaction_id": "tx_1008", "reason": "duplicate"}),
             ("freeze_card", {"card_id": "4242"})]
    assert {name for name, _ in calls} == set(VERIFIED_KEYS)
    for name, args in calls:
        facts = facts_from_tool_result(name, run_tool(name, args, store, ada))
        assert facts, name  # the call succeeded and yielded facts: the check below can fail
        assert set(facts) <= VERIFIED_KEYS[name], (name, set(facts) - VERIFIED_KEYS[name])
    supply = runtime_supply()
    assert supply.side_effects["refunds"] == ("request_refund", "cancel_refund")
    assert "transaction_id" in supply.verified["billing"] and "triage" not in supply.verified


def test_check_without_supply_checks_reachability_only():
    empty = FactSupply(frozenset(), {}, {})
    assert check_contracts(supply=None) == []
    # with an empty supply nothing can carry a transaction id: refunds' requirement fails on every edge into it
    assert {p.kind for p in check_contracts(supply=empty)} == {"missing_fact"}


def test_an_incomplete_packet_is_recorded_and_the_receiver_asks(make_desk):
    from graph.conversation import Conversation

    gd = make_desk()
    r = Conversation("pi", graph=gd.graph).send("I want a refund please")
    assert r.agent == "refunds" and "Which transaction" in r.text
    packet = gd.graph.get_state({"configurable": {"thread_id": "pi"}}).values["handoff"]
    assert packet.to_agent == "refunds" and REFUND_QUESTION in packet.open_questions
    [event] = gd.deps.events.events("pi", kinds=["packet_incomplete"])
    assert (event.agent, event.from_agent, event.to_agent) == ("refunds", "triage", "refunds")
    assert event.detail["missing"] == ["the transaction to refund"]
    assert event.detail["questions"] == [REFUND_QUESTION]
    assert "transaction_id" in event.detail["facts"][0]
    # the customer's next message names it: no packet lacks it any more
    Conversation("pj", graph=gd.graph).send("I want a refund for tx_1007 please")
    assert gd.deps.events.events("pj", kinds=["packet_incomplete"]) == []


def test_a_desk_reads_its_contracts_from_its_deps(make_desk):
    """A contract that asks cards for a card on every arrival: the packet asks, the arrival is recorded."""
    from graph.conversation import Conversation

    gd = make_desk()
    asking = Requirement("the card", ((FactNeed("card_last4"),),), "Which card: its last four digits?")
    gd.deps.contracts["cards"] = AgentContract("cards", needs=(asking,))
    Conversation("pc", graph=gd.graph).send("Freeze my card please")
    [event] = gd.deps.events.events("pc", kinds=["packet_incomplete"])
    assert event.to_agent == "cards" and event.detail["questions"] == ["Which card: its last four digits?"]
    packet = gd.graph.get_state({"configurable": {"thread_id": "pc"}}).values["handoff_path"][-1].packet
    assert "Which card: its last four digits?" in packet.open_questions
