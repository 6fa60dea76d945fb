"""Sync calls that share one job: how many callers wait on it, and the lookup by request.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("sync_waiters", sa.Integer, nullable=False,
                                  server_default="0"))
    op.create_index("ix_jobs_owner_request_hash", "jobs", ["owner", "request_hash"])


def downgrade() -> None:
    op.drop_index("ix_jobs_owner_request_hash", "jobs")
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("sync_waiters")
