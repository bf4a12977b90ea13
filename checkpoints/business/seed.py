"""The demo bank's data: two customers of tenant ``t_demo`` with cards, transactions (one duplicate charge), a
pending refund and transfers. Fictional; ids and amounts are fixed, timestamps are offsets back from a
reference time so that "the last few weeks" stays true whenever the demo is seeded.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from checkpoints.business.money import iso
from checkpoints.business.records import DEMO_CUSTOMER, DEMO_OTHER_CUSTOMER, DEMO_TENANT

if TYPE_CHECKING:
    from checkpoints.business.repository import BusinessStore

__all__ = ["demo_rows", "seed_demo"]


def _rows(columns: tuple[str, ...], *values: tuple[Any, ...]) -> list[dict[str, Any]]:
    return [dict(zip(columns, row, strict=True)) for row in values]


def demo_rows(reference: datetime) -> dict[str, list[dict[str, Any]]]:
    """The demo rows by table, in foreign-key order, timestamps relative to ``reference`` (aware; naive = UTC).

    Tenant ``t_demo``; customers ``c_ada`` (Ada Lovelace) and ``c_bob`` (Bob Babbage). Ada's cards:
    ``card_ada_phys`` physical active 4242, ``card_ada_virt`` virtual active 8899, ``card_ada_old`` physical
    blocked 1881. Ada's transactions ``tx_1001``..``tx_1010``, among them the duplicate charge
    ``tx_1007``/``tx_1008`` (Blue Bottle Coffee, 450 GBP minor, same card, same day, 08:12 and 08:19 UTC two
    days before the reference), a pending payment ``tx_1009``, a declined one ``tx_1010``, an ATM withdrawal
    ``tx_1002`` with its fee ``tx_1003``, a transfer ``tx_1004``. Refund ``rf_5001`` (requested) for
    ``tx_1005``. Transfers ``tr_3001`` (completed) and ``tr_3002`` (pending). Bob: card ``card_bob_phys`` 5555,
    transactions ``tx_2001``/``tx_2002``, transfer ``tr_3101``."""
    ref = reference if reference.tzinfo else reference.replace(tzinfo=UTC)
    ref = ref.astimezone(UTC)

    def ago(days: float = 0, hours: float = 0) -> str:
        return iso(ref - timedelta(days=days, hours=hours))

    dup_day = (ref - timedelta(days=2)).replace(hour=8, minute=12, second=0, microsecond=0)
    ada, bob = DEMO_CUSTOMER, DEMO_OTHER_CUSTOMER
    customers = _rows(
        ("id", "tenant_id", "name", "email", "flags"),
        (ada, DEMO_TENANT, "Ada Lovelace", "ada@example.com",
         json.dumps({"plan": "standard", "identity_verified": True, "country": "GB"})),
        (bob, DEMO_TENANT, "Bob Babbage", "bob@example.com",
         json.dumps({"plan": "standard", "identity_verified": False, "country": "GB"})),
    )
    cards = _rows(
        ("id", "customer_id", "last4", "status", "kind"),
        ("card_ada_phys", ada, "4242", "active", "physical"),
        ("card_ada_virt", ada, "8899", "active", "virtual"),
        ("card_ada_old", ada, "1881", "blocked", "physical"),
        ("card_bob_phys", bob, "5555", "active", "physical"),
    )
    transactions = _rows(
        ("id", "customer_id", "card_id", "merchant", "amount_minor", "currency", "kind", "status", "created_at",
         "reference"),
        ("tx_1001", ada, "card_ada_phys", "Tesco", 2380, "GBP", "card_payment", "posted", ago(days=20), None),
        ("tx_1002", ada, "card_ada_phys", "ATM Kings Cross", 10000, "GBP", "atm", "posted", ago(days=16), None),
        ("tx_1003", ada, "card_ada_phys", "ATM withdrawal fee", 150, "GBP", "fee", "posted", ago(days=16),
         "tx_1002"),
        ("tx_1004", ada, None, "Charles Babbage", 25000, "GBP", "transfer_out", "posted", ago(days=12), "tr_3001"),
        ("tx_1005", ada, "card_ada_virt", "Amazon", 5999, "GBP", "card_payment", "posted", ago(days=10), None),
        ("tx_1006", ada, None, "Top-up from Barclays debit card", 50000, "GBP", "top_up", "posted", ago(days=9),
         None),
        ("tx_1007", ada, "card_ada_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment", "posted",
         iso(dup_day), None),
        ("tx_1008", ada, "card_ada_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment", "posted",
         iso(dup_day + timedelta(minutes=7)), None),
        ("tx_1009", ada, "card_ada_phys", "Uber", 1230, "GBP", "card_payment", "pending", ago(hours=3), None),
        ("tx_1010", ada, "card_ada_virt", "Steam", 1999, "EUR", "card_payment", "declined", ago(days=1), None),
        ("tx_2001", bob, "card_bob_phys", "Pret A Manger", 620, "GBP", "card_payment", "posted", ago(days=3), None),
        ("tx_2002", bob, "card_bob_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment", "posted", ago(days=2),
         None),
    )
    refunds = _rows(
        ("id", "customer_id", "transaction_id", "amount_minor", "currency", "status", "reason", "created_at",
         "idempotency_key"),
        ("rf_5001", ada, "tx_1005", 5999, "GBP", "requested", "item returned to the merchant", ago(days=7), None),
    )
    transfers = _rows(
        ("id", "customer_id", "beneficiary", "amount_minor", "currency", "status", "created_at"),
        ("tr_3001", ada, "Charles Babbage", 25000, "GBP", "completed", ago(days=12)),
        ("tr_3002", ada, "Mary Somerville", 8000, "GBP", "pending", ago(days=1)),
        ("tr_3101", bob, "Ada Lovelace", 1000, "GBP", "completed", ago(days=5)),
    )
    return {"customers": customers, "cards": cards, "transactions": transactions, "refunds": refunds,
            "transfers": transfers}


def seed_demo(store: BusinessStore, reference: datetime | None = None) -> int:
    """Insert :func:`demo_rows` into ``store`` (rows whose id exists are left as they are, so a repeat inserts
    nothing and keeps the first seed's timestamps) and return how many rows were new. ``reference`` defaults to
    the store's ``now()``. Raises :class:`~checkpoints.business.records.StorageUnavailable`."""
    return store.insert_rows(demo_rows(reference or store.now()))
