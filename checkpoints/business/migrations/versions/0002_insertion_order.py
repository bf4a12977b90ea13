"""Insertion order for refunds and decisions: a ``seq`` column (ties of ``created_at``/``decided_at`` were broken
by SQLite's implicit ``rowid``, which PostgreSQL does not have), filled for existing rows, plus indexes.

New rows get ``seq = max(seq) + 1`` from the repository (one code path for both engines; concurrent inserts on
PostgreSQL may share a value, which only leaves the order of two simultaneous rows open).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

AMOUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for table, order in (("refunds", "created_at, id"), ("decisions", "decided_at, id")):
        op.add_column(table, sa.Column("seq", AMOUNT, nullable=False, server_default=sa.text("0")))
        if sqlite:  # the order the first release used
            op.execute(f"UPDATE {table} SET seq = rowid")
        else:
            op.execute(f"UPDATE {table} SET seq = o.n FROM (SELECT id, row_number() OVER (ORDER BY {order}) AS n "
                       f"FROM {table}) AS o WHERE {table}.id = o.id")
        op.create_index(f"{table}_by_seq", table, ["seq"])
    op.create_index("decisions_by_task", "decisions", ["task_id", "decided_at", "seq"])


def downgrade() -> None:
    op.drop_index("decisions_by_task", "decisions")
    for table in ("refunds", "decisions"):
        op.drop_index(f"{table}_by_seq", table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("seq")
