"""The demo bank a new home starts with, as a user needs it for a first conversation (``switchboard demo-bank``).

The records come from a scratch business store seeded exactly as a new ``$SWITCHBOARD_HOME`` is
(:func:`checkpoints.business.seed.seed_demo`), never from the user's own store: the listing shows the fictional
seed, reads no customer data and changes nothing. For every transaction it says what a refund request for it would
meet, decided by the same code the desk runs — the store's eligibility rules
(:meth:`~checkpoints.business.repository.BusinessStore.refund_eligibility`) and the house risk rules
(:func:`policies.risk.assess_refund`, with the customer's flags and recent refunds) — so the listing cannot drift
from the desk's behaviour.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["DEMO_TABLES", "demo_bank", "refund_outlook"]

#: The tables of :func:`demo_bank`, in print order, each ``(name, columns)``.
DEMO_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("customers", ("id", "tenant", "name", "identity_verified", "note")),
    ("cards", ("id", "customer", "last4", "kind", "status")),
    ("transactions", ("id", "customer", "when", "merchant", "amount", "kind", "status", "card", "note",
                      "refund_request")),
    ("refunds", ("id", "customer", "transaction", "amount", "status", "reason")),
    ("transfers", ("id", "customer", "when", "beneficiary", "amount", "status")),
)


def _ago(now: datetime, when: str) -> str:
    """``"3 hours ago"``, ``"1 day ago"``, ``"20 days ago"``: the age of the store timestamp ``when`` at ``now``."""
    from checkpoints.business.money import parse_iso

    seconds = (now - parse_iso(when)).total_seconds()
    days, hours = int(seconds // 86400), int(seconds // 3600)
    if days >= 1:
        return f"{days} day{'s' if days != 1 else ''} ago"
    return f"{hours} hour{'s' if hours != 1 else ''} ago"


def refund_outlook(store: Any, customer_id: str, transaction_id: str) -> str:
    """What a request to refund the whole of ``transaction_id`` would meet now, in words: ``"not refundable: …"``
    (the store's eligibility refusal), ``"rejected: …"``, ``"paid at once (…)"`` or ``"waits for N approver(s): …"``
    (the risk rules' tier and reasons). The same inputs as the approval flow: the customer's flags, their refunds of
    the last :data:`~policies.risk.RECENT_WINDOW_DAYS` days that were not ended unpaid, earlier rejected refunds of the
    transaction."""
    from checkpoints.business.records import UNPAID_FINAL_REFUND_STATUSES
    from policies.risk import RECENT_WINDOW_DAYS, RiskInput, assess_refund

    ok, reason = store.refund_eligibility(customer_id, transaction_id)
    if not ok:
        return f"not refundable: {reason}"
    tx = store.get_transaction(customer_id, transaction_id)
    customer = store.get_customer(customer_id)
    recent = [r for r in store.refunds_in_last_days(customer_id, RECENT_WINDOW_DAYS)
              if r.status not in UNPAID_FINAL_REFUND_STATUSES]
    rejected = [r for r in store.refunds_for_transaction(customer_id, transaction_id) if r.status == "rejected"]
    verdict = assess_refund(RiskInput(tx.amount_minor, tx.currency, len(recent),
                                      dict(customer.flags) if customer else {}, len(rejected)))
    why = "; ".join(verdict.reasons)
    if verdict.outcome == "reject":
        return f"rejected: {why}"
    if verdict.outcome == "auto_approve":
        return "paid at once (within the auto-approval rules)"
    n = verdict.approvals_required
    return f"waits for {n} approver{'s' if n != 1 else ''}: {why}"


def demo_bank() -> dict[str, list[dict[str, str]]]:
    """The seeded demo bank as rows of text by table (:data:`DEMO_TABLES`): tenant ``t_demo``, its customers, cards,
    transactions (with what a refund request would meet, and the duplicate charge marked), refunds and transfers.
    Times are ages ("20 days ago"): the seed places every record at a fixed offset back from the moment a home is
    created. Builds a scratch store in a temporary folder and removes it. Raises
    :class:`~checkpoints.business.records.StorageUnavailable` when no temporary folder can be written."""
    from checkpoints.business import money, open_store
    from checkpoints.business.engine import dispose, resolve_url

    scratch = Path(tempfile.mkdtemp(prefix="switchboard-demo-bank-"))
    try:
        store = open_store(scratch / "business.db")
        try:
            return _tables(store, money)
        finally:
            dispose(resolve_url(str(scratch / "business.db")))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _tables(store: Any, money: Any) -> dict[str, list[dict[str, str]]]:
    from checkpoints.business.records import DEMO_CUSTOMER, DEMO_OTHER_CUSTOMER

    now = store.now()
    out: dict[str, list[dict[str, str]]] = {name: [] for name, _ in DEMO_TABLES}
    for cid in (DEMO_CUSTOMER, DEMO_OTHER_CUSTOMER):
        c = store.get_customer(cid)
        verified = bool(c.flags.get("identity_verified"))
        out["customers"].append({"id": c.id, "tenant": c.tenant_id, "name": c.name,
                                 "identity_verified": "yes" if verified else "no",
                                 "note": "" if verified else "every refund needs two different approvers"})
        cards = store.list_cards(cid)
        last4 = {card.id: card.last4 for card in cards}
        out["cards"] += [{"id": card.id, "customer": cid, "last4": card.last4, "kind": card.kind,
                          "status": card.status} for card in cards]
        dup = {later.id: first.id for first, later in store.find_duplicate_charges(cid)}
        for tx in sorted(store.list_transactions(cid, limit=1000), key=lambda x: x.id):
            note = f"duplicate of {dup[tx.id]}" if tx.id in dup else (f"refers to {tx.reference}" if tx.reference else "")
            out["transactions"].append({
                "id": tx.id, "customer": cid, "when": _ago(now, tx.created_at), "merchant": tx.merchant,
                "amount": money(tx.amount_minor, tx.currency), "kind": tx.kind, "status": tx.status,
                "card": last4.get(tx.card_id or "", ""), "note": note,
                "refund_request": refund_outlook(store, cid, tx.id)})
        out["refunds"] += [{"id": r.id, "customer": cid, "transaction": r.transaction_id,
                            "amount": money(r.amount_minor, r.currency), "status": r.status, "reason": r.reason}
                           for r in store.list_refunds(cid)]
        out["transfers"] += [{"id": tr.id, "customer": cid, "when": _ago(now, tr.created_at),
                              "beneficiary": tr.beneficiary, "amount": money(tr.amount_minor, tr.currency),
                              "status": tr.status} for tr in sorted(store.list_transfers(cid), key=lambda x: x.id)]
    return out
