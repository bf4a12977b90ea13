"""An answer never repeats itself: what the desk says instead of its previous answer word for word.

Pure functions, no I/O. Texts are this module's own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from policies.edges import CLARIFY

__all__ = ["CLARIFY_QUESTIONS", "STILL_THE_SAME", "STILL_NO_CHANGE", "CHECKED_TIMES", "AS_I_SAID", "same_answer", "answer_key",
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


def answer_key(text: str) -> str:
    """What :func:`same_answer` compares: the text with case and runs of whitespace ignored ("" for no text)."""
    return _norm(text)


def same_answer(a: str, b: str) -> bool:
    """Are two answers the same text (case and whitespace ignored)?"""
    return bool(_norm(a)) and _norm(a) == _norm(b)


def clarify_question(asked: Sequence[str]) -> str | None:
    """The first of :data:`CLARIFY_QUESTIONS` not among ``asked`` (earlier answers of the thread), or None."""
    seen = {_norm(a) for a in asked}
    return next((q for q in CLARIFY_QUESTIONS if _norm(q) not in seen), None)


#: How an answer re-read from the records starts when the facts are the same as in the previous answer (never
#: the same words twice; a re-asked status question still gets the facts); the facts
#: follow in one sentence (the first of the answer: the status), not the whole answer again.
STILL_THE_SAME = "I've checked again and nothing has changed."
#: How policy's answer starts when the same policy text is asked for again (rules do not change between turns).
AS_I_SAID = "As I mentioned:"
#: The same said in other words, when the customer asks once more right after :data:`STILL_THE_SAME`.
STILL_NO_CHANGE = "Still no change since then."


#: How a re-read answer starts from the fourth time the same facts are asked for (``{n}``: how many times the desk has
#: now looked them up in this run of questions).
CHECKED_TIMES = "Still unchanged since I last told you (I've now checked {n} times)."
_CHECKED_TIMES = re.compile(r"^Still unchanged since I last told you \(I've now checked (\d+) times\)\.\s+(.*)$", re.S)


#: When a look-up was read ("as of 1 Dec 05:15 UTC"): a re-read a minute later has the same facts.
_READ_AT = re.compile(r"\s*\bas of \d{1,2} [A-Z][a-z]{2}(?: \d{4})?,? \d{1,2}:\d{2}(?::\d{2})?(?: UTC)?", re.I)


def _same_facts(a: str, b: str) -> bool:
    """:func:`same_answer` with the time a look-up was read left out (a balance read at 05:15 and again at 05:16 with
    the same amounts is unchanged)."""
    return same_answer(_READ_AT.sub("", a or ""), _READ_AT.sub("", b or ""))


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
        # asked again after the short form: say it once more in other words, never verbatim; from the fourth time on,
        # how often it was checked (no flip-flop between two phrasings)
        first = _first_sentence(text)
        short, other = (f"{lead} {first}" for lead in (STILL_THE_SAME, STILL_NO_CHANGE))
        if _same_facts(previous[-1], short):
            return other
        counted = _CHECKED_TIMES.match(previous[-1] or "")
        if _same_facts(previous[-1], other) or (counted and _same_facts(counted.group(2), first)):
            return f"{CHECKED_TIMES.format(n=int(counted.group(1)) + 1 if counted else 4)} {first}"
    same = _same_facts if reread and agent != CLARIFY else same_answer
    if not any(same(text, p) for p in previous):
        return None
    if reread and agent == "policy":  # the policy text does not change between turns: said again, briefly
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
