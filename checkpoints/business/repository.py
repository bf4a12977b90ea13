"""The business store: customers, cards, transactions, refunds, transfers, tasks, side effects and approval
decisions, in one database (a SQLite file or PostgreSQL), written once in SQLAlchemy Core for both engines.

Business state lives here, not in the prompt and not in graph state (DESIGN.md, "State").

Conventions
-----------
* Money is an integer amount in **minor units** plus an ISO 4217 code (:mod:`checkpoints.business.money`);
  ``amount_minor`` is always >= 0 and the direction of a transaction follows from its ``kind``.
* Timestamps are ``YYYY-MM-DDTHH:MM:SSZ`` UTC strings (string order is time order). The clock is injectable
  (``BusinessStore(target, now=...)``) for tests.
* Every mutable row has a ``version`` column. Writes are compare-and-swap (``UPDATE … WHERE id=? AND
  version=?``); a different version raises :class:`StaleVersionError` and the caller re-reads and decides again.
* Every side effect (refund execution, card freeze) is idempotent by a caller-chosen key, claimed in
  ``side_effects`` inside the same transaction as the effect: a repeat with the same key returns the first
  result with ``"replayed": True`` and changes nothing (DESIGN.md, control-flow rule 5).
* Concurrency: a pooled connection per call (a store object may be shared by threads; processes may share the
  database). Every read-modify-write is one transaction that serialises with its rivals: on SQLite it begins
  with ``BEGIN IMMEDIATE`` (the file's write lock, WAL, busy timeout; see :mod:`checkpoints.business.engine`);
  on PostgreSQL it locks the rows it decides on (``SELECT … FOR UPDATE``: the refund, the card, the task, the
  transaction being refunded) and inserts keys with ``INSERT … ON CONFLICT DO NOTHING``, which waits for a
  rival holding the same key and then reports the conflict. Either way two callers racing produce one winner.
* Opening a store migrates the database to the schema this code expects (:mod:`checkpoints.business.migrate`).

Errors: :class:`StaleVersionError` (CAS lost), :class:`BusinessRuleError` (the request breaks a business rule;
:class:`NotFoundError` is a subclass), :class:`OwnershipError` (a write from a former task owner),
:class:`StorageUnavailable` (the database cannot be reached or used), ``ValueError`` (a malformed argument such
as an unknown status string).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Table, func, select, update
from sqlalchemy.engine import URL, Connection, Engine, RowMapping

from checkpoints.business import schema as t
from checkpoints.business.engine import (
    WRITE,
    default_store_path,
    describe,
    dispose,
    engine_for,
    resolve_url,
    sqlite_path,
    storage_errors,
)
from checkpoints.business.migrate import ensure_schema
from checkpoints.business.money import iso, money_plain, parse_iso
from checkpoints.business.records import (
    ACTIVE_REFUND_STATUSES,
    AUDIT_OUTCOMES,
    DECISIONS,
    DUPLICATE_WINDOW_HOURS,
    OPERATOR_ROLES,
    PRINCIPAL_KINDS,
    REFUND_STATUSES,
    REFUND_TRANSITIONS,
    REFUND_WINDOW_DAYS,
    REFUNDABLE_TX_KINDS,
    TASK_STATUSES,
    TX_KIND_PHRASES,
    TX_KINDS,
    UNPAID_FINAL_REFUND_STATUSES,
    AuditEntry,
    BusinessRuleError,
    Card,
    Customer,
    Decision,
    NotFoundError,
    Operator,
    OwnershipError,
    PaymentNotAuthorized,
    Refund,
    StaleVersionError,
    Task,
    ThreadOwner,
    Token,
    Transaction,
    Transfer,
)
from graph.contracts.context import OPERATOR_NAME_RE, RESERVED_NAMES, SYSTEM_RISK_POLICY

__all__ = ["BusinessStore", "open_store", "token_digest"]

R = TypeVar("R")


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _columns(table: Table, record: type) -> list[Any]:
    """The table's columns that make up ``record`` (extra columns such as ``seq`` stay inside the store)."""
    return [table.c[f.name] for f in fields(record)]


_CUSTOMER = _columns(t.customers, Customer)
_CARD = _columns(t.cards, Card)
_TX = _columns(t.transactions, Transaction)
_REFUND = _columns(t.refunds, Refund)
_TRANSFER = _columns(t.transfers, Transfer)
_TASK = _columns(t.tasks, Task)
_DECISION = _columns(t.decisions, Decision)
_OPERATOR = _columns(t.operators, Operator)
_TOKEN = _columns(t.tokens, Token)
_AUDIT = _columns(t.audit, AuditEntry)
_OWNER = _columns(t.thread_owners, ThreadOwner)
#: What a refund becomes when its task is decided for good (``decide_approval``, ``close_task``).
_REFUND_AFTER = {"approve": "approved", "reject": "rejected", "cancel": "cancelled", "expire": "expired",
                 "close": "cancelled"}
#: What a task becomes when it is decided for good (approve: ``open`` until the refund is paid).
_TASK_AFTER = {"approve": "open", "reject": "completed", "cancel": "cancelled", "expire": "cancelled",
               "close": "cancelled"}


def _customer(row: RowMapping) -> Customer:
    return Customer(**{**row, "flags": json.loads(row["flags"] or "{}")})


def _record(cls: Callable[..., R], row: RowMapping | None) -> R | None:
    return cls(**row) if row is not None else None


def _decision_of(row: RowMapping | None) -> Decision | None:
    return None if row is None else Decision(**{**row, "final": bool(row["final"])})


def _operator_of(row: RowMapping | None) -> Operator | None:
    return None if row is None else Operator.from_row(row)


def _audit_of(row: RowMapping) -> AuditEntry:
    return AuditEntry(**{**row, "detail": json.loads(row["detail"] or "{}")})


def token_digest(token: str) -> str:
    """The hex SHA-256 of a bearer token: what the ``tokens`` table stores instead of the token."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class BusinessStore:
    """The business database over one SQLite file or one PostgreSQL database.

    ``BusinessStore(target, *, now=None)``: ``target`` is a file path (created with its parent directory if
    missing), ``sqlite:///path``, or ``postgresql://…`` (psycopg 3); ``":memory:"`` is refused with
    ``ValueError`` (every call uses a pooled connection, and an in-memory database is private to one). ``now``
    is a zero-argument callable returning an aware ``datetime`` (default: the UTC wall clock); it stamps
    ``created_at``/``updated_at`` and anchors the time windows.

    The constructor migrates the schema to the current revision if needed (idempotent, once per process and
    database) but does not seed; see :meth:`seed_demo` and :func:`open_store`. The object holds no connection
    of its own (the process's engine for the URL pools them), so it may be shared between threads; processes
    may open the same database. Raises :class:`StorageUnavailable` when the database cannot be opened,
    :class:`~graph.contracts.errors.ConfigError` for an unsupported URL.

    Attributes: ``url`` (the SQLAlchemy URL), ``path`` (the SQLite file, or None), ``name`` (how messages name
    the database: the path, or the URL without password).
    """

    def __init__(self, target: str | Path | URL, *, now: Callable[[], datetime] | None = None) -> None:
        self.url: URL = resolve_url(target)
        self.path: Path | None = sqlite_path(self.url)
        self.name = describe(self.url)
        self._now = now or _utcnow
        self._pid = os.getpid()
        self._engine_ref: Engine = engine_for(self.url)
        ensure_schema(self.url)
        self._dialect = self._engine_ref.dialect.name

    # -- plumbing ---------------------------------------------------------------------------------

    def now(self) -> datetime:
        """The store's clock (aware UTC ``datetime``)."""
        dt = self._now()
        return dt if dt.tzinfo else dt.replace(tzinfo=UTC)

    @property
    def engine(self) -> Engine:
        """This process's SQLAlchemy ``Engine`` for the store's URL (a forked child gets its own)."""
        if self._pid != os.getpid():
            self._engine_ref, self._pid = engine_for(self.url), os.getpid()
        return self._engine_ref

    def close(self) -> None:
        """Close the pooled connections to the database (the store reconnects if used again)."""
        dispose(self.url)

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        """A pooled connection for reads (one transaction, rolled back at the end: reads see one snapshot)."""
        with storage_errors(self.url), self.engine.connect() as conn:
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        """One write transaction (SQLite: ``BEGIN IMMEDIATE``, taking the write lock up front and waiting up to
        the busy timeout): commits on success, rolls back on any exception."""
        with storage_errors(self.url), self.engine.connect() as conn:
            conn.execution_options(**{WRITE: True})
            with conn.begin():
                yield conn

    def _insert_ignoring(self, table: Table, values: Mapping[str, Any]) -> Any:
        """``INSERT … ON CONFLICT DO NOTHING`` (any unique key); the result's ``rowcount`` is 1 or 0. On
        PostgreSQL a rival transaction holding the same key is waited for, then counts as the conflict."""
        statement: Any
        if self._dialect == "postgresql":  # the dialect modules are imported here: a SQLite store never loads asyncpg's
            from sqlalchemy.dialects import postgresql

            statement = postgresql.insert(table).values(dict(values)).on_conflict_do_nothing()
        else:
            from sqlalchemy.dialects import sqlite

            statement = sqlite.insert(table).values(dict(values)).on_conflict_do_nothing()
        return statement.execution_options(preserve_rowcount=True)  # rowcount of an INSERT is not kept otherwise

    @staticmethod
    def _next_seq(table: Table) -> Any:
        """``max(seq) + 1`` of ``table`` as a subquery (insertion order; see migration 0002)."""
        return select(func.coalesce(func.max(table.c.seq), 0) + 1).scalar_subquery()

    def is_empty(self) -> bool:
        """True when no customer exists yet (a fresh database)."""
        with self._read() as conn:
            return conn.execute(select(func.count()).select_from(t.customers)).scalar_one() == 0

    # -- seed ---------------------------------------------------------------------------------------

    def insert_rows(self, rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> int:
        """Insert rows given as ``{table name: [{column: value}, …]}``, in the given table order, in one
        transaction, skipping each row whose primary or unique key exists already; return how many were new.
        ``refunds`` and ``decisions`` rows get their insertion-order ``seq``. Used by
        :func:`checkpoints.business.seed.seed_demo`. Raises ``KeyError`` for an unknown table."""
        inserted = 0
        with self._write() as conn:
            for name, table_rows in rows.items():
                table = t.metadata.tables[name]
                for row in table_rows:
                    values = dict(row)
                    if "seq" in table.c and "seq" not in values:
                        values["seq"] = self._next_seq(table)
                    inserted += conn.execute(self._insert_ignoring(table, values)).rowcount
        return inserted

    def seed_demo(self, reference: datetime | None = None) -> int:
        """Insert the demo data (:func:`checkpoints.business.seed.seed_demo`, idempotent) and return how many
        rows were new (0 on a repeat). ``reference`` anchors the timestamps (default: ``now()``)."""
        from checkpoints.business.seed import seed_demo

        return seed_demo(self, reference)

    # -- reads: customers, cards, transactions ------------------------------------------------------

    def get_customer(self, customer_id: str, tenant_id: str | None = None) -> Customer | None:
        """The customer, or None if absent (or, when ``tenant_id`` is given, of another tenant)."""
        with self._read() as conn:
            row = conn.execute(select(*_CUSTOMER).where(t.customers.c.id == customer_id)).mappings().first()
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            return None
        return _customer(row)

    def list_cards(self, customer_id: str) -> list[Card]:
        """The customer's cards, ordered by id."""
        with self._read() as conn:
            rows = conn.execute(select(*_CARD).where(t.cards.c.customer_id == customer_id)
                                .order_by(t.cards.c.id)).mappings().all()
        return [Card(**r) for r in rows]

    def get_card(self, customer_id: str, card_id: str) -> Card | None:
        """The card if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            row = conn.execute(select(*_CARD).where(t.cards.c.id == card_id,
                                                    t.cards.c.customer_id == customer_id)).mappings().first()
        return _record(Card, row)

    def list_transactions(self, customer_id: str, limit: int = 20,
                          kind: str | None = None) -> list[Transaction]:
        """The customer's transactions, newest first, at most ``limit`` (>= 1); optionally only one
        ``kind`` (ValueError if not in :data:`TX_KINDS`)."""
        if kind is not None and kind not in TX_KINDS:
            raise ValueError(f"unknown transaction kind {kind!r}")
        tx = t.transactions
        query = select(*_TX).where(tx.c.customer_id == customer_id)
        if kind is not None:
            query = query.where(tx.c.kind == kind)
        query = query.order_by(tx.c.created_at.desc(), tx.c.id.desc()).limit(max(1, int(limit)))
        with self._read() as conn:
            rows = conn.execute(query).mappings().all()
        return [Transaction(**r) for r in rows]

    def refund_credit(self, customer_id: str, refund_id: str) -> Transaction | None:
        """The credit that paid refund ``refund_id`` back to ``customer_id``: the ``transfer_in`` transaction that
        :meth:`execute_refund` posted with the refund as its ``reference`` (its ``created_at`` is when the money
        arrived), or None while the refund is unpaid or is another customer's. Found by that reference, so it does
        not matter how many credits the account received after it."""
        tx = t.transactions
        query = (select(*_TX).where(tx.c.customer_id == customer_id, tx.c.kind == "transfer_in",
                                    tx.c.reference == refund_id)
                 .order_by(tx.c.created_at, tx.c.id).limit(1))
        with self._read() as conn:
            return _record(Transaction, conn.execute(query).mappings().first())

    def get_transaction(self, customer_id: str, tx_id: str) -> Transaction | None:
        """The transaction if it exists and belongs to ``customer_id``, else None."""
        with self._read() as conn:
            return _record(Transaction, self._transaction(conn, customer_id, tx_id))

    @staticmethod
    def _transaction(conn: Connection, customer_id: str, tx_id: str, *, lock: bool = False) -> RowMapping | None:
        query = select(*_TX).where(t.transactions.c.id == tx_id, t.transactions.c.customer_id == customer_id)
        return conn.execute(query.with_for_update() if lock else query).mappings().first()

    def find_duplicate_charges(self, customer_id: str) -> list[tuple[Transaction, Transaction]]:
        """Pairs ``(original, duplicate)`` of the customer's posted card payments with the same
        merchant, amount, currency and card, the duplicate within :data:`DUPLICATE_WINDOW_HOURS` after
        the original. The original is the earliest of a cluster; each later one pairs with it.
        Ordered by the duplicate's time, oldest first."""
        tx = t.transactions
        with self._read() as conn:
            rows = conn.execute(select(*_TX).where(tx.c.customer_id == customer_id, tx.c.kind == "card_payment",
                                                   tx.c.status == "posted")
                                .order_by(tx.c.created_at, tx.c.id)).mappings().all()
        window = timedelta(hours=DUPLICATE_WINDOW_HOURS)
        originals: dict[tuple[Any, ...], Transaction] = {}
        pairs: list[tuple[Transaction, Transaction]] = []
        for row in rows:
            payment = Transaction(**row)
            key = (payment.merchant.strip().lower(), payment.amount_minor, payment.currency, payment.card_id)
            first = originals.get(key)
            if first is not None and parse_iso(payment.created_at) - parse_iso(first.created_at) <= window:
                pairs.append((first, payment))
            else:
                originals[key] = payment
        return pairs

    # -- reads: refunds, transfers, tasks -----------------------------------------------------------

    def list_refunds(self, customer_id: str) -> list[Refund]:
        """The customer's refunds, newest first (ties in insertion order, newest first)."""
        rf = t.refunds
        with self._read() as conn:
            rows = conn.execute(select(*_REFUND).where(rf.c.customer_id == customer_id)
                                .order_by(rf.c.created_at.desc(), rf.c.seq.desc())).mappings().all()
        return [Refund(**r) for r in rows]

    def get_refund(self, customer_id: str, refund_id: str) -> Refund | None:
        """The refund if it exists and belongs to ``customer_id``, else None."""
        rf = t.refunds
        with self._read() as conn:
            row = conn.execute(select(*_REFUND).where(rf.c.id == refund_id, rf.c.customer_id == customer_id)
                               ).mappings().first()
        return _record(Refund, row)

    def load_refund(self, refund_id: str) -> Refund | None:
        """The refund by id regardless of customer (for system nodes such as approval/execution, whose
        authorisation was checked earlier); None if absent."""
        with self._read() as conn:
            return _record(Refund, self._refund(conn, refund_id))

    @staticmethod
    def _refund(conn: Connection, refund_id: str, *, lock: bool = False) -> RowMapping | None:
        query = select(*_REFUND).where(t.refunds.c.id == refund_id)
        return conn.execute(query.with_for_update() if lock else query).mappings().first()

    def find_refund_by_key(self, idempotency_key: str) -> Refund | None:
        """The refund created with this idempotency key, or None."""
        with self._read() as conn:
            return _record(Refund, self._refund_by_key(conn, idempotency_key))

    @staticmethod
    def _refund_by_key(conn: Connection, idempotency_key: str) -> RowMapping | None:
        return conn.execute(select(*_REFUND).where(t.refunds.c.idempotency_key == idempotency_key)
                            ).mappings().first()

    def refunds_for_transaction(self, customer_id: str, transaction_id: str) -> list[Refund]:
        """All refunds (any status) of one of the customer's transactions, oldest first."""
        rf = t.refunds
        with self._read() as conn:
            rows = conn.execute(select(*_REFUND).where(rf.c.customer_id == customer_id,
                                                       rf.c.transaction_id == transaction_id)
                                .order_by(rf.c.created_at, rf.c.seq)).mappings().all()
        return [Refund(**r) for r in rows]

    def refunds_in_last_days(self, customer_id: str, days: int) -> list[Refund]:
        """The customer's refunds (any status) created within the last ``days`` days of ``now()``,
        newest first. Used e.g. by a risk check on refund frequency."""
        since = iso(self.now() - timedelta(days=days))
        rf = t.refunds
        with self._read() as conn:
            rows = conn.execute(select(*_REFUND).where(rf.c.customer_id == customer_id, rf.c.created_at >= since)
                                .order_by(rf.c.created_at.desc(), rf.c.seq.desc())).mappings().all()
        return [Refund(**r) for r in rows]

    def list_transfers(self, customer_id: str) -> list[Transfer]:
        """The customer's transfers, newest first."""
        tr = t.transfers
        with self._read() as conn:
            rows = conn.execute(select(*_TRANSFER).where(tr.c.customer_id == customer_id)
                                .order_by(tr.c.created_at.desc(), tr.c.id.desc())).mappings().all()
        return [Transfer(**r) for r in rows]

    def get_transfer(self, customer_id: str, transfer_id: str) -> Transfer | None:
        """The transfer if it exists and belongs to ``customer_id``, else None."""
        tr = t.transfers
        with self._read() as conn:
            row = conn.execute(select(*_TRANSFER).where(tr.c.id == transfer_id, tr.c.customer_id == customer_id)
                               ).mappings().first()
        return _record(Transfer, row)

    def get_task(self, task_id: str) -> Task | None:
        """The task, or None."""
        with self._read() as conn:
            return _record(Task, self._task(conn, task_id))

    def tasks_of_refund(self, refund_id: str) -> list[Task]:
        """The tasks that decide ``refund_id`` (``tasks.refund_id``), oldest update first: normally one, the task of
        the conversation that requested it (or the task ``switchboard tasks approve`` opened for a refund without
        one)."""
        tk = t.tasks
        with self._read() as conn:
            rows = conn.execute(select(*_TASK).where(tk.c.refund_id == refund_id)
                                .order_by(tk.c.updated_at, tk.c.id)).mappings().all()
        return [Task(**r) for r in rows]

    def tasks_of_thread(self, thread_id: str) -> list[Task]:
        """The tasks of conversation ``thread_id`` that decide a refund, oldest update first (the thread's waiting
        approval is the one ``awaiting_approval``)."""
        tk = t.tasks
        with self._read() as conn:
            rows = conn.execute(select(*_TASK).where(tk.c.thread_id == thread_id, tk.c.refund_id.is_not(None))
                                .order_by(tk.c.updated_at, tk.c.id)).mappings().all()
        return [Task(**r) for r in rows]

    @staticmethod
    def _task(conn: Connection, task_id: str, *, lock: bool = False) -> RowMapping | None:
        query = select(*_TASK).where(t.tasks.c.id == task_id)
        return conn.execute(query.with_for_update() if lock else query).mappings().first()

    def list_decisions(self, task_id: str) -> list[Decision]:
        """The approval decisions recorded for a task, oldest first (ties in insertion order)."""
        dc = t.decisions
        with self._read() as conn:
            rows = conn.execute(select(*_DECISION).where(dc.c.task_id == task_id)
                                .order_by(dc.c.decided_at, dc.c.seq)).mappings().all()
        return [d for d in map(_decision_of, rows) if d is not None]

    def refund_decision(self, refund_id: str) -> Decision | None:
        """The final decision that ended ``refund_id``: the first ``final`` decision of the task that decides it
        (``tasks.refund_id``), or None (no task decides it, or no final decision yet). Its ``decided_at`` is when a
        refund was approved, rejected, cancelled, closed or expired (refunds keep no time of their own but
        ``created_at``)."""
        dc, tk = t.decisions, t.tasks
        with self._read() as conn:
            row = conn.execute(select(*_DECISION).join(tk, tk.c.id == dc.c.task_id)
                               .where(tk.c.refund_id == refund_id, dc.c.final == 1)
                               .order_by(dc.c.decided_at, dc.c.seq).limit(1)).mappings().first()
        return _decision_of(row)

    def get_decision(self, decision_id: str) -> Decision | None:
        """The decision recorded under ``decision_id``, or None."""
        with self._read() as conn:
            return _decision_of(self._decision(conn, decision_id))

    @staticmethod
    def _decision(conn: Connection, decision_id: str) -> RowMapping | None:
        return conn.execute(select(*_DECISION).where(t.decisions.c.id == decision_id)).mappings().first()

    def side_effect_result(self, idempotency_key: str) -> dict[str, Any] | None:
        """The recorded result of the side effect run under this key, or None if it never ran."""
        with self._read() as conn:
            return self._side_effect(conn, idempotency_key)

    @staticmethod
    def _side_effect(conn: Connection, idempotency_key: str) -> dict[str, Any] | None:
        raw = conn.execute(select(t.side_effects.c.result_json)
                           .where(t.side_effects.c.idempotency_key == idempotency_key)).scalar()
        return json.loads(raw) if raw else None

    # -- refund rules -------------------------------------------------------------------------------

    def _refund_refusal(self, conn: Connection, tx: Transaction | None,
                        transaction_id: str) -> str | None:
        if tx is None:
            return f"no transaction {transaction_id} on this account"
        if tx.kind not in REFUNDABLE_TX_KINDS:
            kind = TX_KIND_PHRASES.get(tx.kind, "a " + tx.kind.replace("_", " "))
            return f"{tx.id} is {kind}; only card payments and fees can be refunded"
        if tx.status != "posted":
            return f"{tx.id} is {tx.status}, not posted; only posted transactions can be refunded"
        if self.now() - parse_iso(tx.created_at) > timedelta(days=REFUND_WINDOW_DAYS):
            return f"{tx.id} is older than {REFUND_WINDOW_DAYS} days"
        rf = t.refunds
        active = conn.execute(select(rf.c.id, rf.c.status)
                              .where(rf.c.transaction_id == tx.id, rf.c.status.in_(sorted(ACTIVE_REFUND_STATUSES)))
                              .order_by(rf.c.created_at, rf.c.seq).limit(1)).first()
        if active is not None:
            return f"{tx.id} already has refund {active.id} ({active.status})"
        return None

    def refund_eligibility(self, customer_id: str, transaction_id: str) -> tuple[bool, str]:
        """``(eligible, reason)`` for refunding the whole of one of the customer's transactions: it must
        be the customer's, a posted card payment or fee, at most :data:`REFUND_WINDOW_DAYS` old, and
        have no requested/approved/executed refund. ``reason`` is "eligible" or a one-line refusal."""
        with self._read() as conn:
            tx = _record(Transaction, self._transaction(conn, customer_id, transaction_id))
            refusal = self._refund_refusal(conn, tx, transaction_id)
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
        ``1..transaction.amount_minor``. Two requests racing for one transaction serialise on it (its row
        is locked on PostgreSQL), so at most one refund becomes active."""
        with self._write() as conn:
            tx = _record(Transaction, self._transaction(conn, customer_id, transaction_id, lock=True))
            existing = self._replay_request(conn, idempotency_key, customer_id, transaction_id)
            if existing is not None:
                return existing
            refusal = self._refund_refusal(conn, tx, transaction_id)
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
            values = {**refund.to_dict(), "seq": self._next_seq(t.refunds)}
            if conn.execute(self._insert_ignoring(t.refunds, values)).rowcount != 1:
                # a rival committed the same key (for another transaction: ours is locked) meanwhile
                existing = self._replay_request(conn, idempotency_key, customer_id, transaction_id)
                if existing is None:  # pragma: no cover - a random 32-bit id collided
                    raise StaleVersionError(f"refund {refund.id} collided with a concurrent write; try again")
                return existing
        return refund

    def _replay_request(self, conn: Connection, idempotency_key: str | None, customer_id: str,
                        transaction_id: str) -> Refund | None:
        if idempotency_key is None:
            return None
        existing = _record(Refund, self._refund_by_key(conn, idempotency_key))
        if existing is not None and (existing.customer_id, existing.transaction_id) != (customer_id, transaction_id):
            # customer-facing (the desk shows store refusals): no key, which holds internal task ids
            raise BusinessRuleError("this request was already used for another refund; nothing was changed")
        return existing

    def set_refund_status(self, refund_id: str, expected_version: int, status: str) -> Refund:
        """Compare-and-swap the refund's status along :data:`REFUND_TRANSITIONS` and return the new
        row (``version`` + 1). Raises ``ValueError`` (unknown status), :class:`NotFoundError`,
        :class:`StaleVersionError` (version differs: re-read and decide again),
        :class:`BusinessRuleError` (illegal transition; ``executed`` only via :meth:`execute_refund`)."""
        if status not in REFUND_STATUSES:
            raise ValueError(f"unknown refund status {status!r}")
        with self._write() as conn:
            current = _record(Refund, self._refund(conn, refund_id, lock=True))
            if current is None:
                raise NotFoundError(f"no refund {refund_id}")
            if current.version != expected_version:
                raise StaleVersionError(
                    f"refund {refund_id} is at version {current.version}, not {expected_version}")
            if status not in REFUND_TRANSITIONS[current.status]:
                raise BusinessRuleError(f"refund {refund_id} cannot go from {current.status} to {status}")
            self._cas(conn, t.refunds, refund_id, expected_version, status=status)
            updated = _record(Refund, self._refund(conn, refund_id))
        assert updated is not None
        return updated

    @staticmethod
    def _cas(conn: Connection, table: Table, row_id: str, expected_version: int, **values: Any) -> None:
        """``UPDATE table SET values…, version = version + 1 WHERE id = ? AND version = ?``; raises
        :class:`StaleVersionError` when no row matched (cannot happen after the row lock / write lock)."""
        result = conn.execute(update(table).where(table.c.id == row_id, table.c.version == expected_version)
                              .values(**values, version=table.c.version + 1))
        if result.rowcount != 1:  # pragma: no cover - excluded by the lock held since the read
            raise StaleVersionError(f"{table.name[:-1]} {row_id} changed concurrently")

    def _claim_key(self, conn: Connection, idempotency_key: str, kind: str) -> dict[str, Any] | None:
        """Claim ``idempotency_key`` for a side effect inside the caller's transaction. Returns None when the key
        is ours (the effect must run, then :meth:`_record_effect`), or the recorded result of the earlier run
        (the caller returns it as a replay). On PostgreSQL a rival transaction holding the key is waited for."""
        recorded = self._side_effect(conn, idempotency_key)
        if recorded is not None:
            return recorded
        claim = {"idempotency_key": idempotency_key, "kind": kind, "result_json": "{}",
                 "created_at": iso(self.now())}
        if conn.execute(self._insert_ignoring(t.side_effects, claim)).rowcount == 1:
            return None
        recorded = self._side_effect(conn, idempotency_key)
        if recorded is None:  # pragma: no cover - the rival's claim is committed with its result
            raise StaleVersionError(f"side effect {idempotency_key} is being recorded concurrently; try again")
        return recorded

    @staticmethod
    def _record_effect(conn: Connection, idempotency_key: str, result: dict[str, Any]) -> None:
        conn.execute(update(t.side_effects).where(t.side_effects.c.idempotency_key == idempotency_key)
                     .values(result_json=json.dumps(result)))

    def execute_refund(self, refund_id: str, idempotency_key: str) -> dict[str, Any]:
        """Pay an approved refund, exactly once, on the authority of this store's own records.

        In one transaction: lock the refund; if ``side_effects`` holds ``idempotency_key``, return its recorded
        result plus ``"replayed": True`` and change nothing; otherwise check that the records allow the payment
        (:meth:`_payment_refusal`: the refund is ``approved`` and a task deciding it holds the final decisions its
        recorded approval rule requires), then flip the refund to ``executed`` (CAS on
        version), post a ``transfer_in`` credit transaction ``tx_<refund_id>`` referencing the refund, record
        the result under the key, and return it with ``"replayed": False``. Two callers racing (same key or
        not, threads or processes) pay once: the loser replays or is refused as "already paid".

        Result shape: ``{"refund_id", "transaction_id", "credit_transaction_id", "amount_minor",
        "currency", "status": "executed", "executed_at", "idempotency_key", "replayed"}``.
        Raises :class:`NotFoundError`, :class:`BusinessRuleError` (refund cancelled, expired, rejected, or
        already executed under another key), :class:`PaymentNotAuthorized` (not approved as the rules require)."""
        with self._write() as conn:
            refund = _record(Refund, self._refund(conn, refund_id, lock=True))
            recorded = self._claim_key(conn, idempotency_key, "execute_refund")
            if recorded is not None:
                return {**recorded, "replayed": True}
            if refund is None:
                raise NotFoundError(f"no refund {refund_id}")
            if refund.status in UNPAID_FINAL_REFUND_STATUSES:
                raise BusinessRuleError(f"refund {refund_id} is {refund.status} and cannot be paid")
            if refund.status == "executed":
                raise BusinessRuleError(f"refund {refund_id} was already paid")
            refusal = self._payment_refusal(conn, refund)
            if refusal:
                raise PaymentNotAuthorized(refusal)
            self._cas(conn, t.refunds, refund.id, refund.version, status="executed")
            now = iso(self.now())
            credit_id = f"tx_{refund.id}"
            conn.execute(t.transactions.insert().values(
                id=credit_id, customer_id=refund.customer_id, card_id=None, merchant=f"Refund {refund.id}",
                amount_minor=refund.amount_minor, currency=refund.currency, kind="transfer_in", status="posted",
                created_at=now, reference=refund.id))
            result = {
                "refund_id": refund.id, "transaction_id": refund.transaction_id,
                "credit_transaction_id": credit_id, "amount_minor": refund.amount_minor,
                "currency": refund.currency, "status": "executed", "executed_at": now,
                "idempotency_key": idempotency_key,
            }
            self._record_effect(conn, idempotency_key, result)
        return {**result, "replayed": False}

    def _payment_refusal(self, conn: Connection, refund: Refund) -> str:
        """Why the records do not allow paying ``refund`` ("" when they do), read inside the paying transaction.

        The rule (``policies.risk`` decides it, the risk check records it on the task, write-once): the refund is
        ``approved``, and one task deciding it has a final ``approve`` decision and either

        * an approval rule of 0 and the risk rules' own decision ``auto:<refund id>`` by ``system:risk-policy``, or
        * an approval rule of N >= 1 (None counts as 1) and ``approve`` decisions of at least N distinct human
          approvers (``system:`` refs never count)."""
        if refund.status != "approved":
            return f"refund {refund.id} is {refund.status}, not approved: nothing is paid without a recorded decision"
        tk = t.tasks
        rows = conn.execute(select(*_TASK).where(tk.c.refund_id == refund.id)).mappings().all()
        if not rows:
            return f"refund {refund.id} has no task deciding it: nothing is paid without a recorded decision"
        reasons = []
        for task in (Task(**r) for r in rows):
            approvals = [d for d in self._decisions(conn, task.id) if d.decision == "approve"]
            if not any(d.final for d in approvals):
                reasons.append(f"task {task.id} has no final approval")
                continue
            rule = 1 if task.approvals_required is None else task.approvals_required
            if rule == 0:
                if any(d.id == f"auto:{refund.id}" and d.approver == SYSTEM_RISK_POLICY for d in approvals):
                    return ""
                reasons.append(f"task {task.id} has no approval by the risk rules")
                continue
            humans = {d.approver for d in approvals if not d.approver.startswith("system:")}
            if len(humans) >= rule:
                return ""
            reasons.append(f"task {task.id} needs {rule} distinct approvers and has {len(humans)}")
        return f"refund {refund.id} is not approved as its rule requires ({'; '.join(reasons)})"

    # -- writes: cards ------------------------------------------------------------------------------

    def freeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        """Freeze one of the customer's cards, idempotent by key (a repeat returns the first result
        with ``"replayed": True``). Freezing an already frozen card succeeds with
        ``"already_frozen": True``.

        Result shape: ``{"card_id", "last4", "kind", "previous_status", "status": "frozen",
        "already_frozen", "idempotency_key", "replayed"}``. Raises :class:`NotFoundError` (not this
        customer's card), :class:`BusinessRuleError` (card blocked or expired: nothing to freeze)."""
        return self._switch_card(customer_id, card_id, idempotency_key, "freeze_card", "active", "frozen",
                                 "already_frozen", "is already {status} and cannot be used")

    def unfreeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        """Unfreeze one of the customer's frozen cards, idempotent by key (a repeat returns the first result with
        ``"replayed": True``). An active card succeeds with ``"already_active": True`` and changes nothing.

        Result shape: ``{"card_id", "last4", "kind", "previous_status", "status": "active", "already_active",
        "idempotency_key", "replayed"}``. Raises :class:`NotFoundError` (not this customer's card),
        :class:`BusinessRuleError` (card blocked or expired: it cannot be used again, a new card is needed)."""
        return self._switch_card(customer_id, card_id, idempotency_key, "unfreeze_card", "frozen", "active",
                                 "already_active", "is {status} and cannot be unfrozen")

    def _switch_card(self, customer_id: str, card_id: str, idempotency_key: str, effect: str, from_status: str,
                     to_status: str, already_key: str, unusable: str) -> dict[str, Any]:
        """Move the customer's card from ``from_status`` to ``to_status`` under optimistic concurrency, once per
        idempotency key (a repeat returns the first result with ``"replayed": True``); a card already in
        ``to_status`` succeeds with ``already_key`` true and changes nothing. Blocked or expired cards raise
        :class:`BusinessRuleError` ("card ending NNNN " + ``unusable`` with ``{status}``); another customer's or an
        unknown card raises :class:`NotFoundError`. The result shape is in :meth:`freeze_card` / :meth:`unfreeze_card`."""
        cards = t.cards
        with self._write() as conn:
            row = conn.execute(select(*_CARD).where(cards.c.id == card_id, cards.c.customer_id == customer_id)
                               .with_for_update()).mappings().first()
            recorded = self._claim_key(conn, idempotency_key, effect)
            if recorded is not None:
                return {**recorded, "replayed": True}
            if row is None:
                raise NotFoundError(f"no card {card_id} on this account")
            card = Card(**row)
            if card.status in ("blocked", "expired"):
                raise BusinessRuleError(f"card ending {card.last4} " + unusable.format(status=card.status))
            if card.status == from_status:
                self._cas(conn, cards, card.id, card.version, status=to_status)
            result = {
                "card_id": card.id, "last4": card.last4, "kind": card.kind, "previous_status": card.status,
                "status": to_status, already_key: card.status == to_status, "idempotency_key": idempotency_key,
            }
            self._record_effect(conn, idempotency_key, result)
        return {**result, "replayed": False}

    def open_service_request(self, customer_id: str, kind: str, idempotency_key: str) -> dict[str, Any]:
        """Record a request that only an operator can carry out (``kind``, e.g. ``"close_account"``), once per key
        (a repeat returns the first result with ``"replayed": True``), and append an audit row
        (action ``service_request``, outcome ``allowed``) so operators find it.

        A request the customer withdrew (:meth:`cancel_service_request`) is not replayed: asking again under the same
        key opens a new one (key ``<key>#2``, ``#3``, …).

        Result shape: ``{"request_id", "kind", "customer_id", "status": "open", "opened_at", "idempotency_key",
        "replayed"}``."""
        with self._write() as conn:
            key, n = idempotency_key, 1
            while True:
                recorded = self._claim_key(conn, key, f"service_request:{kind}")
                if recorded is None or recorded.get("status") != "cancelled":
                    break
                n += 1
                key = f"{idempotency_key}#{n}"
            if recorded is not None:
                return {**recorded, "replayed": True}
            result = {"request_id": f"sr_{uuid.uuid4().hex[:10]}", "kind": kind, "customer_id": customer_id,
                      "status": "open", "opened_at": iso(self.now()), "idempotency_key": key}
            self._record_effect(conn, key, result)
        self.record_audit(f"customer:{customer_id}", "service_request", target=result["request_id"],
                          detail={"kind": kind}, key=idempotency_key)
        return {**result, "replayed": False}

    def list_service_requests(self, customer_ids: Sequence[str] | None = None,
                              statuses: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """Service requests (:meth:`open_service_request`), oldest first, of ``customer_ids`` and in ``statuses``
        when given. Each: ``{"request_id", "kind", "customer_id", "status" (open|cancelled), "opened_at",
        "cancelled_at" (or None)}``; the customer of a request recorded before results carried it is read from its
        audit row."""
        se = t.side_effects
        out = []
        with self._read() as conn:
            rows = conn.execute(select(se.c.result_json).where(se.c.kind.like("service_request:%"))
                                .order_by(se.c.created_at, se.c.idempotency_key)).scalars().all()
            found = [(r, r.get("customer_id") or self._service_request_customer(conn, r["request_id"]))
                     for r in (json.loads(raw or "{}") for raw in rows)
                     if r.get("request_id")]  # a key claimed but never recorded (the writer died): nothing opened
        for r, customer in found:
            if (customer_ids is not None and customer not in customer_ids) or \
                    (statuses is not None and r.get("status") not in statuses):
                continue
            out.append({"request_id": r["request_id"], "kind": r.get("kind"), "customer_id": customer,
                        "status": r.get("status", "open"), "opened_at": r.get("opened_at"),
                        "cancelled_at": r.get("cancelled_at")})
        return out

    @staticmethod
    def _service_request_customer(conn: Connection, request_id: str) -> str | None:
        au = t.audit
        actor = conn.execute(select(au.c.actor).where(au.c.action == "service_request", au.c.target == request_id)
                             .limit(1)).scalar()
        return actor.split(":", 1)[1] if actor and actor.startswith("customer:") else None

    def cancel_service_request(self, customer_id: str, kind: str | None = None) -> dict[str, Any] | None:
        """Withdraw the customer's newest open service request (of ``kind`` when given): its status becomes
        ``cancelled`` (with ``cancelled_at``) and an audit row (action ``service_request cancel``) is appended.
        Returns the updated request (shape of :meth:`list_service_requests`), or None when there is none open.
        Withdrawing twice finds nothing the second time."""
        se = t.side_effects
        with self._write() as conn:
            rows = conn.execute(select(se.c.idempotency_key, se.c.result_json)
                                .where(se.c.kind.like("service_request:%"))
                                .order_by(se.c.created_at.desc(), se.c.idempotency_key.desc())).all()
            for key, raw in rows:
                r = json.loads(raw or "{}")
                if not r.get("request_id") or r.get("status") != "open" or (kind and r.get("kind") != kind):
                    continue
                if (r.get("customer_id") or self._service_request_customer(conn, r["request_id"])) != customer_id:
                    continue
                r.update(status="cancelled", cancelled_at=iso(self.now()), customer_id=customer_id)
                self._record_effect(conn, key, r)
                break
            else:
                return None
        self.record_audit(f"customer:{customer_id}", "service_request cancel", target=r["request_id"],
                          detail={"kind": r.get("kind")})
        return {k: r.get(k) for k in ("request_id", "kind", "customer_id", "status", "opened_at", "cancelled_at")}

    # -- writes: tasks and decisions ----------------------------------------------------------------

    def create_task(self, task_id: str, thread_id: str, owner: str, refund_id: str | None = None) -> Task:
        """Create the task (status ``open``, ``owner_version`` 1, ``version`` 1, deciding ``refund_id``) or, if it
        exists, return it unchanged (idempotent; the existing row wins even if ``owner`` differs)."""
        with self._write() as conn:
            conn.execute(self._insert_ignoring(t.tasks, {
                "id": task_id, "thread_id": thread_id, "status": "open", "current_owner": owner,
                "owner_version": 1, "version": 1, "updated_at": iso(self.now()), "refund_id": refund_id}))
            task = _record(Task, self._task(conn, task_id))
        assert task is not None
        return task

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
            task = _record(Task, self._task(conn, task_id, lock=True))
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if owner is not None and task.current_owner != owner:
                raise OwnershipError(f"task {task_id} is held by {task.current_owner}, not {owner}")
            if owner_version is not None and task.owner_version != owner_version:
                raise OwnershipError(
                    f"task {task_id} was claimed again (owner_version {task.owner_version}, "
                    f"writer holds {owner_version})")
            if task.version != expected_version:
                raise StaleVersionError(f"task {task_id} is at version {task.version}, not {expected_version}")
            self._cas(conn, t.tasks, task_id, expected_version, **fields, updated_at=iso(self.now()))
            updated = _record(Task, self._task(conn, task_id))
        assert updated is not None
        return updated

    def record_approval_rule(self, task_id: str, approvals_required: int, deadline: str | None = None) -> Task:
        """Record, once, what paying the refund of task ``task_id`` requires (:meth:`_payment_refusal`):
        ``approvals_required`` distinct human approvers (1 or 2), or 0 when the risk rules approve it themselves, and
        the request's ``deadline`` (ISO-8601 UTC, or None). Recording the same rule again returns the task unchanged
        (a node re-run after a crash); the first rule stays.

        Raises ``ValueError`` (a rule outside 0–2), :class:`NotFoundError` (no such task), :class:`BusinessRuleError`
        (a different rule is already recorded: the rule of a refund never changes after its risk check)."""
        if approvals_required not in (0, 1, 2):
            raise ValueError(f"approvals_required must be 0, 1 or 2, not {approvals_required!r}")
        with self._write() as conn:
            task = _record(Task, self._task(conn, task_id, lock=True))
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if task.approvals_required is None:
                self._cas(conn, t.tasks, task_id, task.version, approvals_required=approvals_required,
                          approval_deadline=deadline, updated_at=iso(self.now()))
            elif task.approvals_required != approvals_required:
                raise BusinessRuleError(f"task {task_id} already records {task.approvals_required} required "
                                        f"approver(s); its rule does not change")
            stored = _record(Task, self._task(conn, task_id))
        assert stored is not None
        return stored

    def claim_task(self, task_id: str, new_owner: str, expected_owner_version: int) -> Task:
        """Move the task to ``new_owner`` if its ``owner_version`` is still ``expected_owner_version``;
        bumps ``owner_version`` and ``version``. A claim based on an outdated view of ownership (someone
        claimed since) raises :class:`OwnershipError`; a missing task :class:`NotFoundError`."""
        tasks = t.tasks
        with self._write() as conn:
            result = conn.execute(update(tasks).where(tasks.c.id == task_id,
                                                      tasks.c.owner_version == expected_owner_version)
                                  .values(current_owner=new_owner, owner_version=tasks.c.owner_version + 1,
                                          version=tasks.c.version + 1, updated_at=iso(self.now())))
            task = _record(Task, self._task(conn, task_id))
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if result.rowcount != 1:
                raise OwnershipError(
                    f"task {task_id} is held by {task.current_owner} at owner_version "
                    f"{task.owner_version}, not {expected_owner_version}")
        return task

    def record_decision(self, task_id: str, approver: str, decision: str, note: str = "", *,
                        decision_id: str | None = None) -> Decision:
        """Record a human decision (``decision`` in :data:`DECISIONS`, else ``ValueError``). With a
        ``decision_id`` the call is idempotent (a repeat returns the stored decision); without one a
        fresh ``dc_<hex>`` id is made. Raises :class:`NotFoundError` if the task does not exist."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}; expected one of {sorted(DECISIONS)}")
        did = decision_id or f"dc_{uuid.uuid4().hex[:8]}"
        with self._write() as conn:
            if self._task(conn, task_id) is None:
                raise NotFoundError(f"no task {task_id}")
            conn.execute(self._insert_ignoring(t.decisions, {
                "id": did, "task_id": task_id, "approver": approver, "decision": decision, "note": note,
                "decided_at": iso(self.now()), "seq": self._next_seq(t.decisions)}))
            stored = _decision_of(self._decision(conn, did))
        assert stored is not None
        return stored

    def decide_approval(self, task_id: str, decision_id: str, approver: str, decision: str,
                        note: str = "", refund_id: str | None = None,
                        required_approvals: int = 1) -> tuple[Decision, bool]:
        """Decide a task that waits for approval, atomically and at most once.

        In one transaction holding the task (SQLite's write lock; PostgreSQL: the task row locked): if a
        decision with ``decision_id`` exists, return it with ``won=True`` (an idempotent replay: LangGraph
        re-runs an interrupted node from its first line). Else, if the task is ``awaiting_approval``:

        * ``approve`` while fewer than ``required_approvals`` approvals (this one included) exist: record it with
          ``final=False`` and leave the task waiting (two-approver tier, ``policies.risk``);
        * otherwise (the last approval, or ``reject``/``cancel``/``expire``/``close``): compare-and-swap the task
          (approve -> ``open`` until the refund is paid, reject -> ``completed``, cancel/expire/close ->
          ``cancelled``), move ``refund_id`` (if given, from ``requested``; on expire/close also from ``approved``)
          to approved/rejected/cancelled (``expired`` on expire), record the decision with ``final=True``;

        and return ``(decision, True)``. Otherwise the task was already decided or cancelled: return ``(the earlier
        final decision, False)`` and change nothing. Two approvers racing: one wins.

        ``approver`` is the deciding principal's ref (``operator:ann``). Raises ``ValueError`` (unknown decision,
        ``required_approvals`` < 1), :class:`BusinessRuleError` (``approver`` already approved this task: a second
        approval must come from someone else; ``decision_id`` was recorded for another task),
        :class:`NotFoundError` (no such task, or no earlier decision although the task is not awaiting approval)."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}; expected one of {sorted(DECISIONS)}")
        if required_approvals < 1:
            raise ValueError("required_approvals must be >= 1")
        dc = t.decisions
        with self._write() as conn:
            task = _record(Task, self._task(conn, task_id, lock=True))
            replay = _decision_of(self._decision(conn, decision_id))
            if replay is not None:
                if replay.task_id != task_id:
                    raise BusinessRuleError(f"decision id {decision_id} belongs to another task")
                return replay, True
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if task.status != "awaiting_approval":
                return self._earlier_decision(conn, task), False
            final = True
            if decision == "approve":
                prior = [d for d in self._decisions(conn, task_id) if d.decision == "approve"]
                if any(d.approver == approver for d in prior):
                    raise BusinessRuleError(f"{approver} already approved task {task_id}; the next approval must "
                                            "come from a different approver")
                elsewhere = self._approved_elsewhere(conn, refund_id or task.refund_id, task_id, approver)
                if elsewhere is not None:
                    raise BusinessRuleError(f"{approver} already approved refund {refund_id or task.refund_id} (task "
                                            f"{elsewhere}); the next approval must come from a different approver")
                if approver == SYSTEM_RISK_POLICY and task.approvals_required != 0:
                    raise BusinessRuleError(f"task {task_id} needs a human approver: the risk rules did not record "
                                            "an automatic approval for it")
                # the rule the risk check recorded wins over a caller's lower count (the store is the authority)
                needed = max(required_approvals, 1 if task.approvals_required is None else task.approvals_required)
                final = len(prior) + 1 >= needed
            now = iso(self.now())
            if final:
                self._cas(conn, t.tasks, task_id, task.version, status=_TASK_AFTER[decision], updated_at=now)
                self._settle_refund(conn, refund_id or task.refund_id, decision)
            conn.execute(dc.insert().values(id=decision_id, task_id=task_id, approver=approver, decision=decision,
                                            note=note, decided_at=now, seq=self._next_seq(dc), final=int(final)))
            stored = _decision_of(self._decision(conn, decision_id))
        assert stored is not None
        return stored, True

    @staticmethod
    def _approved_elsewhere(conn: Connection, refund_id: str | None, task_id: str, approver: str) -> str | None:
        """The id of another task deciding ``refund_id`` on which ``approver`` already approved it, or None (four eyes
        hold per refund, not only per task: an operator's ``tasks approve`` once opened a second task for a refund a
        thread waited on)."""
        if not refund_id:
            return None
        dc, tk = t.decisions, t.tasks
        return conn.execute(select(dc.c.task_id).join(tk, tk.c.id == dc.c.task_id)
                            .where(tk.c.refund_id == refund_id, tk.c.id != task_id, dc.c.approver == approver,
                                   dc.c.decision == "approve").limit(1)).scalar()

    @staticmethod
    def _settle_refund(conn: Connection, refund_id: str | None, decision: str) -> None:
        """Move a ``requested`` (or, on close/expire, ``approved``) refund to the outcome of ``decision``."""
        if not refund_id:
            return
        rf = t.refunds
        movable = ("requested", "approved") if decision in ("close", "expire") else ("requested",)
        conn.execute(update(rf).where(rf.c.id == refund_id, rf.c.status.in_(movable))
                     .values(status=_REFUND_AFTER[decision], version=rf.c.version + 1))

    @staticmethod
    def _decisions(conn: Connection, task_id: str) -> list[Decision]:
        dc = t.decisions
        rows = conn.execute(select(*_DECISION).where(dc.c.task_id == task_id)
                            .order_by(dc.c.decided_at, dc.c.seq)).mappings().all()
        return [d for d in map(_decision_of, rows) if d is not None]

    def _earlier_decision(self, conn: Connection, task: Task) -> Decision:
        """The decision that ended ``task`` (its first final one; else its first one). NotFoundError if none."""
        decisions = self._decisions(conn, task.id)
        finals = [d for d in decisions if d.final]
        if not decisions:
            raise NotFoundError(f"task {task.id} is {task.status} and has no decision")
        return (finals or decisions)[0]

    # -- stuck tasks --------------------------------------------------------------------------------

    def list_tasks(self, statuses: Sequence[str] | None = None) -> list[Task]:
        """Tasks (optionally only those in ``statuses``), oldest update first."""
        tk = t.tasks
        query = select(*_TASK)
        if statuses is not None:
            query = query.where(tk.c.status.in_(list(statuses)))
        with self._read() as conn:
            rows = conn.execute(query.order_by(tk.c.updated_at, tk.c.id)).mappings().all()
        return [Task(**r) for r in rows]

    def orphan_refunds(self) -> list[Refund]:
        """Refunds still ``requested`` or ``approved`` that no task decides (left behind by a run that never
        reached the risk check), oldest first."""
        rf, tk = t.refunds, t.tasks
        decided = select(tk.c.refund_id).where(tk.c.refund_id.is_not(None))
        with self._read() as conn:
            rows = conn.execute(select(*_REFUND).where(rf.c.status.in_(["requested", "approved"]),
                                                       rf.c.id.not_in(decided))
                                .order_by(rf.c.created_at, rf.c.seq)).mappings().all()
        return [Refund(**r) for r in rows]

    def close_task(self, task_id: str, decision_id: str, actor: str, note: str = "") -> Decision:
        """Close a task an operator found stuck (``switchboard tasks close``): in one transaction the task becomes
        ``cancelled`` (CAS), its refund, if still requested or approved, ``cancelled`` (nothing is paid), and a final
        ``close`` decision by ``actor`` (a principal ref) is recorded. Idempotent by ``decision_id``. Raises
        :class:`NotFoundError` (no such task), :class:`BusinessRuleError` (already completed or cancelled)."""
        with self._write() as conn:
            task = _record(Task, self._task(conn, task_id, lock=True))
            replay = _decision_of(self._decision(conn, decision_id))
            if replay is not None:
                if replay.task_id != task_id:
                    raise BusinessRuleError(f"decision id {decision_id} belongs to another task")
                return replay
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if task.status in ("completed", "cancelled"):
                raise BusinessRuleError(f"task {task_id} is already {task.status}")
            now = iso(self.now())
            self._cas(conn, t.tasks, task_id, task.version, status="cancelled", updated_at=now)
            self._settle_refund(conn, task.refund_id, "close")
            dc = t.decisions
            conn.execute(dc.insert().values(id=decision_id, task_id=task_id, approver=actor, decision="close",
                                            note=note, decided_at=now, seq=self._next_seq(dc), final=1))
            stored = _decision_of(self._decision(conn, decision_id))
        assert stored is not None
        return stored

    def cancel_orphan_refund(self, refund_id: str) -> Refund:
        """Cancel a refund no task decides (see :meth:`orphan_refunds`); nothing is paid. Raises
        :class:`NotFoundError` (no such refund), :class:`BusinessRuleError` (a task decides it, or it is not requested
        or approved any more)."""
        rf, tk = t.refunds, t.tasks
        with self._write() as conn:
            refund = _record(Refund, self._refund(conn, refund_id, lock=True))
            if refund is None:
                raise NotFoundError(f"no refund {refund_id}")
            owner = conn.execute(select(tk.c.id).where(tk.c.refund_id == refund_id)).scalar()
            if owner is not None:
                raise BusinessRuleError(f"refund {refund_id} is decided by task {owner}; close the task instead")
            if refund.status not in ("requested", "approved"):
                raise BusinessRuleError(f"refund {refund_id} is {refund.status}")
            self._cas(conn, rf, refund.id, refund.version, status="cancelled")
            updated = _record(Refund, self._refund(conn, refund_id))
        assert updated is not None
        return updated

    # -- principals: operators and tokens -----------------------------------------------------------

    def add_operator(self, name: str, tenant_id: str, roles: Sequence[str], customer_id: str | None = None) -> Operator:
        """Register operator ``name`` of ``tenant_id`` with ``roles`` (a non-empty subset of
        :data:`OPERATOR_ROLES`), enabled. ``customer_id``: the operator's own customer account in the tenant, if
        any. Raises ``ValueError`` (a name outside ``graph.contracts.context.OPERATOR_NAME_RE`` or reserved, unknown or no
        roles, empty tenant), :class:`BusinessRuleError` (the name exists; the name is a customer's id, which would
        make the operator and that customer one principal to the approval rules; ``customer_id`` is not a customer
        of the tenant)."""
        if not OPERATOR_NAME_RE.match(name or ""):
            raise ValueError(f"invalid operator name {name!r}: 2-64 characters, a-z first, then a-z 0-9 . _ -")
        if name in RESERVED_NAMES:
            raise ValueError(f"operator name {name!r} is reserved")
        wanted = sorted(set(roles))
        unknown = [r for r in wanted if r not in OPERATOR_ROLES]
        if not wanted or unknown:
            raise ValueError(f"roles must be a non-empty subset of {', '.join(OPERATOR_ROLES)} (got {list(roles)})")
        if not tenant_id:
            raise ValueError("an operator needs a tenant")
        if customer_id is not None and self.get_customer(customer_id, tenant_id) is None:
            raise BusinessRuleError(f"no customer {customer_id} in tenant {tenant_id}")
        if self.get_customer(name) is not None:
            raise BusinessRuleError(f"operator name {name!r} is the id of a customer; choose another name (an operator "
                                    "is never a customer's id; link an own account with --customer)")
        with self._write() as conn:
            inserted = conn.execute(self._insert_ignoring(t.operators, {
                "id": name, "tenant_id": tenant_id, "roles": ",".join(wanted), "enabled": 1,
                "customer_id": customer_id, "created_at": iso(self.now()), "version": 1})).rowcount
            if inserted != 1:
                raise BusinessRuleError(f"operator {name} exists already")
            op = _operator_of(conn.execute(select(*_OPERATOR).where(t.operators.c.id == name)).mappings().first())
        assert op is not None
        return op

    def get_operator(self, name: str) -> Operator | None:
        """The operator called ``name`` (enabled or not), or None."""
        with self._read() as conn:
            return _operator_of(conn.execute(select(*_OPERATOR).where(t.operators.c.id == name)).mappings().first())

    def list_operators(self, tenant_id: str | None = None) -> list[Operator]:
        """The operators (of ``tenant_id`` when given), by name."""
        query = select(*_OPERATOR)
        if tenant_id is not None:
            query = query.where(t.operators.c.tenant_id == tenant_id)
        with self._read() as conn:
            rows = conn.execute(query.order_by(t.operators.c.id)).mappings().all()
        return [o for o in map(_operator_of, rows) if o is not None]

    def set_operator_enabled(self, name: str, enabled: bool) -> Operator:
        """Enable or disable operator ``name`` (CAS on version). Raises :class:`NotFoundError`."""
        ops = t.operators
        with self._write() as conn:
            op = _operator_of(conn.execute(select(*_OPERATOR).where(ops.c.id == name).with_for_update())
                              .mappings().first())
            if op is None:
                raise NotFoundError(f"no operator {name}")
            self._cas(conn, ops, name, op.version, enabled=int(enabled))
            updated = _operator_of(conn.execute(select(*_OPERATOR).where(ops.c.id == name)).mappings().first())
        assert updated is not None
        return updated

    def has_admin(self) -> bool:
        """True when an enabled operator with the ``admin`` role exists (in any tenant)."""
        return any(o.enabled and "admin" in o.roles for o in self.list_operators())

    def issue_token(self, principal_kind: str, principal_id: str, tenant_id: str, label: str = "") -> tuple[Token, str]:
        """Make a new bearer token for a principal and return ``(record, token)``; the token (``sbt_`` + 43 URL-safe
        characters, 256 random bits from :mod:`secrets`) is returned once and stored only as its SHA-256. Raises
        ``ValueError`` (unknown kind), :class:`NotFoundError` (no such customer/operator in ``tenant_id``)."""
        if principal_kind not in PRINCIPAL_KINDS:
            raise ValueError(f"unknown principal kind {principal_kind!r}")
        if principal_kind == "customer" and self.get_customer(principal_id, tenant_id) is None:
            raise NotFoundError(f"no customer {principal_id} in tenant {tenant_id}")
        if principal_kind == "operator":
            op = self.get_operator(principal_id)
            if op is None or op.tenant_id != tenant_id:
                raise NotFoundError(f"no operator {principal_id} in tenant {tenant_id}")
        token = "sbt_" + secrets.token_urlsafe(32)
        record = Token(id=f"tk_{uuid.uuid4().hex[:12]}", principal_kind=principal_kind, principal_id=principal_id,
                       tenant_id=tenant_id, label=label, created_at=iso(self.now()), revoked_at=None)
        with self._write() as conn:
            conn.execute(t.tokens.insert().values(**record.to_dict(), token_sha256=token_digest(token)))
        return record, token

    def resolve_token(self, token: str) -> Token | None:
        """The valid (not revoked) token record whose SHA-256 matches ``token``, or None."""
        if not token:
            return None
        tk = t.tokens
        with self._read() as conn:
            row = conn.execute(select(*_TOKEN).where(tk.c.token_sha256 == token_digest(token),
                                                     tk.c.revoked_at.is_(None))).mappings().first()
        return _record(Token, row)

    def list_tokens(self, tenant_id: str | None = None) -> list[Token]:
        """Token records (never the tokens), of ``tenant_id`` when given, oldest first."""
        query = select(*_TOKEN)
        if tenant_id is not None:
            query = query.where(t.tokens.c.tenant_id == tenant_id)
        with self._read() as conn:
            rows = conn.execute(query.order_by(t.tokens.c.created_at, t.tokens.c.id)).mappings().all()
        return [Token(**r) for r in rows]

    def revoke_token(self, token_id: str) -> Token:
        """Revoke a token (idempotent: a revoked token keeps its first ``revoked_at``). Raises NotFoundError."""
        tk = t.tokens
        with self._write() as conn:
            conn.execute(update(tk).where(tk.c.id == token_id, tk.c.revoked_at.is_(None))
                         .values(revoked_at=iso(self.now())))
            row = conn.execute(select(*_TOKEN).where(tk.c.id == token_id)).mappings().first()
        if row is None:
            raise NotFoundError(f"no token {token_id}")
        return Token(**row)

    # -- thread owners ------------------------------------------------------------------------------

    def claim_thread_owner(self, thread_id: str, customer_id: str, tenant_id: str,
                           source: str = "") -> tuple[ThreadOwner, bool]:
        """Record ``customer_id`` (of ``tenant_id``) as the owner of ``thread_id`` unless the thread has one already
        (``INSERT … ON CONFLICT DO NOTHING``: of two concurrent first claims exactly one wins, on SQLite and
        PostgreSQL alike), and return ``(the stored owner, whether this call recorded it)``. The caller compares the
        stored owner with its principal: a different customer means the thread is someone else's. Call it only with
        an authenticated customer (``graph.service.auth``, ``Conversation.send``), never with a name taken from a message.
        Raises ``ValueError`` for an empty id, :class:`StorageUnavailable`."""
        if not thread_id or not customer_id or not tenant_id:
            raise ValueError("a thread owner needs a thread id, a customer id and a tenant id")
        values = {"thread_id": thread_id, "customer_id": customer_id, "tenant_id": tenant_id,
                  "recorded_at": iso(self.now()), "source": source}
        with self._write() as conn:
            won = conn.execute(self._insert_ignoring(t.thread_owners, values)).rowcount == 1
            row = conn.execute(select(*_OWNER).where(t.thread_owners.c.thread_id == thread_id)).mappings().first()
        owner = _record(ThreadOwner, row)
        assert owner is not None  # inserted, or there before: the same transaction reads it
        return owner, won

    def thread_owner(self, thread_id: str) -> ThreadOwner | None:
        """The recorded owner of ``thread_id`` (:meth:`claim_thread_owner`), or None."""
        with self._read() as conn:
            row = conn.execute(select(*_OWNER).where(t.thread_owners.c.thread_id == thread_id)).mappings().first()
        return _record(ThreadOwner, row)

    # -- audit --------------------------------------------------------------------------------------

    def record_audit(self, actor: str, action: str, target: str = "", outcome: str = "allowed",
                     detail: Mapping[str, Any] | None = None, key: str | None = None) -> AuditEntry:
        """Append one audit row (who did or tried what, on what, allowed or denied). ``key``: a lookup key, e.g. the
        decision id of a refused approval. Raises ``ValueError`` (outcome not in :data:`AUDIT_OUTCOMES`)."""
        if outcome not in AUDIT_OUTCOMES:
            raise ValueError(f"unknown audit outcome {outcome!r}")
        entry = AuditEntry(id=f"au_{uuid.uuid4().hex[:12]}", ts=iso(self.now()), actor=actor, action=action,
                           target=target, outcome=outcome, detail=dict(detail or {}), key=key)
        with self._write() as conn:
            conn.execute(t.audit.insert().values(**{**entry.to_dict(), "detail": json.dumps(entry.detail, default=str)},
                                                 seq=self._next_seq(t.audit)))
        return entry

    def audit_entries(self, *, key: str | None = None, action: str | None = None, actor: str | None = None,
                      limit: int = 100) -> list[AuditEntry]:
        """Audit rows, newest first, filtered by ``key``/``action``/``actor`` when given; at most ``limit``."""
        au = t.audit
        query = select(*_AUDIT)
        for column, value in ((au.c.key, key), (au.c.action, action), (au.c.actor, actor)):
            if value is not None:
                query = query.where(column == value)
        with self._read() as conn:
            rows = conn.execute(query.order_by(au.c.seq.desc()).limit(max(1, int(limit)))).mappings().all()
        return [_audit_of(r) for r in rows]


def open_store(target: str | Path | URL | None = None, *, seed: bool = True,
               now: Callable[[], datetime] | None = None) -> BusinessStore:
    """Open the business database at ``target`` — a path, ``sqlite:///path`` or ``postgresql://…`` (default
    :func:`~checkpoints.business.engine.default_store_path`) — creating the file's directory and migrating the
    schema as needed. With ``seed`` (default), seed the demo data when the database has no customers yet (first
    open); later opens never re-seed, so deleted demo rows stay deleted. Raises :class:`StorageUnavailable`,
    ``ValueError`` (``":memory:"``), :class:`~graph.contracts.errors.ConfigError` (unsupported URL)."""
    store = BusinessStore(target if target is not None else default_store_path(), now=now)
    if seed and store.is_empty():
        store.seed_demo()
    return store
