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

import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Table, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
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
    DECISIONS,
    DUPLICATE_WINDOW_HOURS,
    REFUND_STATUSES,
    REFUND_TRANSITIONS,
    REFUND_WINDOW_DAYS,
    REFUNDABLE_TX_KINDS,
    TASK_STATUSES,
    TX_KINDS,
    BusinessRuleError,
    Card,
    Customer,
    Decision,
    NotFoundError,
    OwnershipError,
    Refund,
    StaleVersionError,
    Task,
    Transaction,
    Transfer,
)

__all__ = ["BusinessStore", "open_store"]

R = TypeVar("R")


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


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


def _customer(row: RowMapping) -> Customer:
    return Customer(**{**row, "flags": json.loads(row["flags"] or "{}")})


def _record(cls: Callable[..., R], row: RowMapping | None) -> R | None:
    return cls(**row) if row is not None else None


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
    :class:`~graph.errors.ConfigError` for an unsupported URL.

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
        return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)

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
        dialect_insert = postgresql.insert if self._dialect == "postgresql" else sqlite.insert
        statement = dialect_insert(table).values(dict(values)).on_conflict_do_nothing()
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
        return [Decision(**r) for r in rows]

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
            return f"{tx.id} is a {tx.kind.replace('_', ' ')}; only card payments and fees can be refunded"
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
            raise BusinessRuleError(f"idempotency key {idempotency_key!r} was already used for another request")
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
        """Pay a requested or approved refund, exactly once.

        In one transaction: lock the refund; if ``side_effects`` holds ``idempotency_key``, return its recorded
        result plus ``"replayed": True`` and change nothing; otherwise flip the refund to ``executed`` (CAS on
        version), post a ``transfer_in`` credit transaction ``tx_<refund_id>`` referencing the refund, record
        the result under the key, and return it with ``"replayed": False``. Two callers racing (same key or
        not, threads or processes) pay once: the loser replays or is refused as "already paid".

        Result shape: ``{"refund_id", "transaction_id", "credit_transaction_id", "amount_minor",
        "currency", "status": "executed", "executed_at", "idempotency_key", "replayed"}``.
        Raises :class:`NotFoundError`, :class:`BusinessRuleError` (refund cancelled, rejected, or
        already executed under another key)."""
        with self._write() as conn:
            refund = _record(Refund, self._refund(conn, refund_id, lock=True))
            recorded = self._claim_key(conn, idempotency_key, "execute_refund")
            if recorded is not None:
                return {**recorded, "replayed": True}
            if refund is None:
                raise NotFoundError(f"no refund {refund_id}")
            if refund.status in ("cancelled", "rejected"):
                raise BusinessRuleError(f"refund {refund_id} is {refund.status} and cannot be paid")
            if refund.status == "executed":
                raise BusinessRuleError(f"refund {refund_id} was already paid")
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

    # -- writes: cards ------------------------------------------------------------------------------

    def freeze_card(self, customer_id: str, card_id: str, idempotency_key: str) -> dict[str, Any]:
        """Freeze one of the customer's cards, idempotent by key (a repeat returns the first result
        with ``"replayed": True``). Freezing an already frozen card succeeds with
        ``"already_frozen": True``.

        Result shape: ``{"card_id", "last4", "kind", "previous_status", "status": "frozen",
        "already_frozen", "idempotency_key", "replayed"}``. Raises :class:`NotFoundError` (not this
        customer's card), :class:`BusinessRuleError` (card blocked or expired: nothing to freeze)."""
        cards = t.cards
        with self._write() as conn:
            row = conn.execute(select(*_CARD).where(cards.c.id == card_id, cards.c.customer_id == customer_id)
                               .with_for_update()).mappings().first()
            recorded = self._claim_key(conn, idempotency_key, "freeze_card")
            if recorded is not None:
                return {**recorded, "replayed": True}
            if row is None:
                raise NotFoundError(f"no card {card_id} on this account")
            card = Card(**row)
            if card.status in ("blocked", "expired"):
                raise BusinessRuleError(f"card ending {card.last4} is already {card.status} and cannot be used")
            if card.status == "active":
                self._cas(conn, cards, card.id, card.version, status="frozen")
            result = {
                "card_id": card.id, "last4": card.last4, "kind": card.kind,
                "previous_status": card.status, "status": "frozen",
                "already_frozen": card.status == "frozen", "idempotency_key": idempotency_key,
            }
            self._record_effect(conn, idempotency_key, result)
        return {**result, "replayed": False}

    # -- writes: tasks and decisions ----------------------------------------------------------------

    def create_task(self, task_id: str, thread_id: str, owner: str) -> Task:
        """Create the task (status ``open``, ``owner_version`` 1, ``version`` 1) or, if it exists,
        return it unchanged (idempotent; the existing row wins even if ``owner`` differs)."""
        with self._write() as conn:
            conn.execute(self._insert_ignoring(t.tasks, {
                "id": task_id, "thread_id": thread_id, "status": "open", "current_owner": owner,
                "owner_version": 1, "version": 1, "updated_at": iso(self.now())}))
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
            stored = _record(Decision, self._decision(conn, did))
        assert stored is not None
        return stored

    def decide_approval(self, task_id: str, decision_id: str, approver: str, decision: str,
                        note: str = "", refund_id: str | None = None) -> tuple[Decision, bool]:
        """Decide a task that waits for approval, atomically and at most once.

        In one transaction holding the task (SQLite's write lock; PostgreSQL: the task row locked): if a
        decision with ``decision_id`` exists, return it with ``won=True`` (an idempotent replay: LangGraph
        re-runs an interrupted node from its first line). Else, if the task is ``awaiting_approval``,
        compare-and-swap its status (approve -> ``open`` until the refund is paid, reject -> ``completed``,
        cancel -> ``cancelled``), move ``refund_id`` (if given) to approved/rejected/cancelled, record the
        decision, and return ``(decision, True)``. Otherwise the task was already decided or cancelled:
        return ``(the earlier decision, False)`` and change nothing. Two approvers racing: one wins.

        Raises ``ValueError`` (unknown decision), :class:`NotFoundError` (no such task, or no earlier decision
        although the task is not awaiting approval)."""
        if decision not in DECISIONS:
            raise ValueError(f"unknown decision {decision!r}; expected one of {sorted(DECISIONS)}")
        dc = t.decisions
        with self._write() as conn:
            task = _record(Task, self._task(conn, task_id, lock=True))
            replay = _record(Decision, self._decision(conn, decision_id))
            if replay is not None:
                return replay, True
            if task is None:
                raise NotFoundError(f"no task {task_id}")
            if task.status != "awaiting_approval":
                prev = conn.execute(select(*_DECISION).where(dc.c.task_id == task_id)
                                    .order_by(dc.c.decided_at, dc.c.seq).limit(1)).mappings().first()
                if prev is None:
                    raise NotFoundError(f"task {task_id} is {task.status} and has no decision")
                return Decision(**prev), False
            now = iso(self.now())
            new_status = {"approve": "open", "reject": "completed", "cancel": "cancelled"}[decision]
            self._cas(conn, t.tasks, task_id, task.version, status=new_status, updated_at=now)
            if refund_id:
                refund_status = {"approve": "approved", "reject": "rejected", "cancel": "cancelled"}[decision]
                rf = t.refunds
                conn.execute(update(rf).where(rf.c.id == refund_id, rf.c.status == "requested")
                             .values(status=refund_status, version=rf.c.version + 1))
            conn.execute(dc.insert().values(id=decision_id, task_id=task_id, approver=approver, decision=decision,
                                            note=note, decided_at=now, seq=self._next_seq(dc)))
            stored = _record(Decision, self._decision(conn, decision_id))
        assert stored is not None
        return stored, True


def open_store(target: str | Path | URL | None = None, *, seed: bool = True,
               now: Callable[[], datetime] | None = None) -> BusinessStore:
    """Open the business database at ``target`` — a path, ``sqlite:///path`` or ``postgresql://…`` (default
    :func:`~checkpoints.business.engine.default_store_path`) — creating the file's directory and migrating the
    schema as needed. With ``seed`` (default), seed the demo data when the database has no customers yet (first
    open); later opens never re-seed, so deleted demo rows stay deleted. Raises :class:`StorageUnavailable`,
    ``ValueError`` (``":memory:"``), :class:`~graph.errors.ConfigError` (unsupported URL)."""
    store = BusinessStore(target if target is not None else default_store_path(), now=now)
    if seed and store.is_empty():
        store.seed_demo()
    return store
