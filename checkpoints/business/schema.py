"""The business database's tables as SQLAlchemy Core ``Table`` objects, for SQLite and PostgreSQL alike.

This is the schema at the head revision (:data:`SCHEMA_VERSION`); the migrations under ``migrations/versions``
build it step by step and are the authority on how a database gets there. Revision ``0001`` is the schema of
the first release (one SQLite file, same columns, CHECK constraints and indexes); ``0002`` adds the ``seq``
column to ``refunds`` and ``decisions`` (insertion order: SQLite's implicit ``rowid`` served as a tiebreaker
before, PostgreSQL has none); ``0003`` adds the principals (``operators``, ``tokens``), the ``audit`` table, the
``final`` flag of ``decisions`` (two-approver tier), the ``refund_id`` of ``tasks``, and renames the task status
``needs_human`` to ``fallback``; ``0004`` adds ``thread_owners`` (who started each thread, recorded before its first
run); ``0005`` adds the refund status ``expired`` (an approval that passed its deadline; ``cancelled`` before);
``0006`` adds the approval rule of ``tasks`` (``approvals_required``, ``approval_deadline``): what a payment needs is
read from the store where the money moves, never from the caller.

Types: ids, names and timestamps are ``TEXT`` (timestamps as ``YYYY-MM-DDTHH:MM:SSZ`` strings, so string order
is time order); money is an integer in minor units, ``BIGINT`` on PostgreSQL (SQLite's ``INTEGER`` is 64-bit
already); ``flags`` and ``result_json`` hold JSON text.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    Table,
    Text,
    text,
)

from checkpoints.business.records import SCHEMA_VERSION as _SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "metadata",
    "customers",
    "cards",
    "transactions",
    "refunds",
    "transfers",
    "tasks",
    "side_effects",
    "decisions",
    "operators",
    "tokens",
    "audit",
    "thread_owners",
    "TABLES_0001",
]

#: The Alembic revision this code reads and writes (the head of ``migrations/versions``), defined in
#: :mod:`checkpoints.business.records` (no SQLAlchemy import needed to read it).
SCHEMA_VERSION = _SCHEMA_VERSION

#: The tables of revision 0001 (the first release); a database holding all of them but no version table
#: was created by that release and is adopted (stamped 0001) by :func:`checkpoints.business.migrate.upgrade`.
TABLES_0001 = ("customers", "cards", "transactions", "refunds", "transfers", "tasks", "side_effects", "decisions")

#: 64-bit integers: BIGINT on PostgreSQL, INTEGER (already 64-bit) on SQLite.
Amount = BigInteger().with_variant(Integer(), "sqlite")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({','.join(repr(v) for v in values)})"


metadata = MetaData()

customers = Table(
    "customers", metadata,
    Column("id", Text, primary_key=True),
    Column("tenant_id", Text, nullable=False),
    Column("name", Text, nullable=False),
    Column("email", Text, nullable=False),
    Column("flags", Text, nullable=False, server_default="{}"),
    Column("version", Integer, nullable=False, server_default=text("1")),
)

cards = Table(
    "cards", metadata,
    Column("id", Text, primary_key=True),
    Column("customer_id", Text, ForeignKey("customers.id"), nullable=False),
    Column("last4", Text, nullable=False),
    Column("status", Text, CheckConstraint(_in("status", ("active", "blocked", "frozen", "expired"))),
           nullable=False),
    Column("kind", Text, CheckConstraint(_in("kind", ("physical", "virtual"))), nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
)

transactions = Table(
    "transactions", metadata,
    Column("id", Text, primary_key=True),
    Column("customer_id", Text, ForeignKey("customers.id"), nullable=False),
    Column("card_id", Text, ForeignKey("cards.id")),
    Column("merchant", Text, nullable=False),
    Column("amount_minor", Amount, CheckConstraint("amount_minor >= 0"), nullable=False),
    Column("currency", Text, nullable=False),
    Column("kind", Text, CheckConstraint(_in("kind", ("card_payment", "atm", "transfer_out", "transfer_in",
                                                       "top_up", "fee"))), nullable=False),
    Column("status", Text, CheckConstraint(_in("status", ("posted", "pending", "declined", "reverted"))),
           nullable=False),
    Column("created_at", Text, nullable=False),
    Column("reference", Text),
    Index("transactions_by_customer", "customer_id", "created_at"),
)

#: The refund statuses of the CHECK constraint ``refunds_status_check`` (revision 0005 added ``expired``).
REFUND_STATUS_VALUES = ("requested", "approved", "rejected", "executed", "cancelled", "expired")

refunds = Table(
    "refunds", metadata,
    Column("id", Text, primary_key=True),
    Column("customer_id", Text, ForeignKey("customers.id"), nullable=False),
    Column("transaction_id", Text, ForeignKey("transactions.id"), nullable=False),
    Column("amount_minor", Amount, CheckConstraint("amount_minor > 0"), nullable=False),
    Column("currency", Text, nullable=False),
    Column("status", Text, CheckConstraint(_in("status", REFUND_STATUS_VALUES), name="refunds_status_check"),
           nullable=False),  # revision 0005: + expired
    Column("reason", Text, nullable=False, server_default=""),
    Column("created_at", Text, nullable=False),
    Column("idempotency_key", Text, unique=True),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("seq", Amount, nullable=False, server_default=text("0")),  # revision 0002
    Index("refunds_by_customer", "customer_id", "created_at"),
    Index("refunds_by_seq", "seq"),  # revision 0002
)

transfers = Table(
    "transfers", metadata,
    Column("id", Text, primary_key=True),
    Column("customer_id", Text, ForeignKey("customers.id"), nullable=False),
    Column("beneficiary", Text, nullable=False),
    Column("amount_minor", Amount, CheckConstraint("amount_minor >= 0"), nullable=False),
    Column("currency", Text, nullable=False),
    Column("status", Text, CheckConstraint(_in("status", ("pending", "completed", "failed", "cancelled"))),
           nullable=False),
    Column("created_at", Text, nullable=False),
)

#: The task statuses of the CHECK constraint ``tasks_status_check`` (revision 0003: ``needs_human`` -> ``fallback``).
TASK_STATUS_VALUES = ("open", "awaiting_approval", "completed", "cancelled", "fallback")

tasks = Table(
    "tasks", metadata,
    Column("id", Text, primary_key=True),
    Column("thread_id", Text, nullable=False),
    Column("status", Text, CheckConstraint(_in("status", TASK_STATUS_VALUES), name="tasks_status_check"),
           nullable=False),
    Column("current_owner", Text, nullable=False),
    Column("owner_version", Integer, nullable=False, server_default=text("1")),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Column("updated_at", Text, nullable=False),
    Column("refund_id", Text),  # revision 0003: the refund the task decides (stuck tasks are found by it)
    # revision 0006: the approval rule the risk check recorded (write-once) and the request's deadline
    Column("approvals_required", Integer, CheckConstraint("approvals_required BETWEEN 0 AND 2",
                                                          name="tasks_approvals_required_check")),
    Column("approval_deadline", Text),
)

side_effects = Table(
    "side_effects", metadata,
    Column("idempotency_key", Text, primary_key=True),
    Column("kind", Text, nullable=False),
    Column("result_json", Text, nullable=False),
    Column("created_at", Text, nullable=False),
)

decisions = Table(
    "decisions", metadata,
    Column("id", Text, primary_key=True),
    Column("task_id", Text, nullable=False),
    Column("approver", Text, nullable=False),
    Column("decision", Text, nullable=False),
    Column("note", Text, nullable=False, server_default=""),
    Column("decided_at", Text, nullable=False),
    Column("seq", Amount, nullable=False, server_default=text("0")),  # revision 0002
    Column("final", Integer, nullable=False, server_default=text("1")),  # revision 0003: 0 = waits for a 2nd approver
    Index("decisions_by_task", "task_id", "decided_at", "seq"),  # revision 0002
    Index("decisions_by_seq", "seq"),  # revision 0002
)

# -- revision 0003: principals and the audit trail ---------------------------------------------------------------

operators = Table(
    "operators", metadata,
    Column("id", Text, primary_key=True),  # the operator's name, e.g. "ann"
    Column("tenant_id", Text, nullable=False),
    Column("roles", Text, nullable=False),  # comma-separated, sorted: "admin,approver"
    Column("enabled", Integer, CheckConstraint("enabled IN (0, 1)"), nullable=False, server_default=text("1")),
    Column("customer_id", Text),  # the operator's own customer account in the tenant, if any (four eyes)
    Column("created_at", Text, nullable=False),
    Column("version", Integer, nullable=False, server_default=text("1")),
    Index("operators_by_tenant", "tenant_id"),
)

tokens = Table(
    "tokens", metadata,
    Column("id", Text, primary_key=True),
    Column("token_sha256", Text, nullable=False, unique=True),  # hex SHA-256 of the bearer token; never the token
    Column("principal_kind", Text, CheckConstraint(_in("principal_kind", ("customer", "operator"))), nullable=False),
    Column("principal_id", Text, nullable=False),
    Column("tenant_id", Text, nullable=False),
    Column("label", Text, nullable=False, server_default=""),
    Column("created_at", Text, nullable=False),
    Column("revoked_at", Text),
)

audit = Table(
    "audit", metadata,
    Column("id", Text, primary_key=True),
    Column("ts", Text, nullable=False),
    Column("actor", Text, nullable=False),
    Column("action", Text, nullable=False),
    Column("target", Text, nullable=False, server_default=""),
    Column("outcome", Text, CheckConstraint(_in("outcome", ("allowed", "denied"))), nullable=False),
    Column("detail", Text, nullable=False, server_default="{}"),
    Column("key", Text),
    Column("seq", Amount, nullable=False, server_default=text("0")),
    Index("audit_by_key", "key"),
    Index("audit_by_seq", "seq"),
)

# -- revision 0004: who started each thread ------------------------------------------------------------------------

thread_owners = Table(
    "thread_owners", metadata,
    Column("thread_id", Text, primary_key=True),
    Column("customer_id", Text, nullable=False),  # the authenticated customer who started the thread; written once
    Column("tenant_id", Text, nullable=False),
    Column("recorded_at", Text, nullable=False),
    Column("source", Text, nullable=False, server_default=""),  # where it was recorded: conversation, server, state
)
