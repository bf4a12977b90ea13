"""The approval rule of a task: ``tasks.approvals_required`` (how many distinct human approvers the refund needs, 0
when the risk rules approved it themselves) and ``tasks.approval_deadline`` (when an approver may expire the request),
both recorded once by the risk check. ``execute_refund`` pays only when the recorded decisions meet the recorded
rule, so the authority to pay is read from the business store where the money moves, never from graph state or a
caller's arguments. Tasks of earlier revisions keep NULL, which counts as one human approver.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("approvals_required", sa.Integer,
                                   sa.CheckConstraint("approvals_required BETWEEN 0 AND 2",
                                                      name="tasks_approvals_required_check")))
        batch.add_column(sa.Column("approval_deadline", sa.Text))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("tasks_approvals_required_check", type_="check")
        batch.drop_column("approval_deadline")
        batch.drop_column("approvals_required")
