"""Money and time formats of the business store: integer minor units <-> text, and the store's timestamps.

Money is an integer ``amount_minor`` plus an ISO 4217 code. The minor-unit exponent of each currency comes from
the Unicode CLDR currency data shipped with babel (``babel.numbers.get_currency_precision``: 2 for GBP/EUR/USD,
0 for JPY/KRW, 3 for BHD/KWD). Texts are read and written in English (babel locale ``en``): ``.`` is the decimal
point and ``,`` groups thousands.

Timestamps are ISO 8601 UTC strings of one fixed shape, ``YYYY-MM-DDTHH:MM:SSZ``, so that string order is time
order (:func:`iso`, :func:`parse_iso`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache

from babel.numbers import (
    NumberFormatError,
    format_currency,
    format_decimal,
    get_currency_precision,
    get_currency_symbol,
    list_currencies,
    parse_decimal,
)

__all__ = ["money", "money_plain", "parse_money", "minor_exponent", "iso", "parse_iso"]

_LOCALE = "en"
#: Currency words people write after an amount (English), by ISO code. Source: this desk's customers write
#: "12 pounds" / "5 euros" / "3 dollars"; ISO codes and CLDR symbols are read as well (see parse_money).
_WORDS = {"pound": "GBP", "pounds": "GBP", "quid": "GBP", "sterling": "GBP", "euro": "EUR", "euros": "EUR",
          "dollar": "USD", "dollars": "USD", "yen": "JPY"}


def minor_exponent(currency: str) -> int:
    """ISO 4217 minor-unit exponent of ``currency`` (e.g. 2 for "GBP", 0 for "JPY", 3 for "BHD"), from babel's
    CLDR currency data; unknown codes get CLDR's default, 2."""
    return int(get_currency_precision(currency.upper()))


def _major(amount_minor: int, currency: str) -> Decimal:
    return Decimal(int(amount_minor)).scaleb(-minor_exponent(currency))


def _symbol(currency: str) -> str | None:
    """The CLDR English symbol of ``currency`` when it is a sign without letters ("£", "€", "$", "¥"), else
    None (CHF, A$, CA$: those are written as codes, so nobody mistakes A$ for $)."""
    symbol = get_currency_symbol(currency, locale=_LOCALE)
    return symbol if symbol != currency and not any(ch.isalpha() for ch in symbol) else None


def money(amount_minor: int, currency: str) -> str:
    """Format integer minor units for people (babel, locale ``en``, thousands grouped):
    ``money(450, "GBP") -> "£4.50"``, ``money(-1999, "USD") -> "-$19.99"``, ``money(500000, "GBP") ->
    "£5,000.00"``, ``money(1200, "JPY") -> "¥1,200"``; a currency whose English symbol has letters is written
    with its code after the amount: ``money(500, "CHF") -> "5.00 CHF"``."""
    currency = currency.upper()
    value = _major(amount_minor, currency)
    if _symbol(currency) is None:
        return f"{_grouped(value, currency)} {currency}"
    return format_currency(value, currency, format="¤#,##0.00", locale=_LOCALE, currency_digits=True)


def _grouped(value: Decimal, currency: str) -> str:
    exp = minor_exponent(currency)
    pattern = "#,##0" + ("." + "0" * exp if exp else "")
    return format_decimal(value, format=pattern, locale=_LOCALE, decimal_quantization=True)


def money_plain(amount_minor: int, currency: str) -> str:
    """Major units without grouping plus the ISO code, for facts and messages that are compared as text:
    ``money_plain(450, "gbp") -> "4.50 GBP"``, ``money_plain(500000, "GBP") -> "5000.00 GBP"``,
    ``money_plain(1200, "JPY") -> "1200 JPY"``."""
    currency = currency.upper()
    exp = minor_exponent(currency)
    return f"{_major(amount_minor, currency):.{exp}f} {currency}"


@lru_cache(maxsize=1)
def _money_patterns() -> tuple[re.Pattern[str], re.Pattern[str], dict[str, str]]:
    """(amount preceded by a symbol or code, amount followed by a code or word, symbol -> code)."""
    codes = sorted(list_currencies())
    owners: dict[str, set[str]] = {}
    for locale in (_LOCALE, "en_GB"):  # en_GB adds "US$"
        for code in codes:
            sym = get_currency_symbol(code, locale=locale)
            if sym not in (code, "¤"):
                owners.setdefault(sym, set()).add(code)
    # a sign English CLDR gives to one currency only ("$" is USD; other dollars are A$, CA$, ...)
    symbols = {sym: next(iter(cs)) for sym, cs in owners.items() if len(cs) == 1}
    number = r"(?<![\w.,])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)(?![\d,]*\d)"
    sym_alt = "|".join(re.escape(s) for s in sorted(symbols, key=len, reverse=True))
    code_alt = "|".join(codes)
    word_alt = "|".join(sorted(_WORDS, key=len, reverse=True))
    before = re.compile(rf"(?:(?<![A-Za-z])(?P<sym>{sym_alt})|\b(?P<code>{code_alt}))\s?{number}")
    after = re.compile(rf"{number}\s?(?:(?P<code>{code_alt})\b|(?i:(?P<word>{word_alt}))\b)")
    return before, after, symbols


def parse_money(text: str, default_currency: str = "GBP") -> tuple[int, str] | None:
    """The first amount of money in ``text`` as ``(amount_minor, currency)``, or None.

    Read (English, babel locale ``en``; thousands grouped with "," or not, "." before the decimals): a CLDR
    symbol or ISO code before the number ("£5,000" -> (500000, "GBP"), "€12" -> (1200, "EUR"), "USD 3"), or an
    ISO code or currency word after it ("5,000.00 GBP", "23.80 pounds" -> (2380, "GBP"), "12 euros", "300 yen").
    A text that is nothing but a number ("23.80") is in ``default_currency``; a bare number inside other words
    is not money ("card ending 4242" -> None). None also when the grouping is malformed ("5,00 GBP") or the
    number has more decimals than the currency's minor unit ("£4.505", "¥12.5")."""
    before, after, symbols = _money_patterns()
    found = [m for m in (before.search(text), after.search(text)) if m is not None]
    if found:
        m = min(found, key=lambda match: match.start())
        groups = m.groupdict()
        if groups.get("sym"):
            currency = symbols[groups["sym"]]
        elif groups.get("code"):
            currency = groups["code"]
        else:
            currency = _WORDS[groups["word"].lower()]
        return _to_minor(groups["num"], currency)
    bare = text.strip()
    if re.fullmatch(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?", bare):
        return _to_minor(bare, default_currency.upper())
    return None


def _to_minor(number: str, currency: str) -> tuple[int, str] | None:
    try:
        value = parse_decimal(number, locale=_LOCALE, strict=True)
    except NumberFormatError:
        return None
    minor = value.scaleb(minor_exponent(currency))
    if minor != minor.to_integral_value():
        return None
    return int(minor), currency


def iso(dt: datetime) -> str:
    """``datetime`` -> the store's timestamp shape ``YYYY-MM-DDTHH:MM:SSZ`` (UTC; naive = UTC)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    """The store's timestamp string -> aware UTC ``datetime`` (also accepts ``+00:00`` offsets)."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.astimezone(UTC)
