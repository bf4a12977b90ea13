"""An answer never repeats itself (issue 12 §1): what the desk says instead of its previous answer word for word.

Pure functions, no I/O. Texts are this module's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from policies.edges import CLARIFY

__all__ = ["CLARIFY_QUESTIONS", "STILL_THE_SAME", "STILL_NO_CHANGE", "AS_I_SAID", "same_answer",
           "clarify_question", "instead_of_repeat"]

#: The clarifying questions, asked in this order; none is asked twice in a thread (after the last one, entry sends a
#: still-unclear answer to fallback, ``policies.entry.MAX_CLARIFY_ROUNDS``).
CLARIFY_QUESTIONS: tuple[str, ...] = (
    "I'm not sure I understood. Is this about a card, a payment or charge, a refund, a transfer, your account, "
    "or our fees and limits?",
    "Could you describe it in one sentence, for example \"my card was declined at a shop\" or "
    "\"I want a refund for tx_1234\"?",
    "Which of these is closest: a card problem, a charge you don't recognise, money you want back, a transfer, "
    "your account details, or a question about fees?",
)


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", (text or "").strip()).lower()


def same_answer(a: str, b: str) -> bool:
    """Are two answers the same text (case and whitespace ignored)?"""
    return bool(_norm(a)) and _norm(a) == _norm(b)


def clarify_question(asked: Sequence[str]) -> str | None:
    """The first of :data:`CLARIFY_QUESTIONS` not among ``asked`` (earlier answers of the thread), or None."""
    seen = {_norm(a) for a in asked}
    return next((q for q in CLARIFY_QUESTIONS if _norm(q) not in seen), None)


#: How an answer re-read from the records starts when the facts are the same as in the previous answer (issue 12 §1:
#: never the same words twice; a re-asked status question still gets the facts, fresh-user review §15); the facts
#: follow in one sentence (the first of the answer: the status), not the whole answer again (review of main).
STILL_THE_SAME = "I've checked again and nothing has changed."
#: How policy's answer starts when the same handbook text is asked for again (rules do not change between turns).
AS_I_SAID = "As I mentioned:"
#: The same said in other words, when the customer asks once more right after :data:`STILL_THE_SAME`.
STILL_NO_CHANGE = "Still no change since then."


def _first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to a ``.``/``!``/``?`` followed by a space and a capital letter)."""
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", (text or "").strip(), maxsplit=1)[0]


def instead_of_repeat(agent: str, text: str, previous: Sequence[str], open_questions: Sequence[str] = (),
                      reread: bool = False) -> str | None:
    """What ``agent`` says instead of ``text`` when ``text`` repeats one of its ``previous`` answers in the thread, or
    None when it is new.

    Clarify asks its next unasked question (or, when none is left, says so). A specialist that re-read the records
    this turn (``reread``: a read-only business tool ran, e.g. a balance or status look-up) gives the facts again,
    said as unchanged in a few words (:data:`STILL_THE_SAME` + the first sentence of ``text``, its status line; asked
    once more right after that, :data:`STILL_NO_CHANGE` + the same sentence, and back). Otherwise a specialist says it
    has nothing new and what it still needs: the last of ``open_questions`` (the packet's, or the question of its
    previous answer), else how to go on.
    """
    if reread and agent != CLARIFY and previous:
        # asked again after the short form: say it once more in other words, never verbatim
        short, other = (f"{lead} {_first_sentence(text)}" for lead in (STILL_THE_SAME, STILL_NO_CHANGE))
        if same_answer(previous[-1], short):
            return other
        if same_answer(previous[-1], other):
            return short
    if not any(same_answer(text, p) for p in previous):
        return None
    if reread and agent == "policy":  # the handbook does not change between turns: said again, briefly
        return f"{AS_I_SAID} {_first_sentence(text)}"
    if reread and agent != CLARIFY:
        return f"{STILL_THE_SAME} {_first_sentence(text)}"
    if agent == CLARIFY:
        return clarify_question(previous) or ("I still can't tell which team can help. Please say in a few words "
                                              "what happened or what you want done.")
    need = next((q.strip() for q in reversed(open_questions) if q and q.strip()), None)
    if need:  # stated, not asked again: a question is never repeated in a thread
        return f"I have nothing new since my last answer. To go on I still need to know: {need.rstrip('?').strip()}."
    return ("I have nothing new since my last answer. To go on, tell me what you'd like done next — for example "
            "name the transaction, refund or transfer id, or ask about something else.")
