"""Business effects of a conversation, read from the business store, and answers made comparable.

Two readers of the records a conversation can change, for the tools that judge conversations (``switchboard eval``,
the parity table of ``tests/scenarios/test_parity.py``):

* :func:`effects_of` — a comparable snapshot without the ids the store draws at random (two runs of the same
  conversation on identically seeded stores give equal snapshots exactly when they did the same);
* :func:`records_of` and :func:`effect_changes` — the records by id, and what changed between two readings as named
  effects (``refund_paid:tx_1008``, ``card_frozen:4242``, ``service_request:talk_to_person``), the vocabulary of an
  evaluation suite (:data:`EFFECT_KINDS`, docs/eval.md).

:func:`normalise` replaces the ids the store draws (``rf_…``, ``sr_…``, ``task_…``) and clock times in an answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["normalise", "effects_of", "Records", "records_of", "effect_changes", "EFFECT_KINDS", "REFUND_EFFECT",
           "effect_matches"]

_IDS = re.compile(r"\b(rf|sr|task|dc|thread)_[0-9a-f]{6,}\b")
_WHEN = re.compile(r"\b\d{1,2} [A-Z][a-z]{2}(?: at)? \d{2}:\d{2} UTC\b")
_ISO = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b")


def normalise(text: str) -> str:
    """``text`` with random ids (``rf_…``, ``sr_…``, ``task_…``) and clock times replaced by placeholders."""
    return _ISO.sub("<time>", _WHEN.sub("<time>", _IDS.sub(lambda m: f"{m.group(1)}_#", text or "")))


def effects_of(store: Any, customer_id: str) -> tuple:
    """The customer's business records a conversation can change: refunds by transaction (statuses), card statuses by
    last four digits, service requests by kind and status, transfers by status — ids the store draws left out."""
    refunds = tuple(sorted((r.transaction_id, r.status) for r in store.list_refunds(customer_id)))
    cards = tuple(sorted((c.last4, c.status) for c in store.list_cards(customer_id)))
    requests = tuple(sorted((str(r["kind"]), str(r["status"])) for r in store.list_service_requests([customer_id])))
    transfers = tuple(sorted(t.status for t in store.list_transfers(customer_id)))
    return refunds, cards, requests, transfers


#: A refund's status (``checkpoints.business.REFUND_STATUSES``) as the effect a turn that left it there had.
REFUND_EFFECT = {"requested": "refund_requested", "approved": "refund_approved", "executed": "refund_paid",
                 "cancelled": "refund_cancelled", "rejected": "refund_rejected", "expired": "refund_expired"}

#: Every effect name :func:`effect_changes` reports (the part before ``:``), with what it means.
EFFECT_KINDS: dict[str, str] = {
    "refund_requested": "a refund was requested and waits (for an approval); target: the transaction id",
    "refund_approved": "one of two approvals was given; target: the transaction id",
    "refund_paid": "a refund was paid (at once, or after the approval); target: the transaction id",
    "refund_cancelled": "a refund was cancelled before it was paid; target: the transaction id",
    "refund_rejected": "an approver rejected the refund; target: the transaction id",
    "refund_expired": "the refund's approval deadline passed; target: the transaction id",
    "card_frozen": "a card was frozen; target: its last four digits",
    "card_unfrozen": "a frozen card was made active again; target: its last four digits",
    "card_blocked": "a card was blocked for good; target: its last four digits",
    "service_request": "a service request for the team was opened; target: its kind (talk_to_person, close_account, "
                       "freeze_account, unfreeze_account)",
    "service_request_withdrawn": "the customer withdrew a service request; target: its kind",
    "transfer_changed": "a transfer's status changed; target: the transfer id",
}

_CARD_EFFECT = {"frozen": "card_frozen", "active": "card_unfrozen", "blocked": "card_blocked"}


@dataclass(frozen=True)
class Records:
    """One reading of a customer's changeable records, by id: ``refunds`` ``{refund id: (transaction id, status)}``,
    ``cards`` ``{last4: status}``, ``requests`` ``{request id: (kind, status)}``, ``transfers`` ``{id: status}``."""

    refunds: dict[str, tuple[str, str]]
    cards: dict[str, str]
    requests: dict[str, tuple[str, str]]
    transfers: dict[str, str]


def records_of(store: Any, customer_id: str) -> Records:
    """Read :class:`Records` of ``customer_id`` from ``store`` (a ``checkpoints.business.BusinessStore``)."""
    return Records(
        refunds={r.id: (r.transaction_id, r.status) for r in store.list_refunds(customer_id)},
        cards={c.last4: c.status for c in store.list_cards(customer_id)},
        requests={str(r["request_id"]): (str(r["kind"]), str(r["status"]))
                  for r in store.list_service_requests([customer_id])},
        transfers={t.id: t.status for t in store.list_transfers(customer_id)},
    )


def effect_changes(before: Records, after: Records) -> list[str]:
    """What changed from ``before`` to ``after`` as named effects ``"<kind>:<target>"`` (:data:`EFFECT_KINDS`),
    sorted. A refund is named by the status the change left it in (a refund requested and paid in one turn is
    ``refund_paid``); a card by its new status; a new service request by its kind."""
    out: list[str] = []
    for rid, (tx, status) in after.refunds.items():
        if before.refunds.get(rid, (tx, ""))[1] != status:
            out.append(f"{REFUND_EFFECT.get(status, 'refund_' + status)}:{tx}")
    for last4, status in after.cards.items():
        if before.cards.get(last4) not in (None, status):
            out.append(f"{_CARD_EFFECT.get(status, 'card_' + status)}:{last4}")
    for sid, (kind, status) in after.requests.items():
        was = before.requests.get(sid)
        if was is None:
            out.append(f"service_request:{kind}")
        if status == "cancelled" and (was is None or was[1] != "cancelled"):
            out.append(f"service_request_withdrawn:{kind}")
    out.extend(f"transfer_changed:{tid}" for tid, status in after.transfers.items()
               if before.transfers.get(tid, status) != status)
    return sorted(out)


def effect_matches(pattern: str, effect: str) -> bool:
    """Whether ``effect`` (``kind:target``) is what ``pattern`` names: the same kind, and the same target unless the
    pattern has none (``refund_paid`` matches ``refund_paid:tx_1008``). Targets compare case-insensitively."""
    kind, _, target = pattern.partition(":")
    e_kind, _, e_target = effect.partition(":")
    return kind == e_kind and (not target or target.lower() == e_target.lower())
