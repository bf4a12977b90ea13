"""The embedded desk's understanding: language identification, dialogue acts learned from examples, and entity
resolution against the customer's own records (``nodes.embedded.understanding``).

No test compares probabilities beyond labels and margins: BLAS sums differ between processors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import numpy as np
import pytest

from graph.contracts.errors import ConfigError
from nodes.embedded.understanding import acts as acts_mod
from nodes.embedded.understanding.acts import ACTS, DialogueActs, load_acts, read_examples
from nodes.embedded.understanding.entities import (
    merchant_matches,
    parse_amount,
    parse_day,
    resolve_cards,
    resolve_payments,
)
from nodes.embedded.understanding.language import identify, language_answer


# ---------------------------------------------------------------- language
@pytest.mark.parametrize(("text", "code"), [
    ("perdí mi tarjeta", "es"),
    ("me robaron la tarjeta ayer", "es"),
    ("j'ai perdu ma carte", "fr"),
    ("ich habe meine Karte verloren", "de"),
    ("ho perso la mia carta", "it"),
    ("roubaram o meu cartão", "pt"),
    ("quel est mon solde ?", "fr"),
])
def test_other_languages_are_identified(text, code):
    reading = identify(text)
    assert reading.code == code and not reading.english
    assert reading.confidence >= 0.6


@pytest.mark.parametrize("text", ["i lost my card", "refund teh uber ride", "hlep", "whats my balnce", "thx",
                                  "no, the other one", "cancle my refnud pls", "sorry - what's my balance?", "helo",
                                  "hola"])
def test_english_and_english_typos_stay_english(text):
    assert identify(text).english


def test_the_vocabulary_check_decides_before_the_model():
    """A message made of known words is English whatever the model says; with an empty vocabulary the model speaks."""
    assert identify("ma carte", known={"ma", "carte"}).english
    assert identify("j'ai perdu ma carte", known=set()).code == "fr"


def test_language_answer_is_english_and_names_both_languages():
    text = language_answer(identify("ich habe eine Frage zu meinem Konto"))
    assert "German" in text and "English" in text


# ---------------------------------------------------------------- dialogue acts
@pytest.mark.parametrize(("text", "act"), [
    ("no, the other card, the virtual one", "correction"),
    ("and when will I get it?", "back_reference"),
    ("get me a human", "person"),
    ("just give me an agent", "person"),
    ("can I talk to someone real", "person"),
    ("this is the third time im asking!!!", "frustration"),
    ("should i freeze my card just in case?", "question"),
    ("freeze my card", "request"),
    ("yes please", "yes"),
    ("no thanks", "no"),
    ("thank you so much", "thanks"),
    ("bye", "bye"),
    ("help", "help"),
    ("perdí mi tarjeta", "card_lost"),
    ("on m'a volé ma carte", "card_lost"),
    ("meine Karte wurde gestohlen", "card_lost"),
])
def test_clear_cases(text, act):
    assert load_acts().read(text).act == act


def test_held_aside_examples_are_mostly_right():
    """The ``held`` rows were never fitted on: at least 85% right (0.935 when the file was built), with a margin."""
    texts, gold = read_examples(split="held")
    assert len(texts) >= 80
    got = [ACTS[i] for i in load_acts().proba(texts).argmax(axis=1)]
    assert sum(g == a for g, a in zip(got, gold)) / len(gold) >= 0.85


def test_every_foreign_loss_report_held_aside_is_read_as_one():
    texts, gold = read_examples(split="held")
    lost = [t for t, a in zip(texts, gold) if a == "card_lost" and not identify(t).english]
    assert len(lost) >= 6
    assert [t for t in lost if load_acts().read(t).act != "card_lost"] == []


def test_probabilities_are_a_distribution():
    p = load_acts().proba(["freeze my card", "", "?"])
    assert p.shape == (3, len(ACTS))
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-6) and (p >= 0).all()


def test_examples_name_only_known_acts_and_cover_each(tmp_path):
    texts, gold = read_examples()
    assert set(gold) == set(ACTS) and len(texts) == len(set(texts))
    bad = tmp_path / "bad.csv"
    bad.write_text("text,act,split\nhello,greeting,train\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown acts"):
        read_examples(bad)


@pytest.mark.slow
def test_the_shipped_file_is_what_build_writes(tmp_path):
    """Refitting from the examples gives the same labels as the shipped files on every example (labels only: the
    fit's floating point differs between processors)."""
    rc = acts_mod._main(["build", "--out", str(tmp_path)])
    assert rc == 0
    fresh = DialogueActs.load(tmp_path / acts_mod.acts_path().name, tmp_path / acts_mod.text_model_path().name)
    texts = read_examples()[0] + read_examples(split="held")[0]
    shipped, refit = load_acts().proba(texts), fresh.proba(texts)
    sure = shipped.max(axis=1) >= 0.5  # near-ties may flip between processors
    assert (shipped.argmax(axis=1) == refit.argmax(axis=1))[sure].all()


def test_a_damaged_file_is_one_config_error(tmp_path):
    bad = tmp_path / "acts.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="make acts"):
        DialogueActs.load(bad, acts_mod.text_model_path())


# ---------------------------------------------------------------- entities
@dataclass(frozen=True)
class _Card:
    id: str
    last4: str
    kind: str
    status: str = "active"


@dataclass(frozen=True)
class _Tx:
    id: str
    merchant: str
    amount_minor: int
    currency: str
    created_at: str


CARDS = [_Card("c_phys", "4242", "physical"), _Card("c_virt", "8899", "virtual"),
         _Card("c_old", "1881", "physical", "blocked")]
TODAY = date(2026, 12, 8)  # a Tuesday
TXS = [_Tx("tx_1", "Tesco", 2380, "GBP", "2026-11-18T10:00:00Z"),
       _Tx("tx_2", "Uber", 1230, "GBP", "2026-12-08T07:00:00Z"),
       _Tx("tx_3", "Blue Bottle Coffee", 450, "GBP", "2026-12-07T08:12:00Z"),
       _Tx("tx_4", "Amazon", 5999, "GBP", "2026-11-28T12:00:00Z"),
       _Tx("tx_5", "Top-up from Barclays debit card", 50000, "GBP", "2026-11-29T09:00:00Z"),
       _Tx("tx_6", "Steam", 1999, "EUR", "2026-12-01T09:00:00Z")]


@pytest.mark.parametrize(("text", "current", "expected"), [
    ("the virtual one", None, ("c_virt",)),
    ("freeze the physical card", None, ("c_phys", "c_old")),
    ("the card ending 88", None, ("c_virt",)),
    ("ends in 4242", None, ("c_phys",)),
    ("no, my other card", "c_phys", ("c_virt",)),
    ("no, the other card, the virtual one", "c_phys", ("c_virt",)),
    ("the other one", "c_virt", ("c_phys",)),
    ("freeze my card", None, ()),
])
def test_cards_by_descriptor(text, current, expected):
    assert resolve_cards(text, CARDS, current) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("refund the uber ride", ("tx_2",)),
    ("a Tesco payment I don't recognise", ("tx_1",)),
    ("the amazn order", ("tx_4",)),
    ("yesterday's coffee", ("tx_3",)),
    ("the £12 ride today", ("tx_2",)),
    ("12 quid this morning today", ("tx_2",)),
    ("the €19.99 one", ("tx_6",)),
    ("something on the 18th", ("tx_1",)),
    ("the payment last monday", ("tx_3",)),
    ("my card is lost", ()),
    ("the £7 one", ()),
])
def test_payments_by_merchant_amount_and_day(text, expected):
    assert resolve_payments(text, TXS, TODAY) == expected


def test_only_the_records_given_are_ever_named():
    """Resolution reads no store: a merchant another customer paid is not found among this customer's records."""
    assert resolve_payments("the pret a manger lunch", TXS, TODAY) == ()
    assert resolve_cards("ending 5555", CARDS) == ()


def test_generic_words_of_a_merchant_name_name_nothing():
    assert merchant_matches("freeze my debit card", "Top-up from Barclays debit card") < 80
    assert merchant_matches("the barclays top-up", "Top-up from Barclays debit card") == 100


@pytest.mark.parametrize(("text", "minor", "currency", "whole"), [
    ("£12", 1200, "GBP", True), ("12 quid", 1200, "GBP", True), ("€19.99", 1999, "EUR", False),
    ("12.30", 1230, "", False), ("20 pounds", 2000, "GBP", True),
])
def test_amounts(text, minor, currency, whole):
    a = parse_amount(text)
    assert a is not None and (a.minor, a.currency, a.whole) == (minor, currency, whole)


@pytest.mark.parametrize("text", ["the 3rd", "ending 88", "card 4242", "no amount here"])
def test_no_amount(text):
    assert parse_amount(text) is None


@pytest.mark.parametrize(("text", "day"), [
    ("today", date(2026, 12, 8)), ("yesterday", date(2026, 12, 7)), ("3 days ago", date(2026, 12, 5)),
    ("last tuesday", date(2026, 12, 1)), ("on friday", date(2026, 12, 4)), ("on the 3rd", date(2026, 12, 3)),
    ("on the 20th", date(2026, 11, 20)), ("nothing", None),
])
def test_days(text, day):
    assert parse_day(text, TODAY) == day


# ---------------------------------------------------------------- what the desk derives
@pytest.mark.parametrize(("text", "person"), [
    ("get me a human", True), ("just give me an agent", True), ("can I talk to someone real", True),
    ("can I get a human?", True), ("is there a person I can talk to?", True),
    ("are you a real person or a bot", False), ("how do I send money to a person", False),
    ("do I have to talk to someone to change my PIN?", False), ("talk to you later", False), ("", False),
])
def test_wants_person(text, person):
    from nodes.embedded.understanding.reading import wants_person

    assert wants_person(text) is person


def test_a_foreign_loss_is_a_loss_and_other_foreign_text_is_a_language():
    from nodes.embedded.understanding.reading import other_language, reports_foreign_loss

    assert reports_foreign_loss("me robaron la tarjeta") and other_language("me robaron la tarjeta") is None
    assert not reports_foreign_loss("I lost my card")  # English losses are the desk's own rules'
    reading = other_language("quanto costa un bonifico?")
    assert reading is not None and reading.code == "it"
    assert other_language("what is my balance?") is None and other_language("") is None


def test_questions_and_frustration():
    from nodes.embedded.understanding.reading import asks_before_acting, is_frustrated

    assert asks_before_acting("should i freeze my card just in case?")
    assert not asks_before_acting("freeze my card") and not asks_before_acting("could you freeze my card please?")
    assert is_frustrated("this is the third time im asking!!!") and not is_frustrated("thanks a lot")
