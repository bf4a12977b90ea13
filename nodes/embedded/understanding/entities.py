"""Which of the customer's own records a message names without an id: cards by descriptor, payments by merchant,
amount and date.

Every function takes the acting customer's records as input (``BusinessStore.list_cards(customer_id)``,
``list_transactions(customer_id)``, or the facts a tool read for that customer) and returns ids among them: nothing
here reads a store, so a record outside the customer's scope can never be named by a resolution; an id a customer
types is still checked by the tools and ``policies.authz`` as before.

- Cards (:func:`resolve_cards`): "the virtual one", "the physical card", "ending 88" / "ends in 8899" (the last
  four digits, or two or three of them at their end or start), "my other card" / "the other one" (every card but
  the one the conversation is about).
- Payments (:func:`resolve_payments`): merchant names matched fuzzily word by word (``rapidfuzz``'s normalised
  Indel similarity, :data:`MERCHANT_MIN_SCORE`: "uber", "tesco", "amazn", "blue bottle"), amounts
  (:func:`parse_amount`: "£12", "12 quid", "€19.99", "12.30"; a whole amount also names the pounds of a payment with
  pence, "£12" for £12.30, as people round), and relative dates (:func:`parse_day`: "today", "yesterday", "2 days
  ago", "last tuesday", "on the 3rd").
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Protocol

from rapidfuzz import fuzz

__all__ = ["CardLike", "PaymentLike", "MERCHANT_MIN_SCORE", "Amount", "parse_amount", "parse_day", "resolve_cards",
           "resolve_payments", "merchant_matches", "describes_payment"]

#: The least ``rapidfuzz.fuzz.ratio`` (0-100) between a word of the message and a word of a merchant's name: 80
#: keeps one typo in a five-letter word ("amazn"/"amazon" 91, "tesko"/"tesco" 80) and refuses unrelated short words
#: ("bar"/"barclays" 55, "uber"/"under" 67).
MERCHANT_MIN_SCORE = 80.0
#: Words of a merchant's name that say what kind of payment it was, not who was paid ("Top-up from Barclays debit
#: card", "ATM withdrawal fee"): a message naming them names no merchant.
_GENERIC = frozenset({"the", "from", "and", "card", "debit", "credit", "top", "up", "payment", "fee", "of", "to",
                      "for", "at", "in"})
_CURRENCY_WORDS = {"£": "GBP", "quid": "GBP", "pound": "GBP", "pounds": "GBP", "gbp": "GBP", "€": "EUR",
                   "euro": "EUR", "euros": "EUR", "eur": "EUR", "$": "USD", "dollar": "USD", "dollars": "USD",
                   "usd": "USD"}
#: Words of a money-back request that say nothing about which payment it is ("can I get my money back please?").
_REQUEST_WORDS = frozenset({
    "refund", "refunds", "refunded", "money", "back", "want", "would", "like", "please", "get", "can", "could", "you",
    "need", "return", "reimburse", "the", "for", "and", "that", "this", "payment", "charge", "transaction",
    "purchase", "pay", "paid", "request", "give", "now", "just", "some", "was", "its", "mine", "full", "one", "all",
    "have", "how", "what", "are", "did", "not", "don", "with", "from", "made", "make", "asap", "thanks", "thank",
    "hi", "hello", "hey", "there", "yes", "yeah", "ok", "okay", "sure", "also", "too", "then", "again", "wrong",
    # a question about a refund's status, or a payment named by no more than its kind, describes no payment
    "where", "when", "why", "which", "status", "order", "item", "yet", "still", "has", "been", "will", "happened"})
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
#: A number with an optional currency sign before it and an optional currency word after it.
_AMOUNT = re.compile(r"([£€$])?\s?(\d+(?:[.,]\d{1,2})?)\s?(quid|pounds?|gbp|euros?|eur|dollars?|usd)?\b", re.I)
_ORDINAL = re.compile(r"\bthe (\d{1,2})(?:st|nd|rd|th)\b")


class CardLike(Protocol):
    """What resolution reads of a card (``checkpoints.business.Card`` has it)."""

    id: str
    last4: str
    kind: str
    status: str


class PaymentLike(Protocol):
    """What resolution reads of a transaction (``checkpoints.business.Transaction`` has it)."""

    id: str
    merchant: str
    amount_minor: int
    currency: str
    created_at: str


@dataclass(frozen=True)
class Amount:
    """An amount a customer wrote: ``minor`` units (pence), ``currency`` (ISO code or "" when none was written),
    ``whole``: written without pence ("£12")."""

    minor: int
    currency: str
    whole: bool

    def names(self, amount_minor: int, currency: str) -> bool:
        """Does this amount name a payment of ``amount_minor`` in ``currency``?"""
        if self.currency and currency and self.currency != currency:
            return False
        return amount_minor == self.minor or (self.whole and amount_minor // 100 == self.minor // 100)


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[^\w]+", text.lower()) if w]


def parse_amount(text: str) -> Amount | None:
    """The first amount with a currency sign or word in ``text`` ("£12", "12 quid", "€19.99"); a bare number only
    when it has pence ("12.30"), so "the 3rd" or "ending 88" are no amounts."""
    for m in _AMOUNT.finditer(text or ""):
        sign, number, word = m.group(1), m.group(2), (m.group(3) or "").lower()
        if not sign and not word and not re.search(r"[.,]\d\d$", number):
            continue
        value = number.replace(",", ".")
        pounds, _, pence = value.partition(".")
        minor = int(pounds) * 100 + (int(pence.ljust(2, "0")) if pence else 0)
        return Amount(minor, _CURRENCY_WORDS.get(sign or word, ""), not pence)
    return None


def parse_day(text: str, today: date) -> date | None:
    """The day a message names relative to ``today``: "today", "yesterday", "N days ago", "last <weekday>" /
    "on <weekday>" (the latest such day before today), "on the 3rd" (this month's, or last month's when that is
    still to come); None when it names none."""
    words = _words(text)
    if "today" in words or "tonight" in words:
        return today
    if "yesterday" in words:
        return today - timedelta(days=1)
    for i, w in enumerate(words[:-2]):
        if w.isdigit() and words[i + 1] in ("day", "days") and words[i + 2] == "ago":
            return today - timedelta(days=int(w))
    for w in words:
        if w in _WEEKDAYS:
            back = (today.weekday() - _WEEKDAYS.index(w)) % 7 or 7
            return today - timedelta(days=back)
    m = _ORDINAL.search((text or "").lower())
    if m and 1 <= int(m.group(1)) <= 31:
        return _day_of_month(int(m.group(1)), today)
    return None


def _day_of_month(day: int, today: date) -> date | None:
    """The latest date on or before ``today`` whose day of the month is ``day`` (None when no such date exists in
    the two months tried)."""
    year, month = today.year, today.month
    for _ in range(2):
        try:
            d = date(year, month, day)
        except ValueError:
            d = None
        if d is not None and d <= today:
            return d
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return None


def resolve_cards(text: str, cards: Sequence[CardLike], current: str | None = None) -> tuple[str, ...]:
    """The ids of the cards among ``cards`` the message describes, in ``cards``' order; () when it describes none.

    Args:
        text: the customer's message.
        cards: the acting customer's cards.
        current: the card the conversation is about (the one just frozen or named), for "the other one".
    """
    words = _words(text)
    chosen = list(cards)
    described = False
    digits = [w for w in words if w.isdigit() and 2 <= len(w) <= 4]
    if digits:
        described = True
        chosen = [c for c in chosen if any(_digits_name(d, c.last4) for d in digits)]
    kinds = {"virtual", "physical", "plastic"} & set(words)
    if kinds:
        described = True
        kind = "virtual" if "virtual" in kinds else "physical"
        chosen = [c for c in chosen if c.kind == kind]
    if "other" in words and current is not None:
        described = True
        chosen = _others(chosen, current)
    return tuple(c.id for c in chosen) if described else ()


def _others(cards: list[CardLike], current: str) -> list[CardLike]:
    """The cards but ``current``, the live ones (not blocked) when there are any."""
    others = [c for c in cards if c.id != current]
    return [c for c in others if c.status != "blocked"] or others


def _digits_name(digits: str, last4: str) -> bool:
    """Do the digits a customer wrote name a card whose last four are ``last4``? All four must be equal; two or three
    may be its end or its start (people say "ending 88" of a card ending 8899: the start of what the desk shows)."""
    return digits == last4 if len(digits) == 4 else last4.endswith(digits) or last4.startswith(digits)


def merchant_matches(text: str, merchant: str) -> float:
    """The best ``fuzz.ratio`` (0-100) between a word of ``text`` and a distinctive word of ``merchant`` (its words
    but the generic ones, :data:`_GENERIC`); 0 when the merchant has none."""
    names = [w for w in _words(merchant) if w not in _GENERIC and len(w) >= 3 and not w.isdigit()]
    said = [w for w in _words(text) if len(w) >= 3]
    return max((fuzz.ratio(a, b) for a in said for b in names), default=0.0)


def _priced(text: str) -> bool:
    """An amount written as money: with a currency sign or word, or with pence ("£12", "12 quid", "4.50"); a bare
    whole number ("#2", "3 times") is no amount."""
    return any(m.group(1) or m.group(3) or re.search(r"[.,]\d", m.group(2)) for m in _AMOUNT.finditer(text))


def describes_payment(text: str) -> bool:
    """Does a money-back request say which payment it means without an id: an amount, a day, or words beyond those
    of the request itself ("refund the uber ride": uber, ride; "I want my money back": none)? Then the payment is
    looked for among the customer's transactions (billing's list) before anyone asks for its id."""
    if _priced(text) or parse_day(text, date.today()) is not None:
        return True
    return any(len(w) >= 3 and not w.isdigit() and w not in _REQUEST_WORDS and w not in ("i", "my", "me")
               for w in _words(text))


def _day_of(created_at: str) -> date | None:
    try:
        return datetime.fromisoformat(created_at.replace("Z", "+00:00")).date()
    except ValueError:
        return None


def resolve_payments(text: str, payments: Iterable[PaymentLike], today: date) -> tuple[str, ...]:
    """The ids of the payments among ``payments`` the message names by merchant, amount and/or day (every named
    constraint must hold), best merchant match first; () when it names no merchant, amount or day, or nothing fits.

    Args:
        text: the customer's message.
        payments: the acting customer's transactions.
        today: the store's today (relative days count from it).
    """
    pool = list(payments)
    amount, day = parse_amount(text), parse_day(text, today)
    scored = [(merchant_matches(text, p.merchant), p) for p in pool]
    by_name = [(s, p) for s, p in scored if s >= MERCHANT_MIN_SCORE]
    if not by_name and amount is None and day is None:
        return ()
    chosen = by_name or [(0.0, p) for p in pool]
    if amount is not None:
        chosen = [(s, p) for s, p in chosen if amount.names(p.amount_minor, p.currency)]
    if day is not None:
        chosen = [(s, p) for s, p in chosen if _day_of(p.created_at) == day]
    chosen.sort(key=lambda sp: -sp[0])
    return tuple(p.id for _, p in chosen)
