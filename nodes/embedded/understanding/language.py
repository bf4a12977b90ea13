"""Which language a customer's message is written in: English, or one of the five the desk recognises but does not speak.

Identification is ``py3langid`` (PyPI, BSD licence, a maintained fork of ``langid.py``: a naive Bayes model over byte
n-grams, trained on 97 languages, shipped inside the wheel, so nothing is downloaded), restricted to
:data:`LANGUAGES` and with normalised probabilities. Loading its model takes about a second and some 40 MB, so it is
loaded once, on the first message that needs it (:func:`identify` returns English at once for a message made of
words the desk knows).

Short messages are hard for any n-gram model ("refund teh uber ride" scores German 0.67, "hlep" German 0.69), so a
message is only taken for another language when both hold:

1. the model gives that language at least :data:`MIN_CONFIDENCE`; and
2. fewer than :data:`MAX_KNOWN_SHARE` of the message's words (of three letters or more) are English words the desk
   knows: the unigrams of the shipped router's vocabulary (learned from English banking requests;
   ``nodes.router.default_router``), so English typos among known words ("refund teh uber ride": refund, uber, ride)
   stay English.

A message with a single word of three letters or more ("hola", "ciao", "hlep") is too short for either signal and
is read as English (the desk answers a greeting in English anyway).
"""

from __future__ import annotations

import threading
import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["LANGUAGES", "LANGUAGE_NAMES", "MIN_CONFIDENCE", "MAX_KNOWN_SHARE", "LanguageReading", "identify",
           "english_words", "language_answer"]

#: ISO 639-1 codes the identification chooses among: English, and the five languages a customer of the demo bank
#: may write in (Spanish, French, German, Italian, Portuguese).
LANGUAGES: tuple[str, ...] = ("en", "es", "fr", "de", "it", "pt")
#: The languages' names in English, for the desk's answer.
LANGUAGE_NAMES: dict[str, str] = {"en": "English", "es": "Spanish", "fr": "French", "de": "German",
                                  "it": "Italian", "pt": "Portuguese"}
#: The least probability (py3langid's normalised probability over :data:`LANGUAGES`) for another language. Chosen on
#: the project's own examples (``nodes/data/dialogue_acts.csv``): the foreign loss reports score 0.80-1.0; English
#: typos that the vocabulary check does not catch score below it ("helo" German 0.27, "thx" English).
MIN_CONFIDENCE = 0.6
#: A message is English when at least this share of its words are known English words.
MAX_KNOWN_SHARE = 0.5
#: Fewer words than this, none of them known: too little to tell (read as English, see the module docstring).
_MIN_WORDS = 2

_lock = threading.Lock()
_identifier: Any = None
_vocabulary: frozenset[str] | None = None


@dataclass(frozen=True)
class LanguageReading:
    """``code``: one of :data:`LANGUAGES`; ``confidence``: the model's probability of it in [0, 1] (1.0 when the
    vocabulary alone decided English); ``known_share``: the share of the message's words that are known English
    words."""

    code: str
    confidence: float
    known_share: float

    @property
    def english(self) -> bool:
        """Is the message English (the language the desk speaks)?"""
        return self.code == "en"

    @property
    def name(self) -> str:
        """The language's English name ("Spanish")."""
        return LANGUAGE_NAMES[self.code]


def _words(text: str) -> list[str]:
    """Lower-cased letter runs of three letters or more, accents stripped (the router's vocabulary has none). Shorter
    words are left out: "me", "la", "de", "mi" are words of several of these languages (and English "me" and the
    router's "la" would make "me robaron la tarjeta" half English)."""
    folded = unicodedata.normalize("NFKD", text.lower())
    plain = "".join(c for c in folded if not unicodedata.combining(c))
    words, cur = [], []
    for c in plain + " ":
        if c.isalpha():
            cur.append(c)
        else:
            if len(cur) >= 3:
                words.append("".join(cur))
            cur = []
    return words


def english_words() -> frozenset[str]:
    """The English words the desk knows: the one-word terms of the shipped router's word vocabulary, read once.

    Raises:
        ConfigError: the shipped router is missing or unreadable.
    """
    global _vocabulary
    if _vocabulary is None:
        from nodes.router import default_router

        _vocabulary = default_router().words()
    return _vocabulary


def _load() -> Any:
    """py3langid's identifier over :data:`LANGUAGES` with normalised probabilities, loaded once per process."""
    global _identifier
    with _lock:
        if _identifier is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            ident = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
            ident.set_languages(list(LANGUAGES))
            _identifier = ident
        return _identifier


def identify(text: str, known: Collection[str] | None = None) -> LanguageReading:
    """The language of ``text`` (see the module docstring for the two conditions).

    Args:
        text: the customer's message.
        known: English words the desk knows; default :func:`english_words`.
    """
    words = _words(text or "")
    vocabulary = english_words() if known is None else known
    share = sum(w in vocabulary for w in words) / len(words) if words else 1.0
    if share >= MAX_KNOWN_SHARE or len(words) < _MIN_WORDS:
        return LanguageReading("en", 1.0, share)
    code, prob = _load().classify(text)
    if code != "en" and float(prob) >= MIN_CONFIDENCE:
        return LanguageReading(str(code), float(prob), share)
    return LanguageReading("en", float(prob) if code == "en" else 1.0 - float(prob), share)


def language_answer(reading: LanguageReading) -> str:
    """The desk's honest answer to a message in another language: in English, naming both languages (the out_of_scope
    node's ``nodes.out_of_scope.language_text``)."""
    from nodes.out_of_scope import language_text

    return language_text(reading.name)
