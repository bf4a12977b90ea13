"""OpenTelemetry spans (``nodes.tracing``) with the SDK's in-memory exporter: the span tree of a two-handoff turn and
of an approval (pause, then resume in its own run), the handoff log record's attributes, the thread id and tenant on
every span, no message text or amount anywhere in a span, and nothing of it when tracing is off."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied, ConfigError
from graph.contracts.settings import Settings
from graph.conversation import Conversation
from nodes.router import load_router
from nodes.tracing import safe_reason, tracer_provider_for
from tests.conftest import ANN

REPO = Path(__file__).resolve().parents[2]
#: triage -> billing -> refunds, and the refund (£4.50, tx_1008) paid at once: two handoffs in one turn
TWO_HOPS = "I was charged twice at Pret, please refund the extra coffee, my name is Ada Lovelace"
BIG = "I want a refund for tx_1001 please, that Tesco order never happened"  # £23.80: one approver


@pytest.fixture
def traced(make_desk, store):
    """``(graph, exporter)``: a desk whose spans go to an in-memory exporter; approvers ann registered."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store.add_operator("ann", "t_demo", ["approver"])
    return make_desk(router=load_router(), tracer_provider=provider).graph, exporter


def _tree(spans) -> dict:
    """span id -> (name, parent span id or None)."""
    return {s.context.span_id: (s.name, s.parent.span_id if s.parent else None) for s in spans}


def _children(spans, parent) -> list[str]:
    return [s.name for s in sorted(spans, key=lambda s: s.start_time)
            if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _one(spans, name: str):
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _all_text(spans) -> str:
    """Everything a span exports besides timings: names, attributes, event names and attributes, status."""
    parts = []
    for s in spans:
        parts += [s.name, json.dumps(dict(s.attributes or {}), default=str), s.status.description or ""]
        parts += [e.name + json.dumps(dict(e.attributes or {}), default=str) for e in s.events]
    return "\n".join(parts)


def _no_personal_data(spans, *said: str) -> None:
    text = _all_text(spans)
    for message in said:
        words = message.split()
        for i in range(len(words) - 2):  # no three consecutive words of a customer's message
            assert " ".join(words[i:i + 3]) not in text, " ".join(words[i:i + 3])
    for personal in ("Ada", "Lovelace", "£", "4.50", "23.80"):
        assert personal not in text, personal
    assert not [k for s in spans for k in (s.attributes or {}) if "amount" in k or "customer" in k]


def test_a_two_handoff_turn_is_one_span_tree(traced):
    g, exporter = traced
    r = Conversation("otel-1", graph=g).send(TWO_HOPS)
    assert [(h.from_agent, h.to_agent) for h in r.handoff_path if h.kind == "handoff"] == \
        [("triage", "billing"), ("billing", "refunds")]
    spans = exporter.get_finished_spans()
    run = _one(spans, "switchboard run")
    assert run.parent is None and run.attributes["switchboard.status"] == "answered"
    tree = _tree(spans)
    assert all(parent in tree for _, parent in tree.values() if parent is not None)  # every parent is exported
    # the run's children are its node visits, in order
    assert _children(spans, run) == ["invoke_agent triage", "invoke_agent billing", "invoke_agent refunds",
                                     "invoke_agent risk", "invoke_agent refund_execute", "invoke_agent refunds"]
    triage = _one(spans, "invoke_agent triage")
    assert _children(spans, triage) == ["chat offline", "handoff triage → billing"]
    billing = _one(spans, "invoke_agent billing")
    assert "execute_tool find_duplicate_charges" in _children(spans, billing)
    assert _children(spans, billing)[-1] == "handoff billing → refunds"
    assert "execute_tool execute_refund" in _children(spans, _one(spans, "invoke_agent refund_execute"))
    # the handoff log record's attributes
    hop = _one(spans, "handoff billing → refunds")
    a = hop.attributes
    assert (a["switchboard.handoff.from"], a["switchboard.handoff.to"], a["switchboard.outcome"]) == \
        ("billing", "refunds", "accepted")
    assert len(a["switchboard.handoff.fingerprint"]) == 16 and a["switchboard.handoff.history_items"] >= 1
    assert a["switchboard.handoff.reason"] and a["switchboard.handoff.hop"] == 3
    assert a["switchboard.state_version"] == 0 and a["switchboard.handoff.handoff_id"]
    assert hop.start_time <= hop.end_time
    # thread and tenant on every span; a model call has its model and duration
    for s in spans:
        assert s.attributes["switchboard.thread_id"] == "otel-1" and s.attributes["gen_ai.conversation.id"] == "otel-1"
        assert s.attributes["switchboard.tenant_id"] == "t_demo", s.name
    chat = _children(spans, triage)[0]
    assert _one([s for s in spans if s.parent and s.parent.span_id == triage.context.span_id], chat) \
        .attributes["gen_ai.request.model"] == "offline"
    _no_personal_data(spans, TWO_HOPS)


def test_an_approval_pause_and_resume_are_two_runs_with_an_approval_span_each(traced):
    g, exporter = traced
    cfg = {"configurable": {"thread_id": "otel-2"}}
    paused = Conversation("otel-2", graph=g).send(BIG)
    assert paused.status == "awaiting_approval"
    first = exporter.get_finished_spans()
    run1 = _one(first, "switchboard run")
    assert run1.attributes["switchboard.status"] == "awaiting_approval"
    visit = _one(first, "invoke_agent human_approval")
    assert visit.parent.span_id == run1.context.span_id and visit.attributes["switchboard.status"] == "interrupted"
    approval = _one(first, "approval")
    assert approval.parent.span_id == visit.context.span_id
    assert approval.attributes["switchboard.approval.next"] == "awaiting_approval"
    assert approval.attributes["switchboard.approval.approvals_required"] == 1
    assert approval.attributes["switchboard.approval.task_id"] == paused.pending.task_id
    exporter.clear()
    # a resume the run gate refuses (the customer approving) starts no run: no span
    with pytest.raises(AccessDenied, match="not authorized"):
        g.invoke(Command(resume={"decision": "approve"}), cfg)
    assert exporter.get_finished_spans() == ()
    g.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg, context=ANN)
    second = exporter.get_finished_spans()
    run2 = _one(second, "switchboard run")
    assert run2.parent is None and run2.context.trace_id != run1.context.trace_id  # each run is a trace
    assert run2.attributes["switchboard.run.input"] == "resume"
    assert run2.attributes["switchboard.approval.decision"] == "approve"
    assert run2.attributes["switchboard.approval.resume_shape"] == "hitl"
    assert _children(second, run2) == ["invoke_agent human_approval", "invoke_agent refund_execute",
                                       "invoke_agent refunds"]
    approval = _one(second, "approval")
    assert approval.parent.span_id == _one(second, "invoke_agent human_approval").context.span_id
    assert approval.attributes["switchboard.approval.decision"] == "approve"
    assert approval.attributes["switchboard.approval.next"] == "refund_execute"
    assert "resumed" in [e.name for e in approval.events]
    for s in first + second:
        assert s.attributes["switchboard.thread_id"] == "otel-2" and s.attributes["switchboard.tenant_id"] == "t_demo"
    _no_personal_data(list(first) + list(second), BIG)
    assert "operator:ann" not in _all_text(second) and "ann" not in json.dumps(
        [dict(s.attributes) for s in second])


def test_a_reason_that_quotes_the_customer_or_names_an_amount_is_masked():
    state = {"messages": [{"type": "human", "content": "Please refund the Tesco order of Ada"}]}
    assert safe_reason("customer says refund the Tesco order", state) == "<withheld: quotes the customer>"
    assert safe_reason("refund of £23.80 to 4242 4242 4242 4242, ada@example.com", state) == \
        "refund of <amount> to •••• 4242, <e-mail>"
    assert safe_reason("x" * 500, None) == "x" * 200
    assert safe_reason("transaction_charged_twice (router 0.66)", state) == "transaction_charged_twice (router 0.66)"
    assert safe_reason(None, state) == ""


def test_an_unknown_mode_is_a_one_line_config_error(monkeypatch):
    with pytest.raises(ConfigError, match="SWITCHBOARD_OTEL"):
        Settings(otel="jaeger")
    monkeypatch.setenv("SWITCHBOARD_OTEL", "Console")
    assert Settings.from_env().otel == "console"
    with pytest.raises(ConfigError, match="use off, console or otlp"):
        tracer_provider_for("zipkin")


@pytest.mark.subprocess
def test_off_by_default_nothing_is_imported_and_console_writes_spans_to_stderr(isolated_home):
    """Off: nodes.tracing is never imported and no span is made; console: the spans on stderr, stdout unchanged."""
    code = ("import sys\nfrom graph.app.cli import main\nsys.argv=['switchboard','chat','I was charged twice for my coffee',"
            "'--thread',sys.argv[1],'--json']\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('TRACING_IMPORTED' if 'nodes.tracing' in sys.modules else 'TRACING_NOT_IMPORTED', file=sys.stderr)\n")
    env = {"SWITCHBOARD_HOME": str(isolated_home), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    off = subprocess.run([sys.executable, "-c", code, "o1"], cwd=REPO, capture_output=True, text=True, timeout=180, env=env)
    assert "TRACING_NOT_IMPORTED" in off.stderr and '"name": "switchboard run"' not in off.stderr, off.stderr[-2000:]
    on = subprocess.run([sys.executable, "-c", code, "o2"], cwd=REPO, capture_output=True, text=True, timeout=180,
                        env={**env, "SWITCHBOARD_OTEL": "console"})
    assert "TRACING_IMPORTED" in on.stderr and '"name": "switchboard run"' in on.stderr, on.stderr[-2000:]
    assert '"name": "handoff triage \\u2192 billing"' in on.stderr  # JSON, ASCII-escaped
    assert json.loads(on.stdout)["agent"] == json.loads(off.stdout)["agent"] == "billing"


def test_a_refused_handoff_is_a_handoff_span_with_its_refusal(make_desk, store):
    """refunds -> account is not an edge: the handoff span ends refused, the refusal kind recorded, the reason's text
    kept (the model's own words here, none of the customer's)."""
    from langchain_core.messages import AIMessage, ToolMessage

    from nodes.testing import scripted as sm

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_refunds", reason="route")])
        if not any(isinstance(m, ToolMessage) and m.content.startswith("Refused") for m in msgs):
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_account", reason="try")])
        return AIMessage(content="refunds keeps it")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    g = make_desk(sm.ScriptedChatModel(policy=policy), tracer_provider=provider).graph
    Conversation("otel-3", graph=g).send("refund please")
    spans = exporter.get_finished_spans()
    refused = _one(spans, "handoff refunds → account")
    assert refused.attributes["switchboard.outcome"] == "refused"
    assert refused.attributes["switchboard.handoff.refusal"] == "refused"
    assert refused.attributes["switchboard.handoff.reason"] == "try"  # what the model asked for
    assert "may not hand off to account" in refused.attributes["switchboard.handoff.refusal_reason"]
    assert refused.parent.span_id == [s for s in spans if s.name == "invoke_agent refunds"][0].context.span_id
    assert _one(spans, "handoff triage → refunds").attributes["switchboard.outcome"] == "accepted"


def test_the_first_of_two_approvers_leaves_an_approval_span_that_pauses_again(traced):
    g, exporter = traced
    cfg = {"configurable": {"thread_id": "otel-4"}}
    Conversation("otel-4", graph=g, context=RunContext(user_id="c_bob")).send("Please refund tx_2001, I never got it")
    exporter.clear()
    g.invoke(Command(resume={"decisions": [{"type": "approve"}]}), cfg, context=ANN)
    approval = _one(exporter.get_finished_spans(), "approval")
    assert approval.attributes["switchboard.approval.decision"] == "approve"
    assert approval.attributes["switchboard.approval.next"] == "awaiting_approval"
    assert approval.attributes["switchboard.approval.approvals"] == 1
    assert approval.attributes["switchboard.approval.approvals_required"] == 2
    assert [e.name for e in approval.events] == ["resumed", "paused"]


@pytest.mark.parametrize("reason, leaked", [
    ("Ada Lovelace wants a refund", ("Ada", "Lovelace")),  # a name, not three words of the message
    ("customer LOVELACE asked", ("LOVELACE",)),
    ("lives on Elm Street", ("Elm",)),
    ("refund GBP 23 to the customer", ("23",)),
    ("refund EUR 150", ("150",)),
    ("refund 23,80 €", ("23,80",)),
    ("refund USD100", ("USD100",)),
    ("refund 2380 pence", ("2380",)),
    ("card 4242424242424241 (fails Luhn: a typo)", ("4242424242424241",)),
    ("IBAN GB82WEST12345698765432", ("GB82WEST12345698765432",)),
])
def test_a_reason_never_carries_a_name_an_amount_or_an_account_number(reason, leaked):
    state = {"messages": [{"type": "human", "content": "Hi, my name is Ada Lovelace, I live at 12 Elm Street."}]}
    safe = safe_reason(reason, state)
    assert safe and not [x for x in leaked if x in safe], safe
    # ids, agent names and router scores stay readable
    assert safe_reason("tx_1001 to refunds (router 0.66)", state) == "tx_1001 to refunds (router 0.66)"


def test_a_model_whose_handoff_reason_quotes_the_customer_leaks_nothing_into_spans(make_desk):
    from langchain_core.messages import AIMessage

    from nodes.testing import scripted as sm

    said = ("My name is Grace Hopper, grace.hopper@example.com, card 4000 0566 5566 5556 was charged EUR 150 "
            "twice at Lidl, call +44 7700 900123")
    # no three consecutive words of the message (that reason would be withheld whole): a paraphrase naming her
    reason = "Hopper, Grace paid 150 EUR via 4000056655665556 in Lidl; ring +447700900123"

    def policy(agent, user, names, i, msgs):
        if agent == "triage":
            return AIMessage(content="", tool_calls=[sm.tool_call("transfer_to_billing", reason=reason)])
        return AIMessage(content="billing has it")

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    g = make_desk(sm.ScriptedChatModel(policy=policy), tracer_provider=provider).graph
    Conversation("otel-pii", graph=g).send(said)
    spans = exporter.get_finished_spans()
    handoff = _one(spans, "handoff triage → billing")
    assert handoff.attributes["switchboard.handoff.reason"]  # the reason is there, masked
    text = _all_text(spans)
    # a card keeps its last four digits (policies.redaction, as operators see it)
    for personal in ("Grace", "Hopper", "grace.hopper", "150", "4000 0566", "4000056655665556", "Lidl", "7700"):
        assert personal not in text, (personal, handoff.attributes["switchboard.handoff.reason"])
