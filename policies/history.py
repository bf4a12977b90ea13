"""History shaping: what the next agent's model sees (issue 3, item 6).

The checkpointed conversation always keeps every message; these functions only choose the slice
passed to a model call.  Every mode returns a *valid* transcript: an assistant message with tool calls
is never separated from the ToolMessages that answer it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

__all__ = ["HistoryMode", "HistoryPolicy", "DEFAULT_HISTORY", "policy_for_edge", "shape_history", "bound_messages",
           "Bounded", "estimate_tokens"]

HistoryMode = Literal["full", "last_k", "packet_only", "no_tool_calls"]


@dataclass(frozen=True)
class HistoryPolicy:
    """``mode`` and, for ``last_k``, ``k`` = number of most recent user turns kept (each with what followed)."""

    mode: HistoryMode = "last_k"
    k: int = 3


#: Per-edge defaults: triage passes the recent user turns (it adds nothing but routing); a specialist
#: passes its packet plus the last user turn, since its own tool traffic is noise for the next agent;
#: an agent re-entered on a new turn sees its recent conversation without raw tool traffic.
DEFAULT_HISTORY: Mapping[tuple[str, str] | str, HistoryPolicy] = {
    "triage": HistoryPolicy("last_k", 3),
    "*": HistoryPolicy("packet_only", 1),
    "entry": HistoryPolicy("no_tool_calls", 0),
}


def policy_for_edge(source: str | None, target: str,
                    table: Mapping[tuple[str, str] | str, HistoryPolicy] = DEFAULT_HISTORY) -> HistoryPolicy:
    """The history policy of ``source -> target``: exact edge first, then the source's default, then ``"*"``.
    ``source`` None (or ``"entry"``) means the turn started at ``target``."""
    key = source or "entry"
    return table.get((key, target)) or table.get(key) or table.get("*") or HistoryPolicy()


def _user_turn_starts(messages: Sequence[BaseMessage]) -> list[int]:
    return [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]


def _drop_tool_traffic(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for m in messages:
        if isinstance(m, ToolMessage):
            continue
        if isinstance(m, AIMessage) and (m.tool_calls or m.invalid_tool_calls):
            if m.content:
                out.append(AIMessage(content=m.content, name=m.name, id=m.id))
            continue
        out.append(m)
    return out


def _without_note(messages: list[BaseMessage], note: str) -> list[BaseMessage]:
    """``messages`` with ``note`` taken out of the last assistant message with tool calls (the sender's handoff) when
    its text starts with it: the packet carries the note, so the model reads it once. The message keeps its tool
    calls (its ToolMessages stay answered) and any text beyond the note (a packet keeps the first 1,000 characters)."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if not (isinstance(m, AIMessage) and m.tool_calls):
            continue
        text = m.content.strip() if isinstance(m.content, str) else ""
        if not text.startswith(note):
            return messages
        return [*messages[:i], m.model_copy(update={"content": text[len(note):].strip()}), *messages[i + 1:]]
    return messages


def shape_history(messages: Sequence[BaseMessage], policy: HistoryPolicy,
                  packet_summary: str | None = None, sender_note: str = "") -> list[BaseMessage]:
    """Return the messages the receiving model sees.

    Args:
        messages: the full checkpointed transcript (system prompts are never stored there).
        policy: the mode to apply.
        packet_summary: the HandoffPacket rendered as text; prepended as a SystemMessage in every mode
            but ``full`` when given.
        sender_note: the packet's ``sender_note`` (what the handing agent wrote with its handoff). When the packet
            summary is prepended, the summary carries the note, so the handoff message that wrote it is passed
            without its text (``full`` keeps the transcript as it is: there the note travels in that message).

    Modes:
        ``full``: everything. ``last_k``: the last ``k`` user turns and everything after each.
        ``packet_only``: the packet plus the last user message only. ``no_tool_calls``: all turns with
        tool calls and ToolMessages removed (assistant text kept).
    """
    msgs = list(messages)
    if sender_note and packet_summary and policy.mode != "full":
        msgs = _without_note(msgs, sender_note)
    if policy.mode == "full":
        shaped = msgs
    elif policy.mode == "last_k":
        starts = _user_turn_starts(msgs)
        cut = starts[-policy.k] if policy.k > 0 and len(starts) >= policy.k else (starts[0] if starts else 0)
        shaped = msgs[cut:]
    elif policy.mode == "packet_only":
        starts = _user_turn_starts(msgs)
        shaped = [msgs[starts[-1]]] if starts else []
    elif policy.mode == "no_tool_calls":
        shaped = _drop_tool_traffic(msgs)
    else:  # pragma: no cover - Literal guards this
        raise ValueError(f"unknown history mode {policy.mode!r}")
    if packet_summary and policy.mode != "full":
        shaped = [SystemMessage(content=packet_summary), *shaped]
    return shaped


def estimate_tokens(messages: Sequence[BaseMessage]) -> int:
    """Estimated input tokens of ``messages``: langchain_core's ``count_tokens_approximately`` (4 characters per token
    plus 3 per message, names counted). A documented estimate, used because the desk never downloads a tokenizer's
    vocabulary (``tiktoken`` fetches its files from the internet on first use)."""
    return count_tokens_approximately(list(messages))


@dataclass(frozen=True)
class Bounded:
    """One model input after :func:`bound_messages`: ``messages`` to send, ``cut`` = messages left out,
    ``tokens`` = the estimate of what is sent (:func:`estimate_tokens`)."""

    messages: list[BaseMessage]
    cut: int
    tokens: int


def bound_messages(messages: Sequence[BaseMessage], max_tokens: int) -> Bounded:
    """Bound one model input to ``max_tokens`` (issue 12 §4) with langchain_core's ``trim_messages``: the leading
    system message is kept, the oldest turns go first, and the input starts on a user message, so an assistant
    message with tool calls is never separated from its ToolMessages. The current turn (the last user message and
    everything after it) is never cut: when it alone exceeds the budget, the input is the system message plus the
    current turn. What is cut lives on in the packet (facts with their source, open questions), rendered into the
    system message by the caller.
    """
    msgs = list(messages)
    total = estimate_tokens(msgs)
    if total <= max_tokens:
        return Bounded(msgs, 0, total)
    kept = trim_messages(msgs, max_tokens=max_tokens, token_counter=estimate_tokens, strategy="last",
                         include_system=True, start_on="human", allow_partial=False)
    starts = _user_turn_starts(msgs)
    current = msgs[starts[-1]:] if starts else msgs[1:]
    if len(kept) < len(current) + 1 or kept[-len(current):] != current:
        kept = [*msgs[:1], *current] if msgs and isinstance(msgs[0], SystemMessage) else list(current)
    return Bounded(kept, len(msgs) - len(kept), estimate_tokens(kept))
