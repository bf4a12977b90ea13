"""History shaping: what the next agent's model sees.

The checkpointed conversation always keeps every message; these functions only choose the slice
passed to a model call.  Every mode returns a *valid* transcript: an assistant message with tool calls
is never separated from the ToolMessages that answer it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

__all__ = ["HistoryMode", "HistoryPolicy", "DEFAULT_HISTORY", "policy_for_edge", "shape_history", "shape_recent",
           "bound_messages",
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


def _last_user_turns(messages: Sequence[BaseMessage], k: int) -> list[int]:
    """The indexes of the last ``k`` user messages, oldest first (all of them when there are fewer), found from the
    end: O(what they span), not O(thread)."""
    found: list[int] = []
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            found.append(i)
            if len(found) == k:
                break
    return found[::-1]


def _first_user_turn(messages: Sequence[BaseMessage]) -> int | None:
    return next((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), None)


#: :func:`_shaped` of the assistant messages with tool calls shaped lately: ``id(message) -> (message, its text-only
#: copy)``, so the copy is the same object (and its estimate is kept) turn after turn; a plain dict as :data:`_COUNTS`.
_SHAPED: dict[int, tuple[BaseMessage, BaseMessage]] = {}


def _shaped(m: BaseMessage) -> BaseMessage | None:
    """One message as ``no_tool_calls`` passes it: None for tool traffic, an assistant message with tool calls
    reduced to its text."""
    if isinstance(m, ToolMessage):
        return None
    if isinstance(m, AIMessage) and (m.tool_calls or m.invalid_tool_calls):
        if not m.content:
            return None
        hit = _SHAPED.get(id(m))
        if hit is not None and hit[0] is m:
            return hit[1]
        text = AIMessage(content=m.content, name=m.name, id=m.id)
        if len(_SHAPED) >= _COUNTS_KEPT:
            _SHAPED.clear()
        _SHAPED[id(m)] = (m, text)
        return text
    return m


def _drop_tool_traffic(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [s for s in map(_shaped, messages) if s is not None]


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
    return shape_recent(messages, policy, packet_summary, sender_note)[0]


def shape_recent(messages: Sequence[BaseMessage], policy: HistoryPolicy, packet_summary: str | None = None,
                 sender_note: str = "", keep_tokens: int | None = None) -> tuple[list[BaseMessage], int]:
    """:func:`shape_history` for an input that :func:`bound_messages` then bounds to ``keep_tokens``: returns
    ``(shaped, left_out)``. In the modes whose output grows with the thread (``full``, ``no_tool_calls``) only the
    newest part of the transcript is shaped: from the newest message at which the shaped messages' estimate
    (:func:`estimate_tokens`) passes ``keep_tokens``, and never after the last user message; ``left_out`` is how
    many transcript messages before it were not looked at (0 in the other modes, or without ``keep_tokens``).

    Why it is the same model input: bounding keeps the newest messages that fit in ``keep_tokens`` (less the system
    message) and the last user turn, so a message older than a shaped part that alone passes the budget is cut
    anyway; shaping costs O(budget), not O(thread)."""
    msgs = list(messages)
    if sender_note and packet_summary and policy.mode != "full":
        msgs = _without_note(msgs, sender_note)
    left_out = 0
    if policy.mode in ("full", "no_tool_calls"):
        start, tail = _recent(msgs, keep_tokens, shape=policy.mode == "no_tool_calls")
        left_out = start
        shaped = tail
    elif policy.mode == "last_k":
        starts = _last_user_turns(msgs, policy.k) if policy.k > 0 else []
        if policy.k > 0 and len(starts) >= policy.k:
            cut = starts[0]
        else:
            first = _first_user_turn(msgs)
            cut = first if first is not None else 0
        shaped = msgs[cut:]
    elif policy.mode == "packet_only":
        last = _last_user_turns(msgs, 1)
        shaped = [msgs[last[0]]] if last else []
    else:  # pragma: no cover - Literal guards this
        raise ValueError(f"unknown history mode {policy.mode!r}")
    if packet_summary and policy.mode != "full":
        shaped = [SystemMessage(content=packet_summary), *shaped]
    return shaped, left_out


def _recent(msgs: list[BaseMessage], keep_tokens: int | None, shape: bool) -> tuple[int, list[BaseMessage]]:
    """``(start, shaped msgs[start:])`` (module doc of :func:`shape_recent`); start 0 without ``keep_tokens``."""
    if keep_tokens is None:
        return 0, _drop_tool_traffic(msgs) if shape else msgs
    out: list[BaseMessage] = []
    total, user_seen = 0, False
    i = len(msgs)
    while i > 0 and (total <= keep_tokens or not user_seen):
        i -= 1
        m = _shaped(msgs[i]) if shape else msgs[i]
        user_seen = user_seen or isinstance(msgs[i], HumanMessage)
        if m is not None:
            out.append(m)
            total += _count(m)
    return i, out[::-1]


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


#: :func:`_count` of the messages counted lately: ``id(message) -> (message, its estimate)`` (holding the message, so
#: its ``id()`` is not reused); a thread's messages come back as the same objects turn after turn. Emptied when full.
#: (A plain dict: one lookup or store is atomic under the GIL, and a lost race only counts a message twice.)
_COUNTS: dict[int, tuple[BaseMessage, int]] = {}
_COUNTS_KEPT = 8192


def _count(m: BaseMessage) -> int:
    """:func:`estimate_tokens` of one message. The estimate of a list is the sum of its messages' (langchain_core
    rounds up per message and adds a whole number per message), which :func:`bound_messages` relies on. Kept per
    message object (:data:`_COUNTS`): messages are not changed in place once in a transcript."""
    hit = _COUNTS.get(id(m))
    if hit is not None and hit[0] is m:
        return hit[1]
    n = count_tokens_approximately([m])
    if len(_COUNTS) >= _COUNTS_KEPT:
        _COUNTS.clear()
    _COUNTS[id(m)] = (m, n)
    return n


def bound_messages(messages: Sequence[BaseMessage], max_tokens: int) -> Bounded:
    """Bound one model input to ``max_tokens`` as langchain_core's ``trim_messages`` does
    (``strategy="last"``, ``include_system=True``, ``start_on="human"``, no partial messages): the leading
    system message is kept, the oldest turns go first, and the input starts on a user message, so an assistant
    message with tool calls is never separated from its ToolMessages. The current turn (the last user message and
    everything after it) is never cut: when it alone exceeds the budget, the input is the system message plus the
    current turn. What is cut lives on in the packet (facts with their source, open questions), rendered into the
    system message by the caller.

    Cost: messages are counted from the newest back until the budget is passed, so a call costs O(what fits), not
    O(thread) (``trim_messages`` counts every prefix it tries, over the whole transcript); the result is
    ``trim_messages``'s, since the estimate of a list is the sum of its messages' (:func:`_count`).
    """
    msgs = list(messages)
    n = len(msgs)
    tail: list[int] = []  # tail[j]: the estimate of msgs[n - 1 - j], counted from the newest back
    total = 0
    while len(tail) < n and total <= max_tokens:
        tail.append(_count(msgs[n - 1 - len(tail)]))
        total += tail[-1]
    if total <= max_tokens:
        return Bounded(msgs, 0, total)
    first = 1 if msgs and isinstance(msgs[0], SystemMessage) else 0
    remaining = max(0, max_tokens - _count(msgs[0])) if first else max_tokens
    k, used = 0, 0  # the newest k messages after the system message fit in what remains
    while k < n - first:
        t = tail[k] if k < len(tail) else _count(msgs[n - 1 - k])
        if used + t > remaining:
            break
        used += t
        k += 1
    while k > 0 and msgs[n - k].type != "human":  # start on a user message
        k -= 1
        used -= tail[k]
    kept = [*msgs[:first], *msgs[n - k:]] if k else list(msgs[:first])
    tokens = (_count(msgs[0]) if first else 0) + used
    last = _last_user_turns(msgs, 1)
    current = msgs[last[0]:] if last else msgs[1:]
    if len(kept) < len(current) + 1 or kept[-len(current):] != current:
        kept = [*msgs[:1], *current] if msgs and isinstance(msgs[0], SystemMessage) else list(current)
        tokens = sum(map(_count, kept))
    return Bounded(kept, len(msgs) - len(kept), tokens)
