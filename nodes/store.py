"""The business database of the support desk: customers, cards, transactions, refunds, transfers,
tasks, side effects and approval decisions, in one SQLite file.

Business state lives here, not in the prompt and not in graph state (DESIGN.md, "State").

Conventions
-----------
* Money is an integer amount in **minor units** (pence, cents) plus an ISO 4217 currency code;
  ``amount_minor`` is always >= 0 and the direction of a transaction follows from its ``kind``.
  :func:`money` formats it for people ("£4.50").
* Timestamps are ISO 8601 UTC strings of one fixed shape, ``YYYY-MM-DDTHH:MM:SSZ``, so that string
  order is time order. The clock is injectable (``BusinessStore(path, now=...)``) for tests.
* Every mutable row has a ``version`` column. Writes are compare-and-swap
  (``UPDATE ... WHERE id=? AND version=?``); zero rows raises :class:`StaleVersionError` and the caller
  re-reads and decides again.
* Every side effect (refund execution, card freeze) is idempotent by a caller-chosen key recorded in
  ``side_effects`` inside the same SQLite transaction as the effect: a repeat with the same key returns
  the first result with ``"replayed": True`` and changes nothing (DESIGN.md, control-flow rule 5).
* Concurrency: one short-lived connection per call (so a store object can be shared by threads),
  WAL journal, ``busy_timeout``, and ``BEGIN IMMEDIATE`` for every read-modify-write, so two processes
  or threads on the same file serialise their writes instead of losing one.

Errors: :class:`StaleVersionError` (CAS lost), :class:`BusinessRuleError` (the request breaks a business
rule, e.g. refunding another customer's transaction; :class:`NotFoundError` is a subclass),
:class:`OwnershipError` (a write from a former task owner), ``ValueError`` (a malformed argument such as
an unknown status string).
"""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

__all__ = [
    "BusinessStore",
    "open_store",
    "default_store_path",
    "money",
    "money_plain",
    "iso",
    "parse_iso",
    "Customer",
    "Card",
    "Transaction",
    "Refund",
    "Transfer",
    "Task",
    "Decision",
    "StoreError",
    "StaleVersionError",
    "BusinessRuleError",
    "NotFoundError",
    "OwnershipError",
    "CARD_STATUSES",
    "CARD_KINDS",
    "TX_KINDS",
    "TX_STATUSES",
    "REFUND_STATUSES",
    "REFUND_TRANSITIONS",
    "REFUNDABLE_TX_KINDS",
    "REFUND_WINDOW_DAYS",
    "DUPLICATE_WINDOW_HOURS",
    "TRANSFER_STATUSES",
    "TASK_STATUSES",
    "DECISIONS",
    "DEMO_TENANT",
    "DEMO_CUSTOMER",
    "DEMO_OTHER_CUSTOMER",
    "SCHEMA_VERSION",
]

# --------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------


class StoreError(Exception):
    """Base class of the business store's errors."""


class StaleVersionError(StoreError):
    """A compare-and-swap write found a different ``version`` than expected (someone else wrote first).

    The caller re-reads the row and decides again; nothing was written.
    """


class BusinessRuleError(StoreError):
    """The request breaks a business rule (one-line, customer-safe message); nothing was written."""


class NotFoundError(BusinessRuleError):
    """The row does not exist, or does not belong to the given customer (the two are not distinguished,
    so a caller cannot probe other customers' ids)."""


class OwnershipError(StoreError):
    """A task write or claim came from an owner that no longer holds the task (fencing by
    ``owner_version``); nothing was written."""


# --------------------------------------------------------------------------------------------------
# Vocabularies and rule constants (source: this module; the demo bank's rules are fictional)
# --------------------------------------------------------------------------------------------------

CARD_STATUSES = frozenset({"active", "blocked", "frozen", "expired"})
CARD_KINDS = frozenset({"physical", "virtual"})
TX_KINDS = frozenset({"card_payment", "atm", "transfer_out", "transfer_in", "top_up", "fee"})
TX_STATUSES = frozenset({"posted", "pending", "declined", "reverted"})
REFUND_STATUSES = frozenset({"requested", "approved", "rejected", "executed", "cancelled"})
#: Legal ``set_refund_status`` transitions. ``executed`` is reachable only through ``execute_refund``.
REFUND_TRANSITIONS: dict[str, frozenset[str]] = {
    "requested": frozenset({"approved", "rejected", "cancelled"}),
    "approved": frozenset({"cancelled"}),
    "rejected": frozenset(),
    "executed": frozenset(),
    "cancelled": frozenset(),
}
#: Refund statuses that block another refund request for the same transaction.
ACTIVE_REFUND_STATUSES = frozenset({"requested", "approved", "executed"})
#: Transaction kinds a customer may ask us to refund (the demo bank's rule).
REFUNDABLE_TX_KINDS = frozenset({"card_payment", "fee"})
#: A refund may be requested up to this many days after the transaction (the demo bank's rule).
REFUND_WINDOW_DAYS = 120
#: Two identical posted card payments within this many hours count as a duplicate charge.
DUPLICATE_WINDOW_HOURS = 24
TRANSFER_STATUSES = frozenset({"pending", "completed", "failed", "cancelled"})
TASK_STATUSES = frozenset({"open", "awaiting_approval", "completed", "cancelled", "needs_human"})
DECISIONS = frozenset({"approve", "reject", "cancel"})

DEMO_TENANT = "t_demo"
DEMO_CUSTOMER = "c_ada"
DEMO_OTHER_CUSTOMER = "c_bob"
SCHEMA_VERSION = 1

_BUSY_TIMEOUT_MS = 10_000

# --------------------------------------------------------------------------------------------------
# Money and time helpers
# --------------------------------------------------------------------------------------------------

_SYMBOLS = {"GBP": "£", "EUR": "€", "USD": "$"}
#: ISO 4217 minor-unit exponents that differ from 2.
_EXPONENTS = {"JPY": 0, "KRW": 0, "HUF": 2, "BHD": 3, "KWD": 3}


def _major(amount_minor: int, currency: str) -> str:
    exp = _EXPONENTS.get(currency.upper(), 2)
    sign = "-" if amount_minor < 0 else ""
    value = abs(int(amount_minor))
    if exp == 0:
        return f"{sign}{value}"
    whole, frac = divmod(value, 10**exp)
    return f"{sign}{whole}.{frac:0{exp}d}"


def money(amount_minor: int, currency: str) -> str:
    """Format integer minor units for people: ``money(450, "GBP") -> "£4.50"``,
    ``money(-1999, "EUR") -> "-€19.99"``, ``money(500, "CHF") -> "5.00 CHF"``.

    The exponent follows ISO 4217 (2 unless listed in ``_EXPONENTS``)."""
    currency = currency.upper()
    text = _major(amount_minor, currency)
    symbol = _SYMBOLS.get(currency)
    if symbol is None:
        return f"{text} {currency}"
    if text.startswith("-"):
        return f"-{symbol}{text[1:]}"
    return f"{symbol}{text}"


def money_plain(amount_minor: int, currency: str) -> str:
    """Format as major units plus ISO code: ``money_plain(450, "GBP") -> "4.50 GBP"``."""
    return f"{_major(amount_minor, currency)} {currency.upper()}"


def iso(dt: datetime) -> str:
    """``datetime`` -> the store's timestamp shape ``YYYY-MM-DDTHH:MM:SSZ`` (UTC; naive = UTC)."""
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime:
    """The store's timestamp string -> aware UTC ``datetime`` (also accepts ``+00:00`` offsets)."""
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


# --------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------


class _Record:
    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable ``dict`` of the fields (money stays in minor units)."""
        return asdict(self)  # type: ignore[call-overload]


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
    ``owner_version`` is the fencing token bumped by every claim; ``version`` bumps on every write."""

    id: str
    thread_id: str
    status: str
    current_owner: str
    owner_version: int
    version: int
    updated_at: str


@dataclass(frozen=True)
class Decision(_Record):
    """A human approval decision on a task. ``decision`` in :data:`DECISIONS`."""

    id: str
    task_id: str
    approver: str
    decision: str
    note: str
    decided_at: str


# --------------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------------

_SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL,
    name TEXT NOT NULL,
    email TEXT NOT NULL,
    flags TEXT NOT NULL DEFAULT '{}',
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS cards (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    last4 TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('active','blocked','frozen','expired')),
    kind TEXT NOT NULL CHECK (kind IN ('physical','virtual')),
    version INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS transactions (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    card_id TEXT REFERENCES cards(id),
    merchant TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    currency TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN
        ('card_payment','atm','transfer_out','transfer_in','top_up','fee')),
    status TEXT NOT NULL CHECK (status IN ('posted','pending','declined','reverted')),
    created_at TEXT NOT NULL,
    reference TEXT
);
CREATE INDEX IF NOT EXISTS transactions_by_customer ON transactions(customer_id, created_at);
CREATE TABLE IF NOT EXISTS refunds (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    transaction_id TEXT NOT NULL REFERENCES transactions(id),
    amount_minor INTEGER NOT NULL CHECK (amount_minor > 0),
    currency TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('requested','approved','rejected','executed','cancelled')),
    reason TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    idempotency_key TEXT UNIQUE,
    version INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS refunds_by_customer ON refunds(customer_id, created_at);
CREATE TABLE IF NOT EXISTS transfers (
    id TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers(id),
    beneficiary TEXT NOT NULL,
    amount_minor INTEGER NOT NULL CHECK (amount_minor >= 0),
    currency TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('pending','completed','failed','cancelled')),
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    thread_id TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('open','awaiting_approval','completed','cancelled','needs_human')),
    current_owner TEXT NOT NULL,
    owner_version INTEGER NOT NULL DEFAULT 1,
    version INTEGER NOT NULL DEFAULT 1,
    updated_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS side_effects (
    idempotency_key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    result_json TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS decisions (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL,
    approver TEXT NOT NULL,
    decision TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    decided_at TEXT NOT NULL
);
"""


def _customer(row: sqlite3.Row) -> Customer:
    return Customer(
        id=row["id"],
        tenant_id=row["tenant_id"],
        name=row["name"],
        email=row["email"],
        flags=json.loads(row["flags"] or "{}"),
        version=row["version"],
    )


def _card(row: sqlite3.Row) -> Card:
    return Card(**{k: row[k] for k in row.keys()})


def _tx(row: sqlite3.Row) -> Transaction:
    return Transaction(**{k: row[k] for k in row.keys()})


def _refund(row: sqlite3.Row) -> Refund:
    return Refund(**{k: row[k] for k in row.keys()})


def _transfer(row: sqlite3.Row) -> Transfer:
    return Transfer(**{k: row[k] for k in row.keys()})


def _task(row: sqlite3.Row) -> Task:
    return Task(**{k: row[k] for k in row.keys()})


def _decision(row: sqlite3.Row) -> Decision:
    return Decision(**{k: row[k] for k in row.keys()})


# --------------------------------------------------------------------------------------------------
# The store
# --------------------------------------------------------------------------------------------------


class BusinessStore:
    """The business database over one SQLite file.

    ``BusinessStore(path, *, now=None)``: ``path`` is a file path (created with its parent directory if
    missing; ``":memory:"`` is not supported because every call opens its own connection). ``now`` is a
    zero-argument callable returning an aware ``datetime`` (default: the UTC wall clock); it stamps
    ``created_at``/``updated_at`` and anchors the time windows.

    The constructor creates the schema if needed (idempotent) but does not seed; see
    :meth:`seed_demo` and :func:`open_store`. The object holds no connection, so it may be shared
    between threads; two processes may open the same file.
    """

    def __init__(self, path: str | Path, *, now: Callable[[], datetime] | None = None) -> None:
        if str(path) == ":memory:":
            raise ValueError("BusinessStore needs a file path (one connection per call), not ':memory:'")
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._now = now or _utcnow
        self._init_schema()

    # -- plumbing ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The store's clock (aware UTC ``datetime``)."""
        dt = self._now()
        return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
        )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA foreign_keys = ON")
        return conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            yield conn
        finally:
            conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: takes the write lock up front (waiting up to
        ``busy_timeout``), commits on success, rolls back on any exception."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        finally:
            conn.close()

    def _init_schema(self) -> None:
        conn = self._connect()
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # pragma: no cover - e.g. a network filesystem
                raise StoreError(f"could not switch {self.path} to WAL journal mode (got {mode!r})")
            conn.execute("BEGIN IMMEDIATE")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            conn.execute("COMMIT")
        finally:
            conn.close()

    def is_empty(self) -> bool:
        """True when no customer exists yet (a fresh database)."""
        with self._read() as conn:
            return conn.execute("SELECT COUNT(*) FROM customers").fetchone()[0] == 0

    # -- seed ---------------------------------------------------------------------------------------

    def seed_demo(self, reference: datetime | None = None) -> int:
        """Insert the demo data with ``INSERT OR IGNORE`` (idempotent) and return how many rows were
        new (0 on a repeat).

        Ids and amounts are fixed; timestamps are offsets back from ``reference`` (default: the store's
        ``now()``), so "the last few weeks" stays true whenever the demo is seeded. Contents:
        tenant ``t_demo``; customers ``c_ada`` (Ada Lovelace) and ``c_bob`` (Bob Babbage).
        Ada's cards: ``card_ada_phys`` physical active 4242, ``card_ada_virt`` virtual active 8899,
        ``card_ada_old`` physical blocked 1881. Ada's transactions ``tx_1001``..``tx_1010``, among them
        the duplicate charge ``tx_1007``/``tx_1008`` (Blue Bottle Coffee, 450 GBP minor, same card,
        same day, 7 minutes apart), a pending payment ``tx_1009``, a declined one ``tx_1010``, an ATM
        withdrawal ``tx_1002`` with its fee ``tx_1003``, a transfer ``tx_1004``. Refund ``rf_5001``
        (requested) for ``tx_1005``. Transfers ``tr_3001`` (completed) and ``tr_3002`` (pending).
        Bob: card ``card_bob_phys`` 5555, transactions ``tx_2001``/``tx_2002``, transfer ``tr_3101``.
        """
        ref = reference or self.now()
        if ref.tzinfo is None:
            ref = ref.replace(tzinfo=timezone.utc)
        ref = ref.astimezone(timezone.utc)

        def ago(days: float = 0, hours: float = 0) -> str:
            return iso(ref - timedelta(days=days, hours=hours))

        # The duplicate pair: same calendar day, 08:12 and 08:19 UTC, two days before the reference.
        dup_day = (ref - timedelta(days=2)).replace(hour=8, minute=12, second=0, microsecond=0)
        customers = [
            ("c_ada", DEMO_TENANT, "Ada Lovelace", "ada@example.com",
             json.dumps({"plan": "standard", "identity_verified": True, "country": "GB"})),
            ("c_bob", DEMO_TENANT, "Bob Babbage", "bob@example.com",
             json.dumps({"plan": "standard", "identity_verified": False, "country": "GB"})),
        ]
        cards = [
            ("card_ada_phys", "c_ada", "4242", "active", "physical"),
            ("card_ada_virt", "c_ada", "8899", "active", "virtual"),
            ("card_ada_old", "c_ada", "1881", "blocked", "physical"),
            ("card_bob_phys", "c_bob", "5555", "active", "physical"),
        ]
        txs = [
            ("tx_1001", "c_ada", "card_ada_phys", "Tesco", 2380, "GBP", "card_payment", "posted",
             ago(days=20), None),
            ("tx_1002", "c_ada", "card_ada_phys", "ATM Kings Cross", 10000, "GBP", "atm", "posted",
             ago(days=16), None),
            ("tx_1003", "c_ada", "card_ada_phys", "ATM withdrawal fee", 150, "GBP", "fee", "posted",
             ago(days=16), "tx_1002"),
            ("tx_1004", "c_ada", None, "Charles Babbage", 25000, "GBP", "transfer_out", "posted",
             ago(days=12), "tr_3001"),
            ("tx_1005", "c_ada", "card_ada_virt", "Amazon", 5999, "GBP", "card_payment", "posted",
             ago(days=10), None),
            ("tx_1006", "c_ada", None, "Top-up from Barclays debit card", 50000, "GBP", "top_up",
             "posted", ago(days=9), None),
            ("tx_1007", "c_ada", "card_ada_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment",
             "posted", iso(dup_day), None),
            ("tx_1008", "c_ada", "card_ada_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment",
             "posted", iso(dup_day + timedelta(minutes=7)), None),
            ("tx_1009", "c_ada", "card_ada_phys", "Uber", 1230, "GBP", "card_payment", "pending",
             ago(hours=3), None),
            ("tx_1010", "c_ada", "card_ada_virt", "Steam", 1999, "EUR", "card_payment", "declined",
             ago(days=1), None),
            ("tx_2001", "c_bob", "card_bob_phys", "Pret A Manger", 620, "GBP", "card_payment",
             "posted", ago(days=3), None),
            ("tx_2002", "c_bob", "card_bob_phys", "Blue Bottle Coffee", 450, "GBP", "card_payment",
             "posted", ago(days=2), None),
        ]
        refunds = [
            ("rf_5001", "c_ada", "tx_1005", 5999, "GBP", "requested", "item returned to the merchant",
             ago(days=7), None),
        ]
        transfers = [
            ("tr_3001", "c_ada", "Charles Babbage", 25000, "GBP", "completed", ago(days=12)),
            ("tr_3002", "c_ada", "Mary Somerville", 8000, "GBP", "pending", ago(days=1)),
            ("tr_3101", "c_bob", "Ada Lovelace", 1000, "GBP", "completed", ago(days=5)),
        ]
        inserted = 0
        with self._write() as conn:
            for row in customers:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO customers(id, tenant_id, name, email, flags) "
                    "VALUES (?,?,?,?,?)", row).rowcount
            for row in cards:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO cards(id, customer_id, last4, status, kind) "
                    "VALUES (?,?,?,?,?)", row).rowcount
            for row in txs:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO transactions(id, customer_id, card_id, merchant, "
                    "amount_minor, currency, kind, status, created_at, reference) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)", row).rowcount
            for row in refunds:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO refunds(id, customer_id, transaction_id, amount_minor, "
                    "currency, status, reason, created_at, idempotency_key) "
                    "VALUES (?,?,?,?,?,?,?,?,?)", row).rowcount
            for row in transfers:
                inserted += conn.execute(
                    "INSERT OR IGNORE INTO transfers(id, customer_id, beneficiary, amount_minor, "
                    "currency, status, created_at) VALUES (?,?,?,?,?,?,?)", row).rowcount
        return inserted

    # -- reads: customers, cards, transactions ------------------------------------------------------

    def get_customer(self, customer_id: str, tenant_id: str | None = None) -> Customer | None:
        """The customer, or None if absent (or, when ``tenant_id`` is given, of another tenant)."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM customers WHERE id=?", (customer_id,)).fetchone()
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            return None
        return _customer(row)

    def list_cards(self, customer_id: str) -> list[Card]:
        """The customer's cards, ordered by id."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM cards WHERE customer_id=? ORDER BY id", (customer_id,)).fetchall()
        return [_card(r) for r in rows]

    def get_card(self, customer_id: str, card_id: str) -> Card | None:
        """The card if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM cards WHERE id=? AND customer_id=?",
                               (card_id, customer_id)).fetchone()
        return _card(row) if row else None

    def list_transactions(self, customer_id: str, limit: int = 20,
                          kind: str | None = None) -> list[Transaction]:
        """The customer's transactions, newest first, at most ``limit`` (>= 1); optionally only one
        ``kind`` (ValueError if not in :data:`TX_KINDS`)."""
        if kind is not None and kind not in TX_KINDS:
            raise ValueError(f"unknown transaction kind {kind!r}")
        limit = max(1, int(limit))
        sql = "SELECT * FROM transactions WHERE customer_id=?"
        params: list[Any] = [customer_id]
        if kind is not None:
            sql += " AND kind=?"
            params.append(kind)
        sql += " ORDER BY created_at DESC, id DESC LIMIT ?"
        params.append(limit)
        with self._read() as conn:
            rows = conn.execute(sql, params).fetchall()
        return [_tx(r) for r in rows]

    def get_transaction(self, customer_id: str, tx_id: str) -> Transaction | None:
        """The transaction if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM transactions WHERE id=? AND customer_id=?",
                               (tx_id, customer_id)).fetchone()
        return _tx(row) if row else None

    def find_duplicate_charges(self, customer_id: str) -> list[tuple[Transaction, Transaction]]:
        """Pairs ``(original, duplicate)`` of the customer's posted card payments with the same
        merchant, amount, currency and card, the duplicate within :data:`DUPLICATE_WINDOW_HOURS` after
        the original. The original is the earliest of a cluster; each later one pairs with it.
        Ordered by the duplicate's time, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT * FROM transactions WHERE customer_id=? AND kind='card_payment' "
                "AND status='posted' ORDER BY created_at, id", (customer_id,)).fetchall()
        window = timedelta(hours=DUPLICATE_WINDOW_HOURS)
        originals: dict[tuple[Any, ...], Transaction] = {}
        pairs: list[tuple[Transaction, Transaction]] = []
        for tx in map(_tx, rows):
            key = (tx.merchant.strip().lower(), tx.amount_minor, tx.currency, tx.card_id)
            first = originals.get(key)
            if first is not None and parse_iso(tx.created_at) - parse_iso(first.created_at) <= window:
                pairs.append((first, tx))
            else:
                originals[key] = tx
        return pairs

    # -- reads: refunds, transfers, tasks -----------------------------------------------------------

    def list_refunds(self, customer_id: str) -> list[Refund]:
        """The customer's refunds, newest first (ties in insertion order, newest first)."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM refunds WHERE customer_id=? "
                                "ORDER BY created_at DESC, rowid DESC", (customer_id,)).fetchall()
        return [_refund(r) for r in rows]

    def get_refund(self, customer_id: str, refund_id: str) -> Refund | None:
        """The refund if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM refunds WHERE id=? AND customer_id=?",
                               (refund_id, customer_id)).fetchone()
        return _refund(row) if row else None

    def load_refund(self, refund_id: str) -> Refund | None:
        """The refund by id regardless of customer (for system nodes such as approval/execution, whose
        authorisation was checked earlier); None if absent."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM refunds WHERE id=?", (refund_id,)).fetchone()
        return _refund(row) if row else None

    def find_refund_by_key(self, idempotency_key: str) -> Refund | None:
        """The refund created with this idempotency key, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM refunds WHERE idempotency_key=?",
                               (idempotency_key,)).fetchone()
        return _refund(row) if row else None

    def refunds_for_transaction(self, customer_id: str, transaction_id: str) -> list[Refund]:
        """All refunds (any status) of one of the customer's transactions, oldest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM refunds WHERE customer_id=? AND transaction_id=? "
                                "ORDER BY created_at, rowid", (customer_id, transaction_id)).fetchall()
        return [_refund(r) for r in rows]

    def refunds_in_last_days(self, customer_id: str, days: int) -> list[Refund]:
        """The customer's refunds (any status) created within the last ``days`` days of ``now()``,
        newest first. Used e.g. by a risk check on refund frequency."""
        since = iso(self.now() - timedelta(days=days))
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM refunds WHERE customer_id=? AND created_at>=? "
                                "ORDER BY created_at DESC, rowid DESC", (customer_id, since)).fetchall()
        return [_refund(r) for r in rows]

    def list_transfers(self, customer_id: str) -> list[Transfer]:
        """The customer's transfers, newest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM transfers WHERE customer_id=? "
                                "ORDER BY created_at DESC, id DESC", (customer_id,)).fetchall()
        return [_transfer(r) for r in rows]

    def get_transfer(self, customer_id: str, transfer_id: str) -> Transfer | None:
        """The transfer if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM transfers WHERE id=? AND customer_id=?",
                               (transfer_id, customer_id)).fetchone()
        return _transfer(row) if row else None

    def get_task(self, task_id: str) -> Task | None:
        """The task, or None."""
        with self._read() as conn:
            row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
        return _task(row) if row else None

    def list_decisions(self, task_id: str) -> list[Decision]:
        """The approval decisions recorded for a task, oldest first."""
        with self._read() as conn:
            rows = conn.execute("SELECT * FROM decisions WHERE task_id=? ORDER BY decided_at, rowid",
                                (task_id,)).fetchall()
        return [_decision(r) for r in rows]

    def side_effect_result(self, idempotency_key: str) -> dict[str, Any] | None:
        """The recorded result of the side effect run under this key, or None if it never ran."""
        with self._read() as conn:
            row = conn.execute("SELECT result_json FROM side_effects WHERE idempotency_key=?",
                               (idempotency_key,)).fetchone()
        return json.loads(row[0]) if row else None

    # -- refund rules -------------------------------------------------------------------------------

    def _refund_refusal(self, conn: sqlite3.Connection, customer_id: str,
                        transaction_id: str) -> tuple[str | None, Transaction | None]:
        row = conn.execute("SELECT * FROM transactions WHERE id=? AND customer_id=?",
                           (transaction_id, customer_id)).fetchone()
        if row is None:
            return f"no transaction {transaction_id} on this account", None
        tx = _tx(row)
        if tx.kind not in REFUNDABLE_TX_KINDS:
            return (f"{tx.id} is a {tx.kind.replace('_', ' ')}; only card payments and fees can be "
                    "refunded"), tx
        if tx.status != "posted":
            return f"{tx.id} is {tx.status}, not posted; only posted transactions can be refunded", tx
        if self.now() - parse_iso(tx.created_at) > timedelta(days=REFUND_WINDOW_DAYS):
            return f"{tx.id} is older than {REFUND_WINDOW_DAYS} days", tx
        active = conn.execute(
            "SELECT id, status FROM refunds WHERE transaction_id=? AND status IN "
            "('requested','approved','executed') ORDER BY created_at, rowid LIMIT 1", (tx.id,)).fetchone()
        if active is not None:
            return f"{tx.id} already has refund {active['id']} ({active['status']})", tx
        return None, tx

    def refund_eligibility(self, customer_id: str, transaction_id: str) -> tuple[bool, str]:
        """``(eligible, reason)`` for refunding the whole of one of the customer's transactions: it must
        be the customer's, a posted card payment or fee, at most :data:`REFUND_WINDOW_DAYS` old, and
        have no requested/approved/executed refund. ``reason`` is "eligible" or a one-line refusal."""
        with self._read() as conn:
            refusal, _ = self._refund_refusal(conn, customer_id, transaction_id)
        return (refusal is None), (refusal or "eligible")

    # -- writes: refunds ----------------------------------------------------------------------------

    def request_refund(self, customer_id: str, transaction_id: str, amount_minor: int, currency: str,
                       reason: str, idempotency_key: str | None) -> Refund:
        """Create a refund in status ``requested`` (nothing is paid; see :meth:`execute_refund`).

        Idempotent by ``idempotency_key``: a repeat with the same key returns the first refund and
        creates nothing. Raises :class:`BusinessRuleError` when the key was used for another
        customer/transaction, when the transaction is not the customer's (:class:`NotFoundError`), not
        refundable (see :meth:`refund_eligibility`, including "already refunded/requested"), when
        ``currency`` differs from the transaction's, or ``amount_minor`` is not in
        ``1..transaction.amount_minor``."""
        with self._write() as conn:
            if idempotency_key is not None:
                row = conn.execute("SELECT * FROM refunds WHERE idempotency_key=?",
                                   (idempotency_key,)).fetchone()
                if row is not None:
                    existing = _refund(row)
                    if (existing.customer_id, existing.transaction_id) != (customer_id, transaction_id):
                        raise BusinessRuleError(
                            f"idempotency key {idempotency_key!r} was already used for another request")
                    return existing
            refusal, tx = self._refund_refusal(conn, customer_id, transaction_id)
            if tx is None:
                raise NotFoundError(refusal or f"no transaction {transaction_id} on this account")
            if refusal is not None:
                raise BusinessRuleError(refusal)
            if currency.upper() != tx.currency:
                raise BusinessRuleError(f"{tx.id} is in {tx.currency}, not {currency.upper()}")
            if not 0 < int(amount_minor) <= tx.amount_minor:
                raise BusinessRuleError(
                    f"refund amount must be between 0.01 and {money_plain(tx.amount_minor, tx.currency)}")
            refund = Refund(
                id=f"rf_{uuid.uuid4().hex[:8]}", customer_id=customer_id, transaction_id=tx.id,
                amount_minor=int(amount_minor), currency=tx.currency, status="requested",
                reason=reason.strip(), created_at=iso(self.now()), idempotency_key=idempotency_key,
                version=1)
            conn.execute(
                "INSERT INTO refunds(id, customer_id, transaction_id, amount_minor, currency, status, "
                "reason, created_at, idempotency_key, version) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (refund.id, refund.customer_id, refund.transaction_id, refund.amount_minor,
                 refund.currency, refund.status, refund.reason, refund.created_at,
                 refund.idempotency_key, refund.version))
        return refund

    def set_refund_status(self, refund_id: str, expected_version: int, status: str) -> Refund:
        """Compare-and-swap the refund's status along :data:`REFUND_TRANSITIONS` and return the new
        row (``version`` + 1). Raises ``ValueError`` (unknown status), :class:`NotFoundError`,
        :class:`StaleVersionError` (version differs: re-read and decide again),
        :class:`BusinessRuleError` (illegal transition; ``executed`` only via :meth:`execute_refund`)."""
        if status not in REFUND_STATUSES:
            raise ValueError(f"unknown refund status {status!r}")
        with self._write() as conn:
            row = conn.execute("SELECT * FROM refunds WHERE id=?", (refund_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no refund {refund_id}")
            current = _refund(row)
            if current.version != expected_version:
                raise StaleVersionError(
                    f"refund {refund_id} is at version {current.version}, not {expected_version}")
            if status not in REFUND_TRANSITIONS[current.status]:
                raise BusinessRuleError(f"refund {refund_id} cannot go from {current.status} to {status}")
            cur = conn.execute("UPDATE refunds SET status=?, version=version+1 WHERE id=? AND version=?",
                               (status, refund_id, expected_version))
            if cur.rowcount != 1:  # pragma: no cover - excluded by the immediate transaction
                raise StaleVersionError(f"refund {refund_id} changed concurrently")
            row = conn.execute("SELECT * FROM refunds WHERE id=?", (refund_id,)).fetchone()
        return _refund(row)

    def execute_refund(self, refund_id: str, idempotency_key: str) -> dict[str, Any]:
        """Pay a requested or approved refund, exactly once.

        In one SQLite transaction: if ``side_effects`` holds ``idempotency_key``, return its recorded
        result plus ``"replayed": True`` and change nothing; otherwise flip the refund to ``executed``
        (CAS on version), post a ``transfer_in`` credit transaction ``tx_<refund_id>`` referencing the
        refund, record the result under the key, and return it with ``"replayed": False``.

        Result shape: ``{"refund_id", "transaction_id", "credit_transaction_id", "amount_minor",
        "currency", "status": "executed", "executed_at", "idempotency_key", "replayed"}``.
        Raises :class:`NotFoundError`, :class:`BusinessRuleError` (refund cancelled, rejected, or
        already executed under another key)."""
        with self._write() as conn:
            row = conn.execute("SELECT result_json FROM side_effects WHERE idempotency_key=?",
                               (idempotency_key,)).fetchone()
            if row is not None:
                return {**json.loads(row[0]), "replayed": True}
            row = conn.execute("SELECT * FROM refunds WHERE id=?", (refund_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no refund {refund_id}")
            refund = _refund(row)
            if refund.status in ("cancelled", "rejected"):
                raise BusinessRuleError(f"refund {refund_id} is {refund.status} and cannot be paid")
            if refund.status == "executed":
                raise BusinessRuleError(f"refund {refund_id} was already paid")
            cur = conn.execute(
                "UPDATE refunds SET status='executed', version=version+1 WHERE id=? AND version=?",
                (refund_id, refund.version))
            if cur.rowcount != 1:  # pragma: no cover - excluded by the immediate transaction
                raise StaleVersionError(f"refund {refund_id} changed concurrently")
            now = iso(self.now())
            credit_id = f"tx_{refund.id}"
            conn.execute(
                "INSERT INTO transactions(id, customer_id, card_id, merchant, amount_minor, currency, "
                "kind, status, created_at, reference) VALUES (?,?,?,?,?,?,?,?,?,?)",
                (credit_id, refund.customer_id, None, f"Refund {refund.id}", refund.amount_minor,
                 refund.currency, "transfer_in", "posted", now, refund.id))
            result = {
                "refund_id": refund.id, "transaction_id": refund.transaction_id,
                "credit_transaction_id": credit_id, "amount_minor": refund.amount_minor,
                "currency": refund.currency, "status": "executed", "executed_at": now,
                "idempotency_key": idempotency_key,
            }
            conn.execute("INSERT INTO side_effects(idempotency_key, kind, result_json, created_at) "
                         "VALUES (?,?,?,?)", (idempotency_key, "execute_refund", json.dumps(result), now))
        return {**result, "replayed": False}

    # -- writes: cards ------------------------------------------------------------------------------

    def freeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        """Freeze one of the customer's cards, idempotent by key (a repeat returns the first result
        with ``"replayed": True``). Freezing an already frozen card succeeds with
        ``"already_frozen": True``.

        Result shape: ``{"card_id", "last4", "kind", "previous_status", "status": "frozen",
        "already_frozen", "idempotency_key", "replayed"}``. Raises :class:`NotFoundError` (not this
        customer's card), :class:`BusinessRuleError` (card blocked or expired: nothing to freeze)."""
        with self._write() as conn:
            row = conn.execute("SELECT result_json FROM side_effects WHERE idempotency_key=?",
                               (idempotency_key,)).fetchone()
            if row is not None:
                return {**json.loads(row[0]), "replayed": True}
            row = conn.execute("SELECT * FROM cards WHERE id=? AND customer_id=?",
                               (card_id, customer_id)).fetchone()
            if row is None:
                raise NotFoundError(f"no card {card_id} on this account")
            card = _card(row)
            if card.status in ("blocked", "expired"):
                raise BusinessRuleError(
                    f"card ending {card.last4} is already {card.status} and cannot be used")
            if card.status == "active":
                cur = conn.execute(
                    "UPDATE cards SET status='frozen', version=version+1 WHERE id=? AND version=?",
                    (card.id, card.version))
                if cur.rowcount != 1:  # pragma: no cover - excluded by the immediate transaction
                    raise StaleVersionError(f"card {card.id} changed concurrently")
            now = iso(self.now())
            result = {
                "card_id": card.id, "last4": card.last4, "kind": card.kind,
                "previous_status": card.status, "status": "frozen",
                "already_frozen": card.status == "frozen", "idempotency_key": idempotency_key,
            }
            conn.execute("INSERT INTO side_effects(idempotency_key, kind, result_json, created_at) "
                         "VALUES (?,?,?,?)", (idempotency_key, "freeze_card", json.dumps(result), now))
        return {**result, "replayed": False}

    # -- writes: tasks and decisions ----------------------------------------------------------------

    def create_task(self, task_id: str, thread_id: str, owner: str) -> Task:
        """Create the task (status ``open``, ``owner_version`` 1, ``version`` 1) or, if it exists,
        return it unchanged (idempotent; the existing row wins even if ``owner`` differs)."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO tasks(id, thread_id, status, current_owner, owner_version, "
                "version, updated_at) VALUES (?,?,?,?,?,?,?)",
                (task_id, thread_id, "open", owner, 1, 1, iso(self.now())))
            row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
        return _task(row)

    _TASK_FIELDS = frozenset({"status"})

    def update_task(self, task_id: str, expected_version: int, *, owner: str | None = None,
                    owner_version: int | None = None, **fields: Any) -> Task:
        """Compare-and-swap write of task ``fields`` (only ``status`` may be set this way; ownership
        moves through :meth:`claim_task`). ``version`` + 1, ``updated_at`` = now.

        Fencing: when ``owner``/``owner_version`` are given, the write is refused with
        :class:`OwnershipError` unless the task is still held by that owner at that owner_version.
        Raises ``TypeError`` (a field that cannot be set), ``ValueError`` (unknown status),
        :class:`NotFoundError`, :class:`OwnershipError`, :class:`StaleVersionError`."""
        unknown = set(fields) - self._TASK_FIELDS
        if unknown:
            raise TypeError(f"update_task cannot set {sorted(unknown)}; allowed: {sorted(self._TASK_FIELDS)}")
        if not fields:
            raise TypeError("update_task needs at least one field")
        if "status" in fields and fields["status"] not in TASK_STATUSES:
            raise ValueError(f"unknown task status {fields['status']!r}")
        with self._write() as conn:
            row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no task {task_id}")
            task = _task(row)
            if owner is not None and task.current_owner != owner:
                raise OwnershipError(f"task {task_id} is held by {task.current_owner}, not {owner}")
            if owner_version is not None and task.owner_version != owner_version:
                raise OwnershipError(
                    f"task {task_id} was claimed again (owner_version {task.owner_version}, "
                    f"writer holds {owner_version})")
            if task.version != expected_version:
                raise StaleVersionError(
                    f"task {task_id} is at version {task.version}, not {expected_version}")
            sets = ", ".join(f"{name}=?" for name in fields)
            cur = conn.execute(
                f"UPDATE tasks SET {sets}, version=version+1, updated_at=? WHERE id=? AND version=?",
                (*fields.values(), iso(self.now()), task_id, expected_version))
            if cur.rowcount != 1:  # pragma: no cover - excluded by the immediate transaction
                raise StaleVersionError(f"task {task_id} changed concurrently")
            row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
        return _task(row)

    def claim_task(self, task_id: str, new_owner: str, expected_owner_version: int) -> Task:
        """Move the task to ``new_owner`` if its ``owner_version`` is still ``expected_owner_version``;
        bumps ``owner_version`` and ``version``. A claim based on an outdated view of ownership (someone
        claimed since) raises :class:`OwnershipError`; a missing task :class:`NotFoundError`."""
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE tasks SET current_owner=?, owner_version=owner_version+1, version=version+1, "
                "updated_at=? WHERE id=? AND owner_version=?",
                (new_owner, iso(self.now()), task_id, expected_owner_version))
            row = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
            if row is None:
                raise NotFoundError(f"no task {task_id}")
            if cur.rowcount != 1:
                raise OwnershipError(
                    f"task {task_id} is held by {row['current_owner']} at owner_version "
                    f"{row['owner_version']}, not {expected_owner_version}")
        return _task(row)

    def record_decision(self, task_id: str, approver: str, decision: str, note: str = "", *,
                        decision_id: str | None = None) -> Decision:
        """Record a human decision (``decision`` in :data:`DECISIONS`, else ``ValueError``). With a
        ``decision_id`` the call is idempotent (a repeat returns the stored decision); without one a
        fresh ``dc_<hex>`` id is made. Raises :class:`NotFoundError` if the task does not exist."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}; expected one of {sorted(DECISIONS)}")
        did = decision_id or f"dc_{uuid.uuid4().hex[:8]}"
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM tasks WHERE id=?", (task_id,)).fetchone() is None:
                raise NotFoundError(f"no task {task_id}")
            conn.execute("INSERT OR IGNORE INTO decisions(id, task_id, approver, decision, note, "
                         "decided_at) VALUES (?,?,?,?,?,?)",
                         (did, task_id, approver, decision, note, iso(self.now())))
            row = conn.execute("SELECT * FROM decisions WHERE id=?", (did,)).fetchone()
        return _decision(row)

    def decide_approval(self, task_id: str, decision_id: str, approver: str, decision: str,
                        note: str = "", refund_id: str | None = None) -> tuple[Decision, bool]:
        """Decide a task that waits for approval, atomically and at most once.

        In one ``BEGIN IMMEDIATE`` transaction: if a decision with ``decision_id`` exists, return it with
        ``won=True`` (an idempotent replay: LangGraph re-runs an interrupted node from its first line). Else,
        if the task is ``awaiting_approval``, compare-and-swap its status (approve -> ``open`` until the
        refund is paid, reject -> ``completed``, cancel -> ``cancelled``), move ``refund_id`` (if given)
        to approved/rejected/cancelled, record the decision, and return ``(decision, True)``. Otherwise the
        task was already decided or cancelled: return ``(the earlier decision, False)`` and change nothing.

        Raises ``ValueError`` (unknown decision), :class:`NotFoundError` (no such task, or no earlier decision
        although the task is not awaiting approval)."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}; expected one of {sorted(DECISIONS)}")
        with self._write() as conn:
            row = conn.execute("SELECT * FROM decisions WHERE id=?", (decision_id,)).fetchone()
            if row is not None:
                return _decision(row), True
            trow = conn.execute("SELECT * FROM tasks WHERE id=?", (task_id,)).fetchone()
            if trow is None:
                raise NotFoundError(f"no task {task_id}")
            task = _task(trow)
            if task.status != "awaiting_approval":
                prev = conn.execute("SELECT * FROM decisions WHERE task_id=? ORDER BY decided_at, rowid LIMIT 1",
                                    (task_id,)).fetchone()
                if prev is None:
                    raise NotFoundError(f"task {task_id} is {task.status} and has no decision")
                return _decision(prev), False
            new_status = {"approve": "open", "reject": "completed", "cancel": "cancelled"}[decision]
            cur = conn.execute("UPDATE tasks SET status=?, version=version+1, updated_at=? WHERE id=? AND version=?",
                               (new_status, iso(self.now()), task_id, task.version))
            if cur.rowcount != 1:  # pragma: no cover - excluded by the immediate transaction
                raise StaleVersionError(f"task {task_id} changed concurrently")
            if refund_id:
                refund_status = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}[decision]
                conn.execute("UPDATE refunds SET status=?, version=version+1 WHERE id=? AND status='requested'",
                             (refund_status, refund_id))
            conn.execute("INSERT INTO decisions(id, task_id, approver, decision, note, decided_at) VALUES (?,?,?,?,?,?)",
                         (decision_id, task_id, approver, decision, note, iso(self.now())))
            row = conn.execute("SELECT * FROM decisions WHERE id=?", (decision_id,)).fetchone()
        return _decision(row), True


# --------------------------------------------------------------------------------------------------
# Opening
# --------------------------------------------------------------------------------------------------


def default_store_path() -> Path:
    """``$SWITCHBOARD_HOME/business.db``; ``SWITCHBOARD_HOME`` defaults to ``./.switchboard``."""
    return Path(os.environ.get("SWITCHBOARD_HOME") or ".switchboard") / "business.db"


def open_store(path: Path | str | None = None, *, seed: bool = True,
               now: Callable[[], datetime] | None = None) -> BusinessStore:
    """Open (creating schema and parent directory if needed) the business database at ``path``
    (default :func:`default_store_path`). With ``seed`` (default), seed the demo data when the database
    has no customers yet (first open); later opens never re-seed, so deleted demo rows stay deleted."""
    store = BusinessStore(path if path is not None else default_store_path(), now=now)
    if seed and store.is_empty():
        store.seed_demo()
    return store
