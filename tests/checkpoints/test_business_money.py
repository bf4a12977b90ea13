"""Tests of checkpoints/business/money.py: formatting minor units, parsing amounts people write, timestamps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from checkpoints.business import iso, money, money_plain, parse_iso, parse_money
from checkpoints.business.money import minor_exponent

REF = datetime(2025, 3, 14, 12, 0, tzinfo=UTC)


def test_money_formats_minor_units() -> None:
    assert money(450, "GBP") == "£4.50"
    assert money(5, "EUR") == "€0.05"
    assert money(-1999, "USD") == "-$19.99"
    assert money(500, "CHF") == "5.00 CHF"
    assert money_plain(450, "gbp") == "4.50 GBP"


def test_money_groups_thousands_and_uses_cldr_exponents() -> None:
    assert money(500000, "GBP") == "£5,000.00"
    assert money(123456789, "CHF") == "1,234,567.89 CHF"
    assert money(1200, "JPY") == "¥1,200"  # JPY has no minor unit (CLDR)
    assert money(1234, "BHD") == "1.234 BHD"  # BHD has three
    assert money(2000, "AUD") == "20.00 AUD"  # "A$" has letters: written as a code
    assert money_plain(500000, "GBP") == "5000.00 GBP"  # plain: no grouping, compared as text
    assert money_plain(1200, "jpy") == "1200 JPY"
    assert (minor_exponent("GBP"), minor_exponent("JPY"), minor_exponent("KWD")) == (2, 0, 3)


@pytest.mark.parametrize(("text", "expected"), [
    ("£5,000", (500000, "GBP")),
    ("£5,000.00", (500000, "GBP")),
    ("5,000.00 GBP", (500000, "GBP")),
    ("£23.80", (2380, "GBP")),
    ("23.80 pounds", (2380, "GBP")),
    ("I was charged £4.50 twice", (450, "GBP")),
    ("€12", (1200, "EUR")),
    ("12 euros back please", (1200, "EUR")),
    ("$19.99", (1999, "USD")),
    ("US$5", (500, "USD")),
    ("A$ 20", (2000, "AUD")),
    ("USD 3", (300, "USD")),
    ("¥1,200", (1200, "JPY")),
    ("300 yen", (300, "JPY")),
    ("BHD 1.234", (1234, "BHD")),
    ("first £4.50 then 9 EUR", (450, "GBP")),
    ("12.5 Pounds", (1250, "GBP")),
    ("23.80", (2380, "GBP")),  # a bare number is in the default currency
    (" 1,000 ", (100000, "GBP")),
])
def test_parse_money(text: str, expected: tuple[int, str]) -> None:
    assert parse_money(text) == expected


@pytest.mark.parametrize("text", [
    "card ending 4242",  # a bare number inside words is not money
    "£4.505",  # more decimals than pence
    "¥12.5",  # yen have no minor unit
    "5,00 GBP",  # malformed grouping
    "£5,0000",
    "no amount here",
    "",
])
def test_parse_money_refuses(text: str) -> None:
    assert parse_money(text) is None


def test_parse_money_default_currency_and_round_trip() -> None:
    assert parse_money("23.80", default_currency="eur") == (2380, "EUR")
    assert parse_money("1200", default_currency="JPY") == (1200, "JPY")
    for minor, currency in [(450, "GBP"), (500000, "GBP"), (1999, "USD"), (1200, "JPY"), (123456789, "CHF")]:
        assert parse_money(money(minor, currency)) == (minor, currency)
        assert parse_money(money_plain(minor, currency)) == (minor, currency)


def test_iso_round_trip_and_order() -> None:
    a, b = iso(REF), iso(REF + timedelta(minutes=1))
    assert a == "2025-03-14T12:00:00Z"
    assert parse_iso(a) == REF
    assert parse_iso("2025-03-14T12:00:00+00:00") == REF
    assert iso(datetime(2025, 3, 14, 12, 0)) == a  # naive = UTC
    assert a < b
