"""The business store's records, vocabularies, rule constants and errors.

Records are frozen dataclasses read from the database (see :mod:`checkpoints.business.repository`); money is
an integer amount in **minor units** plus an ISO 4217 code, timestamps are ISO 8601 UTC strings of the one
shape ``YYYY-MM-DDTHH:MM:SSZ`` (see :mod:`checkpoints.business.money`). The vocabularies below are also the
CHECK constraints of the schema (:mod:`checkpoints.business.schema`).

Errors, by who is at fault (DESIGN.md, Style): :class:`StaleVersionError` (a compare-and-swap lost: re-read and
decide again), :class:`BusinessRuleError` (the request breaks a business rule; :class:`NotFoundError` is a
subclass), :class:`OwnershipError` (a write from a former task owner), :class:`StorageUnavailable` (the database
cannot be reached or used: infrastructure). All derive from :class:`StoreError`, itself a
:class:`graph.contracts.errors.SwitchboardError`, so there is one error hierarchy.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from graph.contracts.errors import InfrastructureError, SwitchboardError

__all__ = [
    "Customer",
    "Card",
    "Transaction",
    "Refund",
    "Transfer",
    "Task",
    "Decision",
    "Operator",
    "Token",
    "AuditEntry",
    "StoreError",
    "StaleVersionError",
    "BusinessRuleError",
    "NotFoundError",
    "OwnershipError",
    "StorageUnavailable",
    "CARD_STATUSES",
    "CARD_KINDS",
    "TX_KINDS",
    "TX_STATUSES",
    "TX_KIND_PHRASES",
    "REFUND_STATUSES",
    "UNPAID_FINAL_REFUND_STATUSES",
    "REFUND_TRANSITIONS",
    "ACTIVE_REFUND_STATUSES",
    "REFUNDABLE_TX_KINDS",
    "REFUND_WINDOW_DAYS",
    "DUPLICATE_WINDOW_HOURS",
    "TRANSFER_STATUSES",
    "TASK_STATUSES",
    "DECISIONS",
    "FINAL_DECISIONS",
    "OPERATOR_ROLES",
    "PRINCIPAL_KINDS",
    "AUDIT_OUTCOMES",
    "DEMO_TENANT",
    "DEMO_CUSTOMER",
    "DEMO_OTHER_CUSTOMER",
]

# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class StoreError(SwitchboardError):
    """Base class of the business store's errors (a :class:`~graph.contracts.errors.SwitchboardError`)."""


class StaleVersionError(StoreError):
    """A compare-and-swap write found a different ``version`` than expected (someone else wrote first).

    The caller re-reads the row and decides again; nothing was written.
    """


class BusinessRuleError(StoreError):
    """The request breaks a business rule (one-line, customer-safe message); nothing was written."""


class PaymentNotAuthorized(BusinessRuleError):
    """A payment the business store's own records do not allow: the refund is not approved, or its recorded decisions
    do not meet the approval rule its risk check recorded (:meth:`BusinessStore.execute_refund`)."""


class NotFoundError(BusinessRuleError):
    """The row does not exist, or does not belong to the given customer (the two are not distinguished,
    so a caller cannot probe other customers' ids)."""


class OwnershipError(StoreError):
    """A task write or claim came from an owner that no longer holds the task (fencing by
    ``owner_version``); nothing was written."""


class StorageUnavailable(StoreError, InfrastructureError):
    """The business database cannot be used: unreachable server, locked past the busy timeout, corrupt or
    not a database, read-only file or directory, disk full. The message is one line naming the database (a
    file path, or a URL without its password) and the cause; nothing was written. Infrastructure fault, so
    both ``except StoreError`` and ``except InfrastructureError`` catch it: retry later, or fall back."""


# --------------------------------------------------------------------------------------------------
# Vocabularies and rule constants (source: this module; the demo bank's rules are fictional)
# --------------------------------------------------------------------------------------------------

CARD_STATUSES = frozenset({"active", "blocked", "frozen", "expired"})
CARD_KINDS = frozenset({"physical", "virtual"})
TX_KINDS = frozenset({"card_payment", "atm", "transfer_out", "transfer_in", "top_up", "fee"})
#: Each transaction kind in a customer's words, with its article ("tx_1002 is an ATM withdrawal"); the store's
#: refusals, which the desk shows to the customer, use these (never the raw kind such as ``atm``).
TX_KIND_PHRASES: dict[str, str] = {
    "card_payment": "a card payment",
    "atm": "an ATM withdrawal",
    "transfer_out": "an outgoing transfer",
    "transfer_in": "an incoming transfer",
    "top_up": "a top-up",
    "fee": "a fee",
}
TX_STATUSES = frozenset({"posted", "pending", "declined", "reverted"})
#: ``cancelled``: the customer (or an operator closing it) called it off; ``expired``: no decision came before the
#: approval deadline (``switchboard recover --expire``; schema revision 0005 — such refunds were ``cancelled`` before).
REFUND_STATUSES = frozenset({"requested", "approved", "rejected", "executed", "cancelled", "expired"})
#: Legal ``set_refund_status`` transitions. ``executed`` is reachable only through ``execute_refund``.
REFUND_TRANSITIONS: dict[str, frozenset[str]] = {
    "requested": frozenset({"approved", "rejected", "cancelled", "expired"}),
    "approved": frozenset({"cancelled", "expired"}),
    "rejected": frozenset(),
    "executed": frozenset(),
    "cancelled": frozenset(),
    "expired": frozenset(),
}
#: Refund statuses that end a refund with nothing paid (it can never be paid afterwards).
UNPAID_FINAL_REFUND_STATUSES = frozenset({"rejected", "cancelled", "expired"})
#: Refund statuses that block another refund request for the same transaction.
ACTIVE_REFUND_STATUSES = frozenset({"requested", "approved", "executed"})
#: Transaction kinds a customer may ask us to refund (the demo bank's rule).
REFUNDABLE_TX_KINDS = frozenset({"card_payment", "fee"})
#: A refund may be requested up to this many days after the transaction (the demo bank's rule).
REFUND_WINDOW_DAYS = 120
#: Two identical posted card payments within this many hours count as a duplicate charge.
DUPLICATE_WINDOW_HOURS = 24
TRANSFER_STATUSES = frozenset({"pending", "completed", "failed", "cancelled"})
#: ``fallback``: a person took the task over (the same name as the graph state's task status; revision 0003 renamed
#: the first release's ``needs_human``).
TASK_STATUSES = frozenset({"open", "awaiting_approval", "completed", "cancelled", "fallback"})
#: Decisions on a paused refund: ``approve``/``reject`` by an approver, ``cancel`` by the customer (or an approver),
#: ``expire`` when the approval deadline passed (``switchboard recover --expire``), ``close`` when an operator closes
#: a stuck task (``switchboard tasks close``).
DECISIONS = frozenset({"approve", "reject", "cancel", "expire", "close"})
#: Decisions that end a task at once (an ``approve`` ends it only when the last required approver gave it).
FINAL_DECISIONS = frozenset({"reject", "cancel", "expire", "close"})
#: Roles an operator may hold (the same tuple as ``graph.contracts.context.OPERATOR_ROLES``).
OPERATOR_ROLES: tuple[str, ...] = ("agent", "approver", "admin")
#: Kinds of principal a token may stand for.
PRINCIPAL_KINDS = frozenset({"customer", "operator"})
#: Outcomes recorded in the audit table.
AUDIT_OUTCOMES = frozenset({"allowed", "denied"})

#: The Alembic revision this code reads and writes (the head of ``migrations/versions``; re-exported by
#: :mod:`checkpoints.business.schema`, kept here so that a light read need not import SQLAlchemy).
SCHEMA_VERSION = "0006"
#: The table holding the business database's Alembic revision (re-exported by :mod:`checkpoints.business.migrate`).
VERSION_TABLE = "alembic_version_business"

DEMO_TENANT = "t_demo"
DEMO_CUSTOMER = "c_ada"
DEMO_OTHER_CUSTOMER = "c_bob"

# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable ``dict`` of the fields (money stays in minor units)."""
        fields: dict[str, Any] = asdict(self)  # type: ignore[call-overload]  # subclasses are dataclasses
        return fields


@dataclass(frozen=True)
class Customer(_Record):
    """A customer of one tenant. ``flags``: free-form JSON object (e.g. ``{"plan": "standard",
    "identity_verified": true}``)."""

    id: str
    tenant_id: str
    name: str
    email: str
    flags: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    version: int = 1


@dataclass(frozen=True)
class Card(_Record):
    """A payment card. ``status`` in :data:`CARD_STATUSES`, ``kind`` in :data:`CARD_KINDS`."""

    id: str
    customer_id: str
    last4: str
    status: str
    kind: str
    version: int = 1


@dataclass(frozen=True)
class Transaction(_Record):
    """A money movement. ``amount_minor`` >= 0 in minor units of ``currency``; the direction follows
    ``kind`` (:data:`TX_KINDS`). ``status`` in :data:`TX_STATUSES`. ``card_id`` is None for
    transfers/top-ups. ``reference``: related id (the ATM withdrawal a fee belongs to, the transfer a
    transfer_out belongs to, the refund a credit comes from) or None."""

    id: str
    customer_id: str
    card_id: str | None
    merchant: str
    amount_minor: int
    currency: str
    kind: str
    status: str
    created_at: str
    reference: str | None = None


@dataclass(frozen=True)
class Refund(_Record):
    """A refund of (part of) one transaction. ``status`` in :data:`REFUND_STATUSES`;
    ``requested`` means nothing has been paid yet."""

    id: str
    customer_id: str
    transaction_id: str
    amount_minor: int
    currency: str
    status: str
    reason: str
    created_at: str
    idempotency_key: str | None
    version: int = 1


@dataclass(frozen=True)
class Transfer(_Record):
    """An outgoing bank transfer. ``status`` in :data:`TRANSFER_STATUSES`."""

    id: str
    customer_id: str
    beneficiary: str
    amount_minor: int
    currency: str
    status: str
    created_at: str


@dataclass(frozen=True)
class Task(_Record):
    """A support task (one customer request across agents). ``current_owner`` is the agent holding it;
    ``owner_version`` is the fencing token bumped by every claim; ``version`` bumps on every write; ``refund_id``:
    the refund the task decides (None for tasks of the first release); ``approvals_required``: the approval rule the
    risk check recorded for that refund, write-once (:meth:`BusinessStore.record_approval_rule`): 0 = paid on the
    risk rules' own approval (decision ``auto:<refund>`` by ``system:risk-policy``), 1 or 2 = that many distinct
    human approvers (None: not assessed yet, or a task of a release before revision 0006, which counts as 1);
    ``approval_deadline``: ISO-8601 UTC time after which an approver may expire the request (None: no deadline)."""

    id: str
    thread_id: str
    status: str
    current_owner: str
    owner_version: int
    version: int
    updated_at: str
    refund_id: str | None = None
    approvals_required: int | None = None
    approval_deadline: str | None = None


@dataclass(frozen=True)
class Decision(_Record):
    """An approval decision on a task. ``decision`` in :data:`DECISIONS`; ``approver`` is the deciding principal's
    ref (``operator:ann``, ``customer:c_ada``, ``system:risk-policy``; free text in databases of the first release);
    ``final`` is False for an approval that still waits for another approver (two-approver tier)."""

    id: str
    task_id: str
    approver: str
    decision: str
    note: str
    decided_at: str
    final: bool = True


@dataclass(frozen=True)
class Operator(_Record):
    """A person of the bank who may act on one tenant's threads. ``id`` is the operator's name (``ann``);
    ``roles`` a sorted tuple of :data:`OPERATOR_ROLES`; ``customer_id``: the operator's own customer account in
    the tenant, if any (an approver may never decide that customer's refunds); ``enabled`` False after
    ``switchboard operators disable``."""

    id: str
    tenant_id: str
    roles: tuple[str, ...]
    enabled: bool
    customer_id: str | None
    created_at: str
    version: int = 1

    @classmethod
    def from_row(cls, row: Any) -> Operator:
        """The record of one ``operators`` row (a mapping of its columns; ``roles`` comma-separated, ``enabled`` 0/1),
        as both the SQLAlchemy repository and the light read of :mod:`checkpoints.business.operator_lookup` read it."""
        roles = tuple(sorted(r for r in str(row["roles"]).split(",") if r))
        return cls(**{**dict(row), "roles": roles, "enabled": bool(row["enabled"])})


@dataclass(frozen=True)
class Token(_Record):
    """A bearer token of one principal (the token itself is never stored: only its SHA-256). ``principal_kind`` in
    :data:`PRINCIPAL_KINDS`; ``revoked_at`` None while the token is valid."""

    id: str
    principal_kind: str
    principal_id: str
    tenant_id: str
    label: str
    created_at: str
    revoked_at: str | None = None


@dataclass(frozen=True)
class AuditEntry(_Record):
    """One recorded operator action or refusal: who (``actor``, a principal ref or ``unknown:<name>``), what
    (``action``, e.g. ``resume``, ``history --reveal``, ``operators add``), on what (``target``), ``outcome`` in
    :data:`AUDIT_OUTCOMES`, ``detail`` (JSON object), ``key``: an idempotency/lookup key (a decision id) or None."""

    id: str
    ts: str
    actor: str
    action: str
    target: str
    outcome: str
    detail: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    key: str | None = None


@dataclass(frozen=True)
class ThreadOwner(_Record):
    """Who a thread belongs to: the authenticated customer (``customer_id`` in ``tenant_id``) whose turn started it,
    recorded once before that turn's run reached the graph and never changed (``recorded_at``: ISO-8601 UTC;
    ``source``: where it was recorded — ``conversation`` (Python API / CLI), ``server`` (a served run's request),
    ``state`` (taken over from the checkpoint of a thread started before revision 0004))."""

    thread_id: str
    customer_id: str
    tenant_id: str
    recorded_at: str
    source: str = ""
