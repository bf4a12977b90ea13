"""What an operator sees of a customer's words by default (README "Identity and authorization").

Transcripts and traces shown to an operator hide card numbers (all but the last four digits), e-mail addresses and
phone numbers; ``--reveal`` shows them and is recorded. Pure functions, no I/O.

Patterns (deliberately conservative: ids such as ``tx_1001``, amounts such as ``£1,000.00`` and ISO dates are left
alone):

* card number: 13 to 19 digits, optionally grouped by single spaces or hyphens, that pass the Luhn check (ISO/IEC
  7812-1) -> ``•••• 4242``;
* e-mail: ``local@domain.tld`` (RFC 5322's common form) -> ``<e-mail>``;
* phone: ``+`` and 8 to 15 digits (E.164), or a national number starting with 0 with 10 or 11 digits, grouped by
  spaces, hyphens, dots or parentheses -> ``<phone>``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["redact", "redact_value", "luhn_ok"]

# not inside a longer number: no word character or "." "," before it, and after it no word character and no "." or
# "," followed by a digit (a decimal or thousands part); punctuation that ends a sentence ("…1111, thanks") is fine
_CARD = re.compile(r"(?<![\w.,])(?:\d[ -]?){12,18}\d(?!\w|[.,]\d)")
_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
_PHONE = re.compile(r"(?<![\w+])(?:\+\d[\d ().-]{6,20}\d|\(?0\d[\d ().-]{7,15}\d)(?![\w])")


def luhn_ok(digits: str) -> bool:
    """The Luhn checksum of a digit string (card numbers, ISO/IEC 7812-1)."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card(match: re.Match[str]) -> str:
    digits = re.sub(r"\D", "", match.group(0))
    if not 13 <= len(digits) <= 19 or not luhn_ok(digits):
        return match.group(0)
    return f"•••• {digits[-4:]}"


def _phone(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = re.sub(r"\D", "", text)
    if text.startswith("+"):
        return "<phone>" if 8 <= len(digits) <= 15 else text
    return "<phone>" if 10 <= len(digits) <= 11 else text


def redact(text: str) -> str:
    """``text`` with card numbers (last four kept), e-mail addresses and phone numbers hidden."""
    if not text:
        return text
    out = _CARD.sub(_card, text)
    out = _EMAIL.sub("<e-mail>", out)
    return _PHONE.sub(_phone, out)


def redact_value(value: Any) -> Any:
    """:func:`redact` applied to every string inside ``value`` (dicts, lists, tuples; other values unchanged)."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        return type(value)(redact_value(v) for v in value) if isinstance(value, tuple) else [redact_value(v) for v in value]
    return value
