"""The business store of the first release: customers, cards, transactions, refunds, transfers, tasks, side
effects and approval decisions (the SQLite schema that ``nodes/store.py`` created, on both engines).

Revision ID: 0001
Revises: -
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

#: 64-bit minor units: BIGINT on PostgreSQL, INTEGER (64-bit already) on SQLite.
AMOUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ONE = sa.text("1")


def _in(column: str, *values: str) -> sa.CheckConstraint:
    return sa.CheckConstraint(f"{column} IN ({','.join(repr(v) for v in values)})")


def upgrade() -> None:
    op.create_table(
        "customers",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("email", sa.Text, nullable=False),
        sa.Column("flags", sa.Text, nullable=False, server_default="{}"),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
    )
    op.create_table(
        "cards",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
        sa.Column("last4", sa.Text, nullable=False),
        sa.Column("status", sa.Text, _in("status", "active", "blocked", "frozen", "expired"), nullable=False),
        sa.Column("kind", sa.Text, _in("kind", "physical", "virtual"), nullable=False),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
    )
    op.create_table(
        "transactions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
        sa.Column("card_id", sa.Text, sa.ForeignKey("cards.id")),
        sa.Column("merchant", sa.Text, nullable=False),
        sa.Column("amount_minor", AMOUNT, sa.CheckConstraint("amount_minor >= 0"), nullable=False),
        sa.Column("currency", sa.Text, nullable=False),
        sa.Column("kind", sa.Text, _in("kind", "card_payment", "atm", "transfer_out", "transfer_in", "top_up", "fee"),
                  nullable=False),
        sa.Column("status", sa.Text, _in("status", "posted", "pending", "declined", "reverted"), nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("reference", sa.Text),
    )
    op.create_index("transactions_by_customer", "transactions", ["customer_id", "created_at"])
    op.create_table(
        "refunds",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
        sa.Column("transaction_id", sa.Text, sa.ForeignKey("transactions.id"), nullable=False),
        sa.Column("amount_minor", AMOUNT, sa.CheckConstraint("amount_minor > 0"), nullable=False),
        sa.Column("currency", sa.Text, nullable=False),
        sa.Column("status", sa.Text, _in("status", "requested", "approved", "rejected", "executed", "cancelled"),
                  nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.Text, unique=True),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
    )
    op.create_index("refunds_by_customer", "refunds", ["customer_id", "created_at"])
    op.create_table(
        "transfers",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
        sa.Column("beneficiary", sa.Text, nullable=False),
        sa.Column("amount_minor", AMOUNT, sa.CheckConstraint("amount_minor >= 0"), nullable=False),
        sa.Column("currency", sa.Text, nullable=False),
        sa.Column("status", sa.Text, _in("status", "pending", "completed", "failed", "cancelled"), nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
    )
    op.create_table(
        "tasks",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text,
                  _in("status", "open", "awaiting_approval", "completed", "cancelled", "needs_human"), nullable=False),
        sa.Column("current_owner", sa.Text, nullable=False),
        sa.Column("owner_version", sa.Integer, nullable=False, server_default=ONE),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
        sa.Column("updated_at", sa.Text, nullable=False),
    )
    op.create_table(
        "side_effects",
        sa.Column("idempotency_key", sa.Text, primary_key=True),
        sa.Column("kind", sa.Text, nullable=False),
        sa.Column("result_json", sa.Text, nullable=False),
        sa.Column("created_at", sa.Text, nullable=False),
    )
    op.create_table(
        "decisions",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("task_id", sa.Text, nullable=False),
        sa.Column("approver", sa.Text, nullable=False),
        sa.Column("decision", sa.Text, nullable=False),
        sa.Column("note", sa.Text, nullable=False, server_default=""),
        sa.Column("decided_at", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for name in ("decisions", "side_effects", "tasks", "transfers", "refunds", "transactions", "cards", "customers"):
        op.drop_table(name)
