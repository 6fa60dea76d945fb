"""Partial indexes over queued jobs: the feeder's fair pick, its repair, and the lane and key
sums that backpressure and quotas read on every submission.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

QUEUED = "status = 'queued'"
INDEXES = {
    "ix_jobs_unsent": (["model", "priority", "owner", "created_at", "id"],
                       f"{QUEUED} AND sent_at IS NULL"),
    "ix_jobs_queued_sent": (["model", "priority", "sent_at"], f"{QUEUED} AND sent_at IS NOT NULL"),
    "ix_jobs_queued_rows": (["model", "priority", "rows"], QUEUED),
    "ix_jobs_owner_queued": (["owner", "priority", "rows"], QUEUED),
}


def upgrade() -> None:
    for name, (columns, where) in INDEXES.items():
        op.create_index(name, "jobs", columns, postgresql_where=sa.text(where),
                        sqlite_where=sa.text(where))


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, "jobs")
