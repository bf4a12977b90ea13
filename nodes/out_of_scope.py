"""The out-of-scope answer: a request the desk does not serve gets a short, fixed answer saying what the
desk can help with. No model call, no specialist, no task; the conversation's holder (if any) is kept, so a later reply
on the earlier topic continues with it."""

from __future__ import annotations

from langchain_core.messages import AIMessage
from langgraph.graph import END
from langgraph.types import Command

from graph.contracts.state import ensure_ids
from policies.edges import OUT_OF_SCOPE
from policies.entry import LANGUAGE_REASON

__all__ = ["language_text", "OUT_OF_SCOPE_TEXT", "OUT_OF_SCOPE_AGAIN", "OUT_OF_SCOPE_STILL", "out_of_scope_text",
           "out_of_scope_node"]

#: The answer; the list matches the specialists of ``policies.edges.SPECIALISTS``.
OUT_OF_SCOPE_TEXT = ("Sorry, that's not something this desk can help with. We can help with your cards, payments "
                     "and charges on your account, refunds, transfers, your account details, and our fees and limits.")


#: The answer when the desk's previous answer was already :data:`OUT_OF_SCOPE_TEXT`: shorter, and it says so (never the
#: same words twice).
OUT_OF_SCOPE_AGAIN = ("I'm afraid that's outside what we can help with too. Ask me about your cards, payments, refunds, "
                      "transfers, account or our fees whenever you like.")
#: The answer after :data:`OUT_OF_SCOPE_AGAIN` (a third one in a row); then the two alternate.
OUT_OF_SCOPE_STILL = "Sorry, that one is outside what this desk covers as well."


def language_text(language: str) -> str:
    """The desk's honest answer to a message in ``language`` (its English name, "Spanish"): in English, naming both
    languages, and saying a lost or stolen card is frozen in any language."""
    return (f"I'm sorry, I can only help in English - your message looks like {language}. "
            "Please write to me in English and I'll be glad to help. If you have lost your card or it was stolen, "
            "say so and I will freeze it at once.")


def out_of_scope_text(previous: str | None) -> str:
    """The out-of-scope answer given the desk's ``previous`` answer on the thread (None on a new thread):
    :data:`OUT_OF_SCOPE_TEXT` the first time, then :data:`OUT_OF_SCOPE_AGAIN` / :data:`OUT_OF_SCOPE_STILL` while
    consecutive requests are out of scope, never the previous answer again."""
    if previous == OUT_OF_SCOPE_TEXT or previous == OUT_OF_SCOPE_STILL:
        return OUT_OF_SCOPE_AGAIN
    if previous == OUT_OF_SCOPE_AGAIN:
        return OUT_OF_SCOPE_STILL
    return OUT_OF_SCOPE_TEXT


def out_of_scope_node(state: dict) -> Command:
    """Answer :func:`out_of_scope_text` (the full :data:`OUT_OF_SCOPE_TEXT`, or a shorter one right after an
    out-of-scope answer; for a message in another language, ``policies.entry.LANGUAGE_REASON``, the desk's language
    answer, :func:`language_text` of the reading's ``language_name``) with status ``out_of_scope`` and end the turn
    (state: ``outcome`` and the message; ``active_agent`` and ``task`` untouched)."""
    turn = int(state.get("turn") or 0)
    previous = next((str(m.content) for m in reversed(state.get("messages") or [])
                     if isinstance(m, AIMessage) and not m.tool_calls and m.content), None)
    text = out_of_scope_text(previous)
    if state.get("entry_reason") == LANGUAGE_REASON:
        text = language_text(str((state.get("reading") or {}).get("language_name") or "another language"))
    return Command(goto=END, update={
        "messages": ensure_ids([AIMessage(content=text, name=OUT_OF_SCOPE)]),
        "outcome": {"agent": OUT_OF_SCOPE, "text": text, "status": "out_of_scope", "turn": turn},
    })
