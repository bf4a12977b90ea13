"""Reading and normalising the transcript: the customer's last words, the thread, the model's tool calls.

* :func:`tool_call_views` turns one AIMessage's tool calls into :class:`policies.handoff.ToolCallView` s (valid or
  not, with the reason), the shape the policies decide on;
* :func:`unique_call_ids` gives fresh ids to repeated or missing tool-call ids, so every tool call can be answered by
  exactly one ToolMessage (control-flow rule 2) on strict OpenAI-compatible backends;
* :func:`fold_transcript` runs a fold over a transcript, continuing its last run over the same messages (a thread's
  transcript only grows at its end), so a scan of the whole thread costs O(new messages) a turn.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.config import get_config
from pydantic import ValidationError

from graph.contracts.state import fold_prefix
from nodes.handoff_tools import ROUTE_TOOL, HandoffArgs, RouteDecision
from policies.answers import answer_key
from policies.handoff import ToolCallView, handoff_target_of, handoff_tool_name

__all__ = ["desk_answers", "last_user_text", "thread_id_of", "known_call_ids", "unique_call_ids", "tool_call_views",
           "new_call_id", "fold_transcript", "answers_by_agent", "open_question_of"]

T = TypeVar("T")

#: A sentence end of the desk's own answers (its texts end sentences with ".", "!" or "?" and a space).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def open_question_of(answer: str) -> str | None:
    """The last question the desk asked in its ``answer`` (the last sentence ending with "?"), or None."""
    sentences = _SENTENCE_END.split((answer or "").strip())
    questions = [s.strip() for s in sentences if s.strip().endswith("?")]
    return questions[-1] if questions else None


def fold_transcript(name: str, messages: Sequence[BaseMessage], start: Callable[[], T],
                    step: Callable[[T, BaseMessage], None], copy: Callable[[T], T]) -> T:
    """``step(acc, m)`` over the messages in order from ``acc = start()``, continuing the last run under ``name``
    over a prefix of the same message objects (``graph.contracts.state.fold_prefix``)."""
    return fold_prefix(name, messages, start, step, copy)


def new_call_id() -> str:
    """A fresh tool-call id ``call_<16 hex>``."""
    return f"call_{uuid.uuid4().hex[:16]}"


def last_user_text(messages: Iterable[BaseMessage]) -> str:
    """Text of the last HumanMessage ("" when none)."""
    for m in reversed(list(messages)):
        if isinstance(m, HumanMessage):
            return str(m.content)
    return ""


def desk_answers(messages: Iterable[BaseMessage]) -> list[AIMessage]:
    """The desk's final answers in ``messages`` (AIMessages with text and no tool calls), oldest first."""
    return fold_transcript("desk_answers", list(messages), list, _add_answer, list)


def answers_by_agent(messages: Sequence[BaseMessage]) -> dict[str, tuple[list[str], set[str]]]:
    """Per agent (the answer's ``name``; "" for none), the texts of its :func:`desk_answers` in the thread, oldest
    first, and their :func:`policies.answers.answer_key` s (continuing the previous call's scan: :func:`fold_transcript`)."""
    return fold_transcript("answers_by_agent", list(messages), dict, _add_agent_answer,
                           lambda acc: {a: (list(texts), set(keys)) for a, (texts, keys) in acc.items()})


def _add_agent_answer(acc: dict[str, tuple[list[str], set[str]]], m: BaseMessage) -> None:
    if isinstance(m, AIMessage) and m.content and not m.tool_calls and not m.invalid_tool_calls:
        texts, keys = acc.setdefault(m.name or "", ([], set()))
        texts.append(str(m.content))
        keys.add(answer_key(str(m.content)))


def _add_answer(answers: list[AIMessage], m: BaseMessage) -> None:
    if isinstance(m, AIMessage) and m.content and not m.tool_calls and not m.invalid_tool_calls:
        answers.append(m)


def thread_id_of() -> str:
    """The thread_id of the running graph call ("" outside a thread)."""
    try:
        return str(get_config().get("configurable", {}).get("thread_id", ""))
    except RuntimeError:
        return ""


def known_call_ids(messages: Iterable[BaseMessage]) -> set[str]:
    """Every tool-call id (valid and invalid calls) of the AIMessages in ``messages``."""
    return fold_transcript("known_call_ids", list(messages), set, _add_call_ids, set)


def _add_call_ids(ids: set[str], m: BaseMessage) -> None:
    if isinstance(m, AIMessage):
        ids.update(tc.get("id") or "" for tc in m.tool_calls)
        ids.update(tc.get("id") or "" for tc in m.invalid_tool_calls)


def unique_call_ids(ai: AIMessage, known: set[str]) -> AIMessage:
    """``ai`` with fresh ids for tool calls whose id is missing or already in ``known`` (a model that repeats ids would
    otherwise make the transcript invalid for strict backends). Adds the final ids to ``known`` (kept incrementally by
    the caller, so the transcript is scanned once per visit, not once per model call)."""
    changed = False

    def fresh(calls_in: list) -> list:
        nonlocal changed
        out = []
        for tc in calls_in:
            if not tc.get("id") or tc["id"] in known:
                tc = {**tc, "id": new_call_id()}
                changed = True
            known.add(tc["id"])
            out.append(tc)
        return out

    calls, invalid = fresh(ai.tool_calls), fresh(ai.invalid_tool_calls)
    if not changed:
        return ai
    return ai.model_copy(update={"tool_calls": calls, "invalid_tool_calls": invalid})


def _schema_error(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())) or 'arguments'}: {e.get('msg', 'invalid')}"
                     for e in exc.errors())[:300]


def _call_view(tc: Mapping[str, Any]) -> ToolCallView:
    """One valid-JSON tool call as a view. A handoff's arguments must pass :class:`HandoffArgs`; a ``route_to_agent``
    call must pass :class:`RouteDecision` and becomes the equivalent ``transfer_to_<target>`` call (same id), so the
    edge table and the guards decide it like any handoff. Failing either schema gives an invalid view (refused)."""
    call_id = tc.get("id") or new_call_id()
    name, args = tc.get("name") or "", tc.get("args") or {}
    if name == ROUTE_TOOL:
        try:
            decision = RouteDecision.model_validate(args)
        except ValidationError as exc:
            return ToolCallView(id=call_id, name=name, args=args, valid=False, error=_schema_error(exc), problem="schema")
        return ToolCallView(id=call_id, name=handoff_tool_name(decision.target), args=decision.handoff_args())
    if handoff_target_of(name) is not None:
        try:
            HandoffArgs.model_validate(args)
        except ValidationError as exc:
            return ToolCallView(id=call_id, name=name, args=args, valid=False, error=_schema_error(exc), problem="schema")
    return ToolCallView(id=call_id, name=name, args=args)


def tool_call_views(ai: AIMessage) -> list[ToolCallView]:
    """The tool calls of ``ai`` as views, in order: valid-JSON calls first (checked against the handoff and route
    schemas), then the calls whose JSON did not parse (invalid). A response cut at the token limit
    (``finish_reason == "length"``) gives only invalid views: streamed arguments may have been repaired from partial
    JSON, so none of them is trusted."""
    if (ai.response_metadata or {}).get("finish_reason") == "length":
        out = [ToolCallView(id=tc.get("id") or new_call_id(), name=tc.get("name") or "", valid=False,
                            error="the response was cut off at the token limit (finish_reason=length)")
               for tc in ai.tool_calls]
    else:
        out = [_call_view(tc) for tc in ai.tool_calls]
    out += [ToolCallView(id=tc.get("id") or new_call_id(), name=tc.get("name") or "", valid=False,
                         error=tc.get("error") or "invalid JSON")
            for tc in ai.invalid_tool_calls]
    return out
