"""Refund status ``expired``: a refund whose approval passed its deadline (``switchboard recover --expire``) was
stored as ``cancelled``, which the customer and the operator could not tell from a cancellation they or an operator
asked for. The CHECK constraint of ``refunds.status`` gets ``expired``, and the refunds of the first releases that
an ``expire`` decision ended (a final ``expire`` decision of the task that decides the refund) are renamed from
``cancelled`` to ``expired``; ``downgrade`` renames them back.

The constraint is replaced as in revision 0003: on PostgreSQL by name (``refunds_status_check``, the name PostgreSQL
gave the unnamed column constraint of revision 0001); on SQLite, which cannot alter a constraint, by Alembic's batch
mode (the table is rebuilt from :func:`_refunds_table` and its rows copied).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

AMOUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ONE = sa.text("1")
OLD_STATUSES = ("requested", "approved", "rejected", "executed", "cancelled")
NEW_STATUSES = (*OLD_STATUSES, "expired")
#: The refunds an ``expire`` decision ended: the refund of a task whose final decision is ``expire``.
EXPIRED_BY_DECISION = ("SELECT tasks.refund_id FROM tasks JOIN decisions ON decisions.task_id = tasks.id "
                       "WHERE decisions.decision = 'expire' AND decisions.final = 1 AND tasks.refund_id IS NOT NULL")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({','.join(repr(v) for v in values)})"


def _refunds_table(statuses: tuple[str, ...]) -> sa.Table:
    """The ``refunds`` table of revision 0004 with ``statuses`` in its CHECK, as batch mode rebuilds it on SQLite."""
    return sa.Table(
        "refunds", sa.MetaData(),
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("customer_id", sa.Text, sa.ForeignKey("customers.id"), nullable=False),
        sa.Column("transaction_id", sa.Text, sa.ForeignKey("transactions.id"), nullable=False),
        sa.Column("amount_minor", AMOUNT, sa.CheckConstraint("amount_minor > 0"), nullable=False),
        sa.Column("currency", sa.Text, nullable=False),
        sa.Column("status", sa.Text, sa.CheckConstraint(_in("status", statuses), name="refunds_status_check"),
                  nullable=False),
        sa.Column("reason", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("idempotency_key", sa.Text, unique=True),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
        sa.Column("seq", AMOUNT, nullable=False, server_default=sa.text("0")),
        sa.Index("refunds_by_customer", "customer_id", "created_at"),
        sa.Index("refunds_by_seq", "seq"),
    )


def _restatus(statuses: tuple[str, ...]) -> None:
    """Give the CHECK constraint of ``refunds.status`` exactly ``statuses``."""
    if op.get_bind().dialect.name == "sqlite":
        with op.batch_alter_table("refunds", recreate="always", copy_from=_refunds_table(statuses)):
            pass
        return
    op.drop_constraint("refunds_status_check", "refunds", type_="check")
    op.create_check_constraint("refunds_status_check", "refunds", _in("status", statuses))


def _rename(old: str, new: str) -> None:
    op.execute(sa.text(f"UPDATE refunds SET status = :new, version = version + 1 WHERE status = :old "
                       f"AND id IN ({EXPIRED_BY_DECISION})").bindparams(new=new, old=old))


def upgrade() -> None:
    _restatus(NEW_STATUSES)
    _rename("cancelled", "expired")


def downgrade() -> None:
    _rename("expired", "cancelled")
    _restatus(OLD_STATUSES)
