"""The typed model input (``graph.contracts.brief``): the embedded model decides from the brief, never from the prompt's text;
a model that does not read briefs never gets the keyword (its system prompt carries the packet as text, checked over
HTTP in ``tests/nodes/test_openai_e2e.py``)."""

from __future__ import annotations

from langchain_core.messages import HumanMessage, SystemMessage

from graph.contracts.brief import BriefReader, ModelBrief
from graph.contracts.packet import Fact, HandoffPacket, render_packet
from nodes.models import make_model, with_brief
from nodes.prompts import system_prompt
from nodes.testing.scripted import answer_only
from nodes.tools import as_langchain_tool, tools_for

MODEL = make_model("offline")


def _calls(agent: str, brief: ModelBrief, prompt: str, text: str) -> list[tuple[str, dict]]:
    bound = MODEL.bind_tools([as_langchain_tool(s) for s in tools_for(agent)])
    out = with_brief(bound, MODEL, brief).invoke([SystemMessage(prompt), HumanMessage(text)])
    return [(c["name"], c["args"]) for c in out.tool_calls]


def _packet(tx: str) -> HandoffPacket:
    return HandoffPacket(task_id="task_1", session_id="t1", trace_id="r1", from_agent="billing", to_agent="refunds",
                         reason="customer wants the money back for the charge identified by billing",
                         objective="refund the charge",
                         known_facts=(Fact(key="transaction_id", value=tx, source="system_verified"),))


def test_the_embedded_model_reads_briefs_and_others_do_not():
    assert isinstance(MODEL, BriefReader) and MODEL.reads_brief()
    scripted = answer_only({"cards": "ok"})
    assert not isinstance(scripted, BriefReader)
    assert with_brief(scripted, scripted, ModelBrief(agent="cards")) is scripted  # never the keyword


def test_a_misleading_prompt_does_not_change_which_agent_speaks():
    brief = ModelBrief(agent="cards")
    told_right = _calls("cards", brief, system_prompt("cards"), "I lost my card")
    told_wrong = _calls("cards", brief, system_prompt("billing"), "I lost my card")
    assert told_right == told_wrong == [("card_status", {})]


def test_the_facts_come_from_the_brief_not_from_the_packet_text():
    brief = ModelBrief.of("refunds", _packet("tx_1001"))
    assert brief.facts[0].value == "tx_1001" and brief.packet is not None and brief.packet.from_agent == "billing"
    true_text = system_prompt("refunds") + "\n" + render_packet(_packet("tx_1001"))
    false_text = system_prompt("refunds") + "\n" + render_packet(_packet("tx_1005"))
    calls = _calls("refunds", brief, false_text, "I want my money back")
    assert calls == _calls("refunds", brief, true_text, "I want my money back")
    assert calls[0][0] == "request_refund" and calls[0][1]["transaction_id"] == "tx_1001"


def test_without_a_brief_the_embedded_model_speaks_as_triage_whatever_the_prompt_says():
    bound = MODEL.bind_tools([as_langchain_tool(s) for s in tools_for("cards")])
    out = bound.invoke([SystemMessage(system_prompt("cards")), HumanMessage("I lost my card")])
    assert [c["name"] for c in out.tool_calls] != ["card_status"]
