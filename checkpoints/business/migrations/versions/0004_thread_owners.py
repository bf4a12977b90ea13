"""Thread owners: ``thread_owners`` records, once per thread, the authenticated customer who started it — written
before the thread's first run reaches the graph (``Conversation.send``; the served engines' run handlers in
``graph/auth.py`` and ``graph/aegra_app.py``), so a first turn killed before its entry node still has an owner, and
``recover`` continues an interrupted turn with that customer's rights (never with the operator's, never from a
message).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "thread_owners",
        sa.Column("thread_id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("recorded_at", sa.Text, nullable=False),
        sa.Column("source", sa.Text, nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_table("thread_owners")
