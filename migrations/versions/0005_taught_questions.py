"""Taught questions, labels of past decisions, and a job's kind (a decision, or a fit).

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("kind", sa.String(16), nullable=False,
                                    server_default="decision"))
    op.create_table(
        "taught_questions",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("match_key", sa.String(64), nullable=False),
        sa.Column("question", sa.Text, nullable=False),
        sa.Column("examples", sa.Text, nullable=False),
        sa.Column("example_count", sa.Integer, nullable=False),
        sa.Column("from_labels", sa.Boolean, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fit", sa.Text, nullable=True),
        sa.Column("readout", sa.Text, nullable=True),
        sa.Column("model_identity", sa.String(100), nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_taught_owner_id", "taught_questions", ["owner", "id"])
    op.create_index("ix_taught_match", "taught_questions", ["owner", "match_key", "status"])
    op.create_table(
        "job_labels",
        sa.Column("job_id", sa.String(40), primary_key=True),
        sa.Column("question_key", sa.Text, primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("match_key", sa.String(64), nullable=False),
        sa.Column("answer", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_job_labels_match", "job_labels", ["owner", "match_key"])


def downgrade() -> None:
    op.drop_table("job_labels")
    op.drop_table("taught_questions")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("kind")
