"""Principals and the audit trail: ``operators`` (people of the bank with roles), ``tokens`` (bearer tokens, stored
as SHA-256 only), ``audit`` (operator actions and refusals); ``decisions.final`` (an approval that waits for a
second approver); ``tasks.refund_id`` (the refund a task decides, so stuck tasks can be listed and closed); the task
status ``needs_human`` becomes ``fallback`` (one name for a person taking over, as in the graph state).

The CHECK constraint of ``tasks.status`` is replaced: on PostgreSQL by name (``tasks_status_check``, the name
PostgreSQL gave the unnamed column constraint of revision 0001); on SQLite, which cannot alter a constraint, by
Alembic's batch mode (the table is rebuilt with the new definition and its rows copied).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

AMOUNT = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
ONE = sa.text("1")
OLD_STATUSES = ("open", "awaiting_approval", "completed", "cancelled", "needs_human")
NEW_STATUSES = ("open", "awaiting_approval", "completed", "cancelled", "fallback")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({','.join(repr(v) for v in values)})"


def _tasks_table(statuses: tuple[str, ...], with_refund: bool) -> sa.Table:
    """The ``tasks`` table as batch mode should rebuild it on SQLite."""
    columns = [
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("thread_id", sa.Text, nullable=False),
        sa.Column("status", sa.Text, sa.CheckConstraint(_in("status", statuses), name="tasks_status_check"),
                  nullable=False),
        sa.Column("current_owner", sa.Text, nullable=False),
        sa.Column("owner_version", sa.Integer, nullable=False, server_default=ONE),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
        sa.Column("updated_at", sa.Text, nullable=False),
    ]
    if with_refund:
        columns.append(sa.Column("refund_id", sa.Text))
    return sa.Table("tasks", sa.MetaData(), *columns)


def _retask(old: str, new: str, statuses: tuple[str, ...], add_refund: bool) -> None:
    """Rename task status ``old`` to ``new``, give the CHECK constraint ``statuses``, and add (``add_refund``) or
    drop the ``refund_id`` column. The rows are renamed while the table accepts both names."""
    both = tuple(dict.fromkeys((*statuses, old)))
    rename = sa.text("UPDATE tasks SET status = :new WHERE status = :old").bindparams(new=new, old=old)
    if op.get_bind().dialect.name == "sqlite":
        # batch mode rebuilds the table from ``copy_from`` (existing columns, given CHECK) plus the ops inside
        with op.batch_alter_table("tasks", recreate="always",
                                  copy_from=_tasks_table(both, with_refund=not add_refund)) as batch:
            if add_refund:
                batch.add_column(sa.Column("refund_id", sa.Text))
            else:
                batch.drop_column("refund_id")
        op.execute(rename)
        with op.batch_alter_table("tasks", recreate="always", copy_from=_tasks_table(statuses, with_refund=add_refund)):
            pass
        return
    if add_refund:
        op.add_column("tasks", sa.Column("refund_id", sa.Text))
    else:
        op.drop_column("tasks", "refund_id")
    op.drop_constraint("tasks_status_check", "tasks", type_="check")
    op.execute(rename)
    op.create_check_constraint("tasks_status_check", "tasks", _in("status", statuses))


def upgrade() -> None:
    op.create_table(
        "operators",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("roles", sa.Text, nullable=False),
        sa.Column("enabled", sa.Integer, sa.CheckConstraint("enabled IN (0, 1)"), nullable=False, server_default=ONE),
        sa.Column("customer_id", sa.Text),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False, server_default=ONE),
    )
    op.create_index("operators_by_tenant", "operators", ["tenant_id"])
    op.create_table(
        "tokens",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("token_sha256", sa.Text, nullable=False, unique=True),
        sa.Column("principal_kind", sa.Text, sa.CheckConstraint(_in("principal_kind", ("customer", "operator"))),
                  nullable=False),
        sa.Column("principal_id", sa.Text, nullable=False),
        sa.Column("tenant_id", sa.Text, nullable=False),
        sa.Column("label", sa.Text, nullable=False, server_default=""),
        sa.Column("created_at", sa.Text, nullable=False),
        sa.Column("revoked_at", sa.Text),
    )
    op.create_table(
        "audit",
        sa.Column("id", sa.Text, primary_key=True),
        sa.Column("ts", sa.Text, nullable=False),
        sa.Column("actor", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=False),
        sa.Column("target", sa.Text, nullable=False, server_default=""),
        sa.Column("outcome", sa.Text, sa.CheckConstraint(_in("outcome", ("allowed", "denied"))), nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default="{}"),
        sa.Column("key", sa.Text),
        sa.Column("seq", AMOUNT, nullable=False, server_default=sa.text("0")),
    )
    op.create_index("audit_by_key", "audit", ["key"])
    op.create_index("audit_by_seq", "audit", ["seq"])
    op.add_column("decisions", sa.Column("final", sa.Integer, nullable=False, server_default=ONE))
    _retask("needs_human", "fallback", NEW_STATUSES, add_refund=True)


def downgrade() -> None:
    _retask("fallback", "needs_human", OLD_STATUSES, add_refund=False)
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("final")
    op.drop_index("audit_by_seq", "audit")
    op.drop_index("audit_by_key", "audit")
    op.drop_table("audit")
    op.drop_table("tokens")
    op.drop_index("operators_by_tenant", "operators")
    op.drop_table("operators")
