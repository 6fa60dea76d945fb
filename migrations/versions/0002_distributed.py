"""Distributed execution: delivery bookkeeping on jobs, batches, workers and usage.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("sent_at", sa.Float, nullable=True))
        jobs.add_column(sa.Column("worker_id", sa.String(120), nullable=True))
        jobs.add_column(sa.Column("batch_id", sa.String(40), nullable=True))
        jobs.add_column(sa.Column("item_index", sa.Integer, nullable=True))
        jobs.add_column(sa.Column("custom_id", sa.Text, nullable=True))
    op.create_index("ix_jobs_batch", "jobs", ["batch_id", "item_index"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("questions", sa.Text, nullable=False),
        sa.Column("metadata", sa.Text, nullable=True),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_batches_owner_id", "batches", ["owner", "id"])
    op.create_table(
        "workers",
        sa.Column("id", sa.String(120), primary_key=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("hostname", sa.String(200), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("metrics_port", sa.Integer, nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("last_seen", sa.Float, nullable=False),
    )
    op.create_table(
        "usage",
        sa.Column("job_id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("finished_at", sa.Float, nullable=False),
        sa.Column("input_tokens", sa.Integer, nullable=False),
        sa.Column("rows", sa.Integer, nullable=False),
    )
    op.create_index("ix_usage_owner_time", "usage", ["owner", "finished_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_owner_time", table_name="usage")
    op.drop_table("usage")
    op.drop_table("workers")
    op.drop_index("ix_batches_owner_id", table_name="batches")
    op.drop_table("batches")
    op.drop_index("ix_jobs_batch", table_name="jobs")
    with op.batch_alter_table("jobs") as jobs:
        for column in ("custom_id", "item_index", "batch_id", "worker_id", "sent_at"):
            jobs.drop_column(column)
