"""What the model writes never leaks, never vanishes, over real HTTP with the OpenAI-compatible stub.

Tool calls written as text (function-call syntax, a JSON object naming a tool, ``<tool_call>`` tags) are never shown
to the customer: one known tool with JSON-object arguments becomes a real call (through the same policy checks);
anything else gets one corrective retry, then fallback. An empty answer gets one retry, then fallback. Text written
together with a handoff reaches the receiver in the packet.
"""

from __future__ import annotations

import json

import pytest
from langchain_core.messages import AIMessage, ToolMessage

from graph.conversation import Conversation
from nodes.testing.openai_stub import ByAgent, Reply, ToolCall, ToolCalls, check_server, route
from nodes.text_tool_calls import read_text_tool_calls

CARD_STATUS_ANSWER = "Your card ending 4242 is active."


def _kinds(desk, thread):
    return [(e.status, e.detail.get("form")) for e in desk.deps.events.events(thread, kinds=["model_output_repaired"])]


def _shown(values) -> list[str]:
    """Every text the transcript holds as an answer (AIMessages without tool calls)."""
    return [str(m.content) for m in values["messages"] if isinstance(m, AIMessage) and not m.tool_calls]


@pytest.mark.parametrize("text,form", [
    ('card_status()', "function_call"),
    ('{"name": "card_status", "arguments": {}}', "json"),
    ('<tool_call>{"name": "card_status", "arguments": {}}</tool_call>', "tool_call_tag"),
])
def test_text_form_call_of_a_known_tool_becomes_a_real_call(stub, env_graph, text, form):
    script = ByAgent(triage=[ToolCalls([route("cards")])], cards=[Reply(text), Reply(CARD_STATUS_ANSWER)])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    conv = Conversation("t", desk=desk)
    r = conv.send("is my card ok?")
    check_server(srv)
    assert r.agent == "cards" and r.text == CARD_STATUS_ANSWER
    assert all(text not in s for s in _shown(conv.state))
    tools = [m for m in conv.state["messages"] if isinstance(m, ToolMessage)]
    assert [m.name for m in tools][-1] == "card_status" and json.loads(tools[-1].content).get("ok", True)
    assert _kinds(desk, "t") == [("converted", form)]
    assert [e.detail["tool"] for e in desk.deps.events.events("t", kinds=["tool_called"])] == ["card_status"]


def test_text_form_handoff_along_a_legal_edge_is_accepted(stub, env_graph):
    script = ByAgent(triage=[ToolCalls([route("cards")])],
                     cards=[Reply('transfer_to_billing(reason="it is a charge question")')],
                     billing=[Reply("That charge is your coffee.")])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    conv = Conversation("t", desk=desk)
    r = conv.send("card problem")
    check_server(srv)
    assert r.agent == "billing" and r.text == "That charge is your coffee."
    assert [(e.from_agent, e.to_agent) for e in desk.deps.events.events("t", kinds=["handoff_accepted"])][-1] == \
        ("cards", "billing")
    assert _kinds(desk, "t") == [("converted", "function_call")]


def test_text_form_handoff_off_the_edge_table_is_not_a_tool_of_the_agent(stub, env_graph):
    """A handoff written as text to an agent the edge table does not give cards (refunds) names no tool bound to it:
    the text is never shown, the model is asked once more, and its plain answer stands."""
    script = ByAgent(triage=[ToolCalls([route("cards")])],
                     cards=[Reply('transfer_to_refunds(reason="money back")'), Reply("I can only help with the card.")])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    conv = Conversation("t", desk=desk)
    r = conv.send("card problem")
    check_server(srv)
    assert r.agent == "cards" and r.text == "I can only help with the card."
    assert _kinds(desk, "t") == [("retry", "function_call")]  # refunds is not a cards tool: unknown here


@pytest.mark.parametrize("first,second,status", [
    ('<tool_call>{"name": "wipe_account", "arguments": {}}</tool_call>', CARD_STATUS_ANSWER, "answered"),
    ("", CARD_STATUS_ANSWER, "answered"),
    ('{"name": "wipe_account", "arguments": {}}', "", "fallback"),
    ("", "", "fallback"),
])
def test_unusable_output_gets_one_retry_then_fallback(stub, env_graph, first, second, status):
    script = ByAgent(triage=[ToolCalls([route("cards")])], cards=[Reply(first), Reply(second)])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    conv = Conversation("t", desk=desk)
    r = conv.send("is my card ok?")
    check_server(srv)
    assert r.status == status and script.seen.count("cards") == 2 and not script.leftover
    assert all("wipe_account" not in s for s in _shown(conv.state)) and all(s.strip() for s in _shown(conv.state))
    events = [s for s, _ in _kinds(desk, "t")]
    assert events == (["retry"] if status == "answered" else ["retry", "fallback"])
    retry_request = [b for b in srv.requests if "could not be used" in b["messages"][0]["content"]]
    assert len(retry_request) == 1  # the corrective note travels in the single system message


def test_text_written_with_a_handoff_reaches_the_receiver_as_the_senders_words(stub, env_graph):
    script = ByAgent(
        triage=[ToolCalls([route("billing")])],
        billing=[ToolCalls([ToolCall("transfer_to_refunds", {"reason": "wants the duplicate back"})],
                           content="I checked: tx_1008 is the duplicate of tx_1007.")],
        refunds=[Reply("I'll look at the refund.")])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    conv = Conversation("t", desk=desk)
    r = conv.send("charged twice, money back please")
    check_server(srv)
    assert r.agent == "refunds" and r.text == "I'll look at the refund."
    assert conv.state["handoff"].sender_note == "I checked: tx_1008 is the duplicate of tx_1007."
    refunds_request = next(b for b in srv.requests if "refunds agent" in b["messages"][0]["content"])
    assert "Note from billing (its own words, not verified): I checked: tx_1008" in refunds_request["messages"][0]["content"]


def test_reader_forms_and_prose():
    known = {"card_status", "transfer_to_refunds"}
    assert read_text_tool_calls("Your card is fine (no action needed).", known).form == "none"
    assert read_text_tool_calls("I ran card_status() for you.", known).form == "none"
    two = read_text_tool_calls('[{"name": "card_status"}, {"name": "card_status"}]', known)
    assert two.form == "json" and not two.usable and "2 tool calls" in two.problem
    bad = read_text_tool_calls("transfer_to_refunds(reason=because)", known)
    assert bad.form == "function_call" and not bad.usable
    fenced = '```json\n{"function": {"name": "transfer_to_refunds", "arguments": "{\\"reason\\": \\"x\\"}"}}\n```'
    ok = read_text_tool_calls(fenced, known)
    assert ok.usable and ok.calls[0]["args"] == {"reason": "x"}


def test_server_refusing_tool_choice_switches_triage_to_tool_routing_once(stub, env_graph):
    from nodes.agent import TOOL_CHOICE_REFUSED
    from nodes.testing.openai_stub import HTTPError

    TOOL_CHOICE_REFUSED.clear()
    refusal = HTTPError(400, body={"error": {"message": "tool_choice of type 'function' is not supported by this server",
                                             "type": "invalid_request_error", "param": "tool_choice", "code": None}})
    script = ByAgent(triage=[refusal, ToolCalls([ToolCall("transfer_to_cards", {"reason": "a card question"})]),
                             ToolCalls([ToolCall("transfer_to_cards", {"reason": "again"})])],
                     cards=[Reply(CARD_STATUS_ANSWER), Reply(CARD_STATUS_ANSWER + " Still.")])
    srv = stub(script)
    desk = env_graph(srv.base_url)
    r = Conversation("t", desk=desk).send("is my card ok?")
    assert r.agent == "cards" and r.text == CARD_STATUS_ANSWER
    changed = desk.deps.events.events("t", kinds=["routing_changed"])
    assert len(changed) == 1 and "SWITCHBOARD_ROUTING" in changed[0].reason
    triage = [b for b in srv.requests if "triage agent" in b["messages"][0]["content"]]
    assert triage[0].get("tool_choice") and not triage[1].get("tool_choice")
    assert {t["function"]["name"] for t in triage[1]["tools"]} >= {"transfer_to_cards", "transfer_to_billing"}
    r2 = Conversation("t2", desk=desk).send("my card is not working")  # remembered: no second refusal, no event
    triage = [b for b in srv.requests if "triage agent" in b["messages"][0]["content"]]
    assert r2.agent == "cards" and len(triage) == 3 and not triage[2].get("tool_choice") and not script.leftover
    assert not desk.deps.events.events("t2", kinds=["routing_changed"])
    TOOL_CHOICE_REFUSED.clear()


def test_routing_failure_names_the_setting(stub, env_graph):
    from nodes.testing.openai_stub import HTTPError

    srv = stub(ByAgent(triage=[HTTPError(400)]))
    desk = env_graph(srv.base_url, SWITCHBOARD_ROUTING="structured")
    r = Conversation("t", desk=desk).send("is my card ok?")
    # the operator's error line names the setting; the customer's text stays free of internals
    assert r.status == "fallback" and r.model_error is not None and "SWITCHBOARD_ROUTING" in r.model_error.message
    assert "SWITCHBOARD_ROUTING" not in r.text
