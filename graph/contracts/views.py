"""What a customer may read of a thread, and what an operator reads (README "What a customer may read").

Contract module: plain data out, no project import (``checkpoints.threads`` reads checkpoints without LangGraph and
uses it too). In: a thread's state values as the graph holds them (the typed models of ``graph.contracts.state``, read by their
JSON form) or as an engine's JSON response; both give the same view. Every way in serves a customer this view of a
thread's state and nothing else: the served engines (``graph.service.view_guard`` rewrites their responses for customer
principals: thread state and history, threads, run outputs, stream events) and the Python API
(``Conversation.view``).

**The operator's view** (:func:`operator_view`) is the whole state (``graph.contracts.state.SupportState``): the transcript with
tool calls and ToolMessages, the handoff path and packets, the task, ``pending_approval`` with the risk assessment and
the decision (approver and note), usage, model errors. Operators read it through the CLI (``history``, ``trace``,
``pending``) and, over HTTP, with a token of kind operator.

**The customer's view** (:func:`customer_view`) is built from a whitelist, key by key; a key of the state that is not
listed here is never shown to a customer (a key added to the state later stays operator-only until it is added here):

* ``messages`` — the conversation as the customer had it: their own messages (``type`` ``human``) and the desk's
  answers (``type`` ``ai``: text, no tool calls, as ``nodes.transcript.desk_answers`` counts them), each as
  ``{"type", "id", "name", "content"}`` (``name``: the agent that answered; ``content``: the text). Tool calls, their
  arguments (handoff reasons), ToolMessages (tool results, refusals and why), system messages, usage and response
  metadata are left out;
* ``turn`` — the thread's turn counter (int);
* ``outcome`` — the last turn's answer: ``{"agent", "text", "status", "turn"}`` (``graph.contracts.state.Outcome``; the
  supervisor's typed ``answer``, which holds the experts' gaps and their reasons, is left out: ``text`` is the
  answer); absent while a turn is running or paused;
* ``pending_approval`` — present **only while the thread waits for a human decision** (``stage == "awaiting_approval"``): the
  request's customer-facing fields :data:`REQUEST_FIELDS` (``refund_id``, ``transaction_id``, ``amount``,
  ``amount_minor``, ``currency``, ``requested_at``) and ``stage: "awaiting_approval"``. The risk assessment and flags (e.g.
  "identity not verified", "fraud watch"), the number of approvals required and who approved so far, the task id and
  the decision are operator-only. In the state, ``pending_approval`` keeps the last request after its decision (the
  "already decided" answers read it; its ``stage`` says where it ended), so a customer client testing for the key
  would think a paid refund still waits: the view drops it once the request is decided;
* ``refund_outcome`` — once the thread's last refund request has ended (``stage`` in :data:`FINAL_STAGES`):
  ``{"refund_id", "transaction_id", "amount", "status"}``, ``status`` one of ``executed`` (paid), ``rejected``,
  ``cancelled``, ``expired``, ``closed`` (by the team), ``already_decided`` (decided elsewhere before this decision).
  Who decided and their note are operator-only (README "Human approval": the note is internal; a rejected customer
  is told a fixed reason).

A key is present only when it has a value. The payload of the approval interrupt (``human_approval``'s
``ApprovalRequest`` + ``approvals``), shown by the engines in ``tasks[].interrupts`` and ``__interrupt__``, is
reduced the same way (:func:`customer_request`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["CUSTOMER_KEYS", "REQUEST_FIELDS", "OUTCOME_FIELDS", "FINAL_STAGES", "WAITING_STAGE", "customer_view",
           "operator_view", "view_for", "customer_message", "customer_request", "waiting_request", "refund_outcome",
           "is_waiting", "plain"]

#: The keys a customer's view may hold, in this order (module doc, field by field).
CUSTOMER_KEYS: tuple[str, ...] = ("messages", "turn", "outcome", "pending_approval", "refund_outcome")
#: The customer-facing fields of a refund approval request (``graph.contracts.approval.ApprovalRequest``).
REQUEST_FIELDS: tuple[str, ...] = ("refund_id", "transaction_id", "amount", "amount_minor", "currency", "requested_at")
#: The fields of the last turn's outcome a customer reads (``graph.contracts.state.Outcome`` without ``answer``).
OUTCOME_FIELDS: tuple[str, ...] = ("agent", "text", "status", "turn")
#: ``pending_approval["stage"]`` while the request waits for a human (``nodes.approval_flow``: set by ``risk``, kept
#: until ``human_approval`` returns a final decision).
WAITING_STAGE = "awaiting_approval"
#: The name earlier versions stored for :data:`WAITING_STAGE` (``graph.contracts.approval.LEGACY_STAGES``): a thread checkpointed
#: then and read without the graph still shows as waiting.
_LEGACY_WAITING_STAGE = "awaiting"
#: The stages a refund request ends in (``nodes.approval_flow``: ``STAGE_OF``, a payment, or a decision taken
#: elsewhere first).
FINAL_STAGES = frozenset({"executed", "rejected", "cancelled", "expired", "closed", "already_decided"})
#: The fields of :func:`refund_outcome` copied from the request.
_OUTCOME_REQUEST_FIELDS = ("refund_id", "transaction_id", "amount")
#: LangChain message classes by the ``type`` their instances and JSON forms carry.
_HUMAN, _AI = "human", "ai"


def operator_view(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The operator's view of a thread: every key of its state ``values``, unchanged (module doc)."""
    return dict(values or {})


def view_for(kind: str, values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The view of ``values`` for a principal of ``kind`` (``"customer"`` | ``"operator"``); any other kind gets the
    customer's view (the smaller one)."""
    return operator_view(values) if kind == "operator" else customer_view(values)


def _field(message: Any, name: str) -> Any:
    return message.get(name) if isinstance(message, Mapping) else getattr(message, name, None)


def _text(content: Any) -> str:
    """The text of a message's content: a string as it is; a list of content blocks -> its text blocks joined (other
    blocks — reasoning, tool use, images — are not the desk's words to the customer)."""
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content or ():
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping) and block.get("type") == "text" and isinstance(block.get("text"), str):
            parts.append(block["text"])
    return "".join(parts)


def customer_message(message: Any) -> dict[str, Any] | None:
    """One transcript message (a LangChain message or its JSON dict) as the customer sees it, ``{"type", "id",
    "name", "content"}``, or None when it is not part of the customer's conversation: only the customer's messages
    and the desk's answers (an AI message with text and no valid or invalid tool calls) are."""
    kind = _field(message, "type")
    if kind in ("AIMessageChunk",):
        kind = _AI
    if kind not in (_HUMAN, _AI):
        return None
    text = _text(_field(message, "content"))
    if kind == _AI and (not text or _field(message, "tool_calls") or _field(message, "invalid_tool_calls")):
        return None
    return {"type": kind, "id": _field(message, "id"), "name": _field(message, "name"), "content": text}


def plain(value: Any) -> Any:
    """A state value as JSON data: a typed model (``graph.contracts.state_values``) by its JSON form, anything else as it is
    (what reads checkpoints without importing pydantic, ``checkpoints.threads``, gets either)."""
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else value


def is_waiting(pending_approval: Any) -> bool:
    """Does ``pending_approval`` (the state key: the model or its JSON) stand for a request that waits for a human
    decision now?"""
    pa = plain(pending_approval)
    return isinstance(pa, Mapping) and pa.get("stage") in (WAITING_STAGE, _LEGACY_WAITING_STAGE)


def _request_fields(*sources: Mapping[str, Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in REQUEST_FIELDS:
        for source in sources:
            if isinstance(source, Mapping) and source.get(name) not in (None, ""):
                out[name] = source[name]
                break
    return out


def customer_request(payload: Any) -> dict[str, Any]:
    """The customer's view of an interrupt payload: for the refund approval request (``kind`` ``refund_approval``),
    ``{"kind"}`` + :data:`REQUEST_FIELDS`; for anything else, ``{}`` (no other interrupt is the customer's to read)."""
    if not isinstance(payload, Mapping) or payload.get("kind") != "refund_approval":
        return {}
    return {"kind": "refund_approval", **_request_fields(payload)}


def waiting_request(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The customer's ``pending_approval``: :data:`REQUEST_FIELDS` and ``stage`` while the thread's request waits for a
    human decision (:func:`is_waiting`), else None."""
    pa = plain((values or {}).get("pending_approval"))
    if not isinstance(pa, Mapping) or not is_waiting(pa):
        return None
    return {**_request_fields(pa, pa.get("request")), "stage": WAITING_STAGE}


def refund_outcome(values: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """How the thread's last refund request ended, ``{"refund_id", "transaction_id", "amount", "status"}``, once its
    ``stage`` is final (:data:`FINAL_STAGES`); None while it waits, runs, or when there is none."""
    pa = plain((values or {}).get("pending_approval"))
    if not isinstance(pa, Mapping) or pa.get("stage") not in FINAL_STAGES:
        return None
    fields = _request_fields(pa, pa.get("request"))
    return {**{k: fields[k] for k in _OUTCOME_REQUEST_FIELDS if k in fields}, "status": pa["stage"]}


def customer_view(values: Mapping[str, Any] | None) -> dict[str, Any]:
    """The customer's view of a thread's state ``values`` (module doc, field by field): a new dict of plain data
    with at most the keys :data:`CUSTOMER_KEYS`. ``values`` may hold LangChain messages (``graph.get_state``) or their
    JSON dicts (an engine's response); anything that is not a mapping gives ``{}``."""
    if not isinstance(values, Mapping):
        return {}
    out: dict[str, Any] = {}
    messages = [m for m in (customer_message(x) for x in values.get("messages") or ()) if m is not None]
    if messages:
        out["messages"] = messages
    if values.get("turn") is not None:
        out["turn"] = int(values["turn"] or 0)
    outcome = plain(values.get("outcome"))
    if isinstance(outcome, Mapping) and outcome:
        out["outcome"] = {k: outcome[k] for k in OUTCOME_FIELDS if k in outcome}
    waiting = waiting_request(values)
    if waiting is not None:
        out["pending_approval"] = waiting
    ended = refund_outcome(values)
    if ended is not None:
        out["refund_outcome"] = ended
    return out
