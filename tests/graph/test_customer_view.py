"""What a customer may read (README "What a customer may read"): the customer's view of a thread field by field
against the operator's view, through ``graph.contracts.views`` and ``Conversation.view``; the rewriting of engine responses
(``graph.service.view_guard``) on the engines' JSON shapes; the customer's text without internal reasons (fallback, refund
outcomes); a cancel only by the customer and only once confirmed, on every way a decision arrives. The same views
over HTTP: ``tests/graph/test_langgraph_server.py`` (``langgraph dev``) and ``tests/graph/test_serve.py`` (Aegra)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.types import Command

from checkpoints import open_checkpointer
from graph.builder import build_desk
from graph.contracts.context import RunContext
from graph.contracts.errors import AccessDenied
from graph.contracts.settings import Settings
from graph.contracts.views import CUSTOMER_KEYS, REQUEST_FIELDS, customer_message, customer_request, customer_view, view_for
from graph.conversation import Conversation
from nodes.embedded.offline_model import OfflineChatModel
from nodes.testing.scripted import KeywordRouter
from nodes.testing.state import packet
from policies.authz import OPERATOR_CANCEL, UNCONFIRMED_CANCEL

BIG = "I want a refund for tx_1001 please, that Tesco order never happened"  # £23.80: one approver
SMALL = "Please refund tx_1008, it was a duplicate coffee"  # £4.50: auto-approved and paid
NOTE = "internal: receipt looks forged, checked with fraud team"
ADA, BOB = RunContext(user_id="c_ada"), RunContext(user_id="c_bob")
ANN = RunContext.for_operator("ann", "t_demo")
#: What only operators read: none of it may appear anywhere in a customer's view.
OPERATOR_ONLY = (NOTE, "operator:ann", "risk_flags", "auto-approval limit", "approvals_required", "task_id",
                 "handoff_path", "tool_calls", "decided_by", "usage")


def _desk(home: Path):
    s = Settings.from_env(db=home / "switchboard.db", business_db=home / "business.db")
    r = KeywordRouter()
    d = build_desk(model=OfflineChatModel(router=r), checkpointer=open_checkpointer(s.db), settings=s, router=r)
    d.deps.store.add_operator("ann", "t_demo", ["approver"])
    return d


def _cfg(thread: str) -> dict:
    return {"configurable": {"thread_id": thread}}


def _hidden(view: dict) -> list[str]:
    text = json.dumps(view, default=str)
    return [w for w in OPERATOR_ONLY if w in text]


# ---------------------------------------------------------------- the view, field by field


def test_a_paused_thread_customer_view_field_by_field(isolated_home):
    d = _desk(isolated_home)
    Conversation("p", desk=d).send(BIG)
    values = d.graph.get_state(_cfg("p")).values
    view = customer_view(values)
    assert list(view) == ["messages", "turn", "pending_approval"]  # no outcome while paused
    assert [(m["type"], m["content"]) for m in view["messages"]] == [("human", BIG)]
    assert all(set(m) == {"type", "id", "name", "content"} for m in view["messages"])
    assert view["turn"] == 1
    pa = values["pending_approval"]
    assert view["pending_approval"] == {**{k: getattr(pa, k) for k in REQUEST_FIELDS if hasattr(pa, k)},
                                        "requested_at": pa.request.requested_at, "stage": "awaiting_approval"}
    assert set(view["pending_approval"]) == set(REQUEST_FIELDS) | {"stage"}
    assert _hidden(view) == []
    # the operator's view is the whole state: the risk assessment, the task, the request with its flags
    assert view_for("operator", values) == dict(values) and view_for("customer", values) == view
    assert values["pending_approval"].risk_flags and values["task"].task_id


def test_a_decided_thread_shows_the_outcome_never_the_note_nor_who_decided(isolated_home):
    d = _desk(isolated_home)
    Conversation("p", desk=d).send(BIG)
    r = Conversation("p", desk=d, context=ANN).resume({"decision": "reject", "note": NOTE})
    values = d.graph.get_state(_cfg("p")).values
    view = customer_view(values)
    assert list(view) == ["messages", "turn", "outcome", "refund_outcome"]  # pending_approval: decided, so gone
    assert view["outcome"] == {"agent": "refunds", "text": r.text, "status": "answered", "turn": 1}
    assert view["messages"][-1] == {"type": "ai", "id": values["messages"][-1].id, "name": "refunds",
                                    "content": r.text}
    pa = values["pending_approval"]
    assert view["refund_outcome"] == {"refund_id": pa.refund_id, "transaction_id": "tx_1001", "amount": "£23.80",
                                      "status": "rejected"}
    assert _hidden(view) == []
    # operators keep everything: the decision with its approver and note
    assert values["pending_approval"].decision["note"] == NOTE
    assert values["pending_approval"].decision["approver"] == "operator:ann"
    # the Python API gives each principal its view, as the engines do for their tokens
    assert Conversation("p", desk=d).view() == view
    assert Conversation("p", desk=d, context=ANN).view() == dict(values)
    with pytest.raises(AccessDenied, match="not one of your threads"):
        Conversation("p", desk=d, context=BOB).view()


def test_after_a_payment_nothing_looks_like_a_waiting_request(isolated_home):
    d = _desk(isolated_home)
    conv = Conversation("s", desk=d)
    r = conv.send(SMALL)
    assert r.status == "answered" and r.pending is None  # the Python API: no pending request
    values = d.graph.get_state(_cfg("s")).values
    assert values["pending_approval"].stage == "executed"  # the state keeps the request (operators, "already decided")
    view = customer_view(values)
    assert "pending_approval" not in view
    assert view["refund_outcome"]["status"] == "executed" and view["refund_outcome"]["transaction_id"] == "tx_1008"
    assert conv.send("Where is my card?").status == "answered"
    assert "pending_approval" not in customer_view(d.graph.get_state(_cfg("s")).values)


def test_the_thread_listing_does_not_take_a_decided_request_for_a_waiting_one():
    """``switchboard threads``: a thread whose last turn has no outcome yet (cut short) is not "awaiting_approval"
    because its state still holds a paid request."""
    from checkpoints.threads import thread_summaries

    class Reader:
        def latest_channel_values(self):
            owner = {"customer_id": "c_ada", "tenant_id": "t_demo"}
            return {"paid": {"owner": owner, "turn": 2, "pending_approval": {"stage": "executed"}},
                    "waits": {"owner": owner, "turn": 1, "pending_approval": {"stage": "awaiting_approval"}}}

    assert {s["thread_id"]: s["status"] for s in thread_summaries(Reader())} == {"paid": "-",
                                                                               "waits": "awaiting_approval"}


def test_messages_the_customer_sees():
    calls = [{"name": "transfer_to_refunds", "args": {"reason": "internal routing note"}, "id": "c1"}]
    assert customer_message(HumanMessage("hi", id="h1")) == {"type": "human", "id": "h1", "name": None,
                                                             "content": "hi"}
    assert customer_message(AIMessage("", tool_calls=calls, name="billing")) is None
    assert customer_message(AIMessage("let me check", tool_calls=calls)) is None  # words around a tool call
    assert customer_message(ToolMessage("Refused: the edge is not legal", tool_call_id="c1")) is None
    assert customer_message(SystemMessage("you are the billing agent")) is None
    assert customer_message(AIMessage("", name="billing")) is None
    blocks = [{"type": "reasoning", "text": "the customer seems upset"}, {"type": "text", "text": "Done."}]
    assert customer_message(AIMessage(blocks, id="a1", name="cards"))["content"] == "Done."
    # the engines' JSON form of the same messages
    assert customer_message({"type": "ai", "content": "Paid.", "id": "a2", "name": "refunds", "tool_calls": [],
                             "usage_metadata": {"total_tokens": 9}, "response_metadata": {"model": "x"}}) == {
        "type": "ai", "id": "a2", "name": "refunds", "content": "Paid."}
    assert customer_message({"type": "tool", "content": "{}", "tool_call_id": "c1"}) is None


def test_interrupt_payloads_and_unknown_state():
    payload = {"kind": "refund_approval", "task_id": "task_1", "thread_id": "t", "customer_id": "c_ada",
               "refund_id": "rf_1", "transaction_id": "tx_1001", "amount_minor": 2380, "currency": "GBP",
               "amount": "£23.80", "reason": "model wrote this", "risk_flags": ["account on fraud watch"],
               "requested_at": "2026-01-01T00:00:00Z", "approvals_required": 2, "approvals": ["operator:ann"],
               "deadline": "2026-01-04T00:00:00Z"}
    assert customer_request(payload) == {"kind": "refund_approval", "refund_id": "rf_1", "transaction_id": "tx_1001",
                                         "amount": "£23.80", "amount_minor": 2380, "currency": "GBP",
                                         "requested_at": "2026-01-01T00:00:00Z"}
    assert customer_request({"kind": "something_else", "secret": 1}) == {} and customer_request("x") == {}
    assert customer_view(None) == {} and customer_view(["not", "a", "state"]) == {}
    # a key the state gains later stays operator-only
    assert set(customer_view({"turn": 1, "brand_new_internal_key": "x", "model_error": {"message": "m"}})) == {"turn"}
    assert set(CUSTOMER_KEYS) == {"messages", "turn", "outcome", "pending_approval", "refund_outcome"}


# ---------------------------------------------------------------- the engines' JSON shapes


def _state_doc(values: dict) -> dict:
    interrupt = {"id": "i1", "value": {"kind": "refund_approval", "refund_id": "rf_1", "risk_flags": ["fraud watch"],
                                       "approvals": ["operator:ann"]}}
    return {"values": values, "next": ["human_approval"], "checkpoint": {"checkpoint_id": "c2"},
            "parent_checkpoint": {"checkpoint_id": "c1"}, "created_at": "2026-01-01T00:00:00Z",
            "metadata": {"source": "loop", "step": 4, "run_id": "r1", "user_id": "operator:ann",
                         "langgraph_auth_user_id": "operator:ann", "langgraph_auth_user": {"roles": ["approver"]}},
            "tasks": [{"id": "t1", "name": "human_approval", "error": "AccessDenied: operator:agt lacks the role",
                       "interrupts": [interrupt], "state": None, "result": {"pending_approval": {"note": NOTE}}}],
            "interrupts": [interrupt]}


def test_the_engines_documents_in_the_customers_view():
    from graph.service.view_guard import customer_output, customer_response, customer_run, customer_state, customer_thread

    values = {"messages": [{"type": "human", "content": "hi", "id": "h"}], "turn": 1,
              "pending_approval": {"stage": "rejected", "refund_id": "rf_1", "decision": {"note": NOTE}},
              "handoff_path": [{"reason": "rejected by operator:ann"}]}
    state = customer_state(_state_doc(values))
    assert state["values"] == customer_view(values) and state["next"] == ["human_approval"]
    assert state["metadata"] == {"source": "loop", "step": 4, "run_id": "r1"}
    assert state["tasks"] == [{"id": "t1", "name": "human_approval", "interrupts": [
        {"id": "i1", "value": {"kind": "refund_approval", "refund_id": "rf_1"}}]}]
    assert state["interrupts"] == state["tasks"][0]["interrupts"] and state["checkpoint"] == {"checkpoint_id": "c2"}
    thread = customer_thread({"thread_id": "t", "status": "interrupted", "metadata": {"owner": "c_ada"},
                              "config": {"configurable": {"langgraph_auth_user": "operator:ann"}}, "values": values,
                              "interrupts": {"task": [_state_doc(values)["interrupts"][0]]}})
    assert set(thread) == {"thread_id", "status", "metadata", "values", "interrupts"}
    assert thread["interrupts"] == {"task": [{"id": "i1", "value": {"kind": "refund_approval", "refund_id": "rf_1"}}]}
    run = customer_run({"run_id": "r", "thread_id": "t", "status": "success", "kwargs": {"command": {"resume": {
        "decision": "reject", "note": NOTE}}}, "input": {}, "config": {}, "context": {"operator": "ann"},
        "output": {**values, "__interrupt__": []}})
    assert run == {"run_id": "r", "thread_id": "t", "status": "success",
                   "output": {**customer_view(values), "__interrupt__": []}}
    assert customer_output({"__error__": {"error": "AccessDenied", "message": "m"}}) == {
        "__error__": {"error": "AccessDenied", "message": "m"}}
    for path, doc in (("/threads/t/state", _state_doc(values)), ("/threads/t/history", [_state_doc(values)]),
                      ("/threads/search", [{"values": values}]), ("/threads", {"threads": [{"values": values}]}),
                      ("/threads/t/runs/wait", values), ("/runs/wait", values), ("/threads/t/runs/r/join", values),
                      ("/threads/t/runs", [{"output": values}]), ("/threads/t", {"values": values})):
        body = customer_response("GET" if path != "/threads/search" else "POST", path, json.dumps(doc).encode())
        assert NOTE not in body.decode() and "operator:ann" not in body.decode(), path
    assert customer_response("GET", "/assistants/a", b'{"x": 1}') == b'{"x": 1}'
    assert customer_response("GET", "/threads/t/state", b"not json") == b"not json"


def test_event_streams_keep_values_in_the_customers_view_and_drop_the_rest():
    from graph.service.view_guard import SseFilter

    values = {"turn": 1, "pending_approval": {"stage": "executed", "refund_id": "rf_1", "decision": {"note": NOTE}}}
    stream = (b"event: metadata\r\ndata: {\"run_id\": \"r1\"}\r\n\r\n"
              b"event: updates\r\ndata: {\"human_approval\": {\"note\": \"" + NOTE.encode() + b"\"}}\r\n\r\n"
              b": heartbeat\r\n\r\n"
              b"event: values\r\nid: 7\r\ndata: " + json.dumps(values).encode() + b"\r\n\r\n"
              b"event: custom\r\ndata: {\"event\": \"access_denied\"}\r\n\r\n"
              b"event: end\r\ndata: null\r\n\r\n")
    for size in (1, 7, 64, len(stream)):  # however the engine cuts its body into chunks
        f = SseFilter()
        out = b"".join(f.feed(stream[i:i + size]) for i in range(0, len(stream), size)) + f.close()
        text = out.decode()
        assert NOTE not in text and "updates" not in text and "access_denied" not in text
        events = [e for e in text.split("\n\n") if e]
        assert [e.splitlines()[0] for e in events] == ["event: metadata", ": heartbeat", "event: values", "event: end"]
        assert "id: 7" in events[2]
        assert json.loads(events[2].split("data: ", 1)[1]) == customer_view(values)


def test_a_customer_streams_values_only_and_an_operator_never_cancels():
    from graph.service.auth import check_run_request

    for modes in ("updates", ["values", "messages-tuple"], ["debug"], "custom", "events"):
        assert "streams only values" in check_run_request("customer", {"stream_mode": modes})
    assert check_run_request("customer", {"stream_mode": ["values"]}) is None
    assert check_run_request("customer", {"stream_mode": "values"}) is None
    assert check_run_request("operator", {"stream_mode": ["updates"], "command": {"resume": {"decision": "approve"}}}) \
        is None
    assert check_run_request("operator", {"command": {"resume": {"decision": "cancel"}}}) == OPERATOR_CANCEL


# ---------------------------------------------------------------- customer text without internal reasons


def test_the_fallback_answer_never_gives_an_internal_reason():
    from nodes.fallback import customer_reason, fallback_text

    loop = "loop detected: state fingerprint 702f3c1d9e0a4b5c repeated with the same action (handoff:refunds)"
    for reason in (loop, "hop budget of 7 handoffs per turn reached", "bounce-back detected: billing -> refunds",
                   "refunds used its 4 model calls without answering", "all experts failed: billing failed (timeout)"):
        text = fallback_text(packet(**{"reason": reason}))
        assert customer_reason(reason) is None
        assert "Reason" not in text and reason not in text and "fingerprint" not in text
        assert text.startswith("I'm sorry, I couldn't complete this automatically")
    assert customer_reason("the card_status service is unavailable (ConnectionError: down)") == \
        "one of our services is unavailable"
    assert customer_reason("the payment failed (StoreError: deadlock detected)") == "one of our services is unavailable"
    assert customer_reason("the model failed (timeout after 30 s at http://10.0.0.5:8000)") == \
        "our automated assistant could not answer"
    text = fallback_text(packet(**{"reason": "the model failed (timeout after 30 s at http://10.0.0.5:8000)"}))
    assert "10.0.0.5" not in text and "timeout" not in text
    # who decided a refund is internal, also in packets stored before it left them
    text = fallback_text(packet(**{"reason": "the customer asked for a person", "known_facts": [
        {"key": "refund_status", "value": "rejected", "source": "system_verified"},
        {"key": "decided_by", "value": "operator:ann", "source": "system_verified"}]}))
    assert "refund status: rejected" in text and "operator:ann" not in text and "decided by" not in text


def test_after_a_rejection_no_answer_names_the_approver(isolated_home):
    d = _desk(isolated_home)
    conv = Conversation("p", desk=d)
    conv.send(BIG)
    rejected = Conversation("p", desk=d, context=ANN).resume({"decision": "reject", "note": NOTE})
    person = conv.send("I want to speak to a person")
    assert person.status == "fallback"
    facts = {f.key for f in d.graph.get_state(_cfg("p")).values["handoff"].known_facts}
    assert "decided_by" not in facts
    answers = [str(m.content) for m in d.graph.get_state(_cfg("p")).values["messages"] if isinstance(m, AIMessage)]
    for text in [rejected.text, person.text, *answers]:
        assert "operator:ann" not in text and "ann" not in text.split() and NOTE not in text


def test_an_already_decided_answer_names_the_approver_to_operators_only(isolated_home):
    from graph.contracts.errors import InputError

    d = _desk(isolated_home)
    Conversation("p", desk=d).send(BIG)
    Conversation("p", desk=d, context=ANN).resume({"decision": "reject"})
    with pytest.raises(InputError) as customer:
        Conversation("p", desk=d).resume({"decision": "cancel"})
    assert "already decided: reject at" in str(customer.value) and "operator:ann" not in str(customer.value)
    with pytest.raises(InputError, match="already decided: reject by operator:ann"):
        Conversation("p", desk=d, context=ANN).resume({"decision": "approve"})


# ---------------------------------------------------------------- a cancel: the customer's, once confirmed


def test_a_cancel_the_customer_did_not_confirm_is_refused_on_every_way_in(isolated_home):
    d = _desk(isolated_home)
    r = Conversation("p", desk=d).send(BIG)
    before = d.graph.get_state(_cfg("p")).values
    with pytest.raises(AccessDenied, match="only once you confirmed it"):  # the Python API
        Conversation("p", desk=d).resume({"decision": "cancel"})
    with pytest.raises(AccessDenied, match="only once you confirmed it"):  # the graph, as a served resume reaches it
        d.graph.invoke(Command(resume={"decision": "cancel"}), _cfg("p"), context=ADA)
    with pytest.raises(AccessDenied, match="customer's own withdrawal"):  # an approver rejects instead
        Conversation("p", desk=d, context=ANN).resume({"decision": "cancel", "note": "customer phoned"})
    with pytest.raises(AccessDenied, match="customer's own withdrawal"):
        d.graph.invoke(Command(resume={"decision": "cancel", "decision_id": "dc_ann"}), _cfg("p"), context=ANN)
    assert d.graph.get_state(_cfg("p")).values == before
    assert d.deps.store.list_decisions(r.pending.task_id) == []
    denied = [e.reason for e in d.deps.events.events("p", kinds=["access_denied"])]
    assert any(UNCONFIRMED_CANCEL in x for x in denied) and any(OPERATOR_CANCEL in x for x in denied)
    assert d.deps.store.load_refund(r.pending.refund_id).status == "requested"


def test_a_cancel_after_the_desks_question_is_taken_over_the_graph_too(isolated_home):
    """The chat asks "Cancel refund …? yes/no"; while that question is open, a cancel decision is the answer to it —
    the same rule for ``Conversation.send("yes")`` and for a resume that reaches the graph (a served client)."""
    d = _desk(isolated_home)
    conv = Conversation("p", desk=d)
    r = conv.send(BIG)
    assert conv.send("please cancel my refund").text.startswith("Cancel refund")
    out = d.graph.invoke(Command(resume={"decision": "cancel"}), _cfg("p"), context=ADA)
    assert "cancelled" in out["outcome"].text
    assert [(x.approver, x.decision) for x in d.deps.store.list_decisions(r.pending.task_id)] == [
        ("customer:c_ada", "cancel")]
    assert customer_view(out)["refund_outcome"]["status"] == "cancelled"
    # a question answered with something else is closed: a later cancel needs a new question
    conv2 = Conversation("q", desk=d, context=BOB)
    assert conv2.send("Please refund tx_2001, I never got my sandwich").status == "awaiting_approval"
    assert conv2.send("cancel my refund").text.startswith("Cancel refund")
    assert conv2.send("no").status == "awaiting_approval"
    with pytest.raises(AccessDenied, match="only once you confirmed it"):
        d.graph.invoke(Command(resume={"decision": "cancel"}), _cfg("q"), context=BOB)


def test_the_docs_document_every_key_of_the_customers_view():
    """docs/identity.md "What a customer may read" has one row per key of the customer's view, and names every request
    field."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "identity.md").read_text(encoding="utf-8")
    section = page.split("## What a customer may read", 1)[1].split("\n## ", 1)[0]
    rows = {line.split("|")[1].strip().strip("`"): line for line in section.splitlines() if line.startswith("| `")}
    assert list(rows) == list(CUSTOMER_KEYS)
    assert all(f"`{f}`" in rows["pending_approval"] for f in REQUEST_FIELDS)


def test_every_langgraph_json_mounts_the_view_and_no_way_around_it():
    """The repository's ``langgraph.json`` (``langgraph dev``) and the one ``switchboard serve --engine langgraph-pg``
    writes mount ``graph.service.view_guard:app`` and switch off MCP, A2A and the v2 event streaming; Aegra's app carries the
    view guard outermost."""
    import graph.service.aegra_app
    import graph.service.view_guard
    from graph.service.serve import LANGGRAPH_ENV, LANGGRAPH_HTTP, langgraph_config

    repo = json.loads((Path(__file__).resolve().parents[2] / "langgraph.json").read_text(encoding="utf-8"))
    assert repo["http"] == LANGGRAPH_HTTP == langgraph_config()["http"]
    assert repo["env"] == LANGGRAPH_ENV == langgraph_config()["env"] == {"FF_V2_EVENT_STREAMING": "false"}
    assert LANGGRAPH_HTTP["app"] == "graph.service.view_guard:app" and LANGGRAPH_HTTP["disable_mcp"] and \
        LANGGRAPH_HTTP["disable_a2a"]
    assert [m.cls.__name__ for m in graph.service.view_guard.app.user_middleware] == ["_ApiViewGuard"]
    assert [m.cls.__name__ for m in graph.service.aegra_app.app.user_middleware] == ["ViewGuard", "RunGuard"]
