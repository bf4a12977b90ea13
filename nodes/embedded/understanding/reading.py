"""One reading of a customer's message by the learned models: its language (:mod:`.language`) and its dialogue act
(:mod:`.acts`), read once per text and kept (the entry node, the agents and the paused dialogue ask about the same
message several times in one turn).

What the desk derives from it:

- :func:`reports_foreign_loss`: a lost or stolen card reported in Spanish, French, German, Italian or Portuguese
  (the act ``card_lost`` in a message identified as one of those): frozen like an English report (safety first does
  not depend on English). The act must be the most probable one: on the held-aside rows of the examples every such
  report is, and 2 of 31 other non-English messages (both Portuguese, naming the card) are too — a freeze is
  undone by unfreezing, a loss left unfrozen is not.
- :func:`other_language`: any other message in one of those languages gets the honest English answer
  (``language.language_answer``).
- :func:`wants_person`: a request for a person in any wording: the act ``person`` at least :data:`PERSON_SURE` —
  never a question whether a person is needed.
- :func:`is_frustrated`: the act ``frustration`` at least :data:`FRUSTRATION_SURE`.
- :func:`asks_before_acting`: a question about an action ("should I freeze my card?"): answered, not acted on.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from nodes.embedded.understanding.acts import ActReading, load_acts
from nodes.embedded.understanding.language import LanguageReading, identify

__all__ = ["Understanding", "understand", "reports_foreign_loss", "other_language", "wants_person", "is_frustrated",
           "asks_before_acting", "PERSON_SURE", "FRUSTRATION_SURE", "QUESTION_SURE"]

#: The least probability of the act ``person`` for a request for a person: on the wordings the tests check (none of
#: them a training row), requests score 0.80-0.96; questions whether a person is needed, "are you a real person or a
#: bot?" and "talk to me about fees" 0.03-0.48.
PERSON_SURE = 0.65
#: The least probability of ``frustration`` ("this is the third time im asking!!!" 0.9+).
FRUSTRATION_SURE = 0.6
#: The least probability of ``question`` for a question about an action that must not be taken.
QUESTION_SURE = 0.6


@dataclass(frozen=True)
class Understanding:
    """The learned reading of one message: its language and its act."""

    language: LanguageReading
    act: ActReading


@lru_cache(maxsize=512)
def understand(text: str) -> Understanding:
    """The reading of ``text`` (kept for the 512 latest texts: a reading depends on the text alone).

    Raises:
        ConfigError: a shipped model file is missing or unreadable.
    """
    return Understanding(identify(text), load_acts().read(text))


def reports_foreign_loss(text: str) -> bool:
    """Does ``text``, written in another language than English, report a lost or stolen card?"""
    if not text or not text.strip():
        return False
    u = understand(text)
    return not u.language.english and u.act.act == "card_lost"


def other_language(text: str) -> LanguageReading | None:
    """The language of ``text`` when it is not English and reports no lost card, else None."""
    if not text or not text.strip():
        return None
    u = understand(text)
    return u.language if not u.language.english and u.act.act != "card_lost" else None


def wants_person(text: str) -> bool:
    """Does the customer ask to deal with a person, in any wording ("speak to a human please", "just give me an agent",
    "can I talk to someone real")? Such a message goes to fallback, which hands the thread to the team. A question
    whether a person is needed ("do I have to talk to someone to close my account?") is no such request: it goes to
    the specialist whose process it asks about."""
    if not text or not text.strip():
        return False
    act = understand(text).act
    return act.act == "person" and act.confidence >= PERSON_SURE


def is_frustrated(text: str) -> bool:
    """Does the message show frustration or impatience?"""
    if not text or not text.strip():
        return False
    act = understand(text).act
    return act.act == "frustration" and act.confidence >= FRUSTRATION_SURE


def asks_before_acting(text: str) -> bool:
    """Is the message a question ("should i freeze my card just in case?"), not a request to act?"""
    if not text or not text.strip():
        return False
    act = understand(text).act
    return act.act == "question" and act.confidence >= QUESTION_SURE
