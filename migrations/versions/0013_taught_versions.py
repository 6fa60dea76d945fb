"""Taught questions have versions: teaching the same question again (same owner and match
key) makes its next version, numbered from 1. Only the newest ready version answers; earlier
ones stay readable for audit (issue 34, item 3).

Rows from before are numbered in the order they were made (their ids sort by creation time).

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("taught_questions", sa.Column("version", sa.Integer(), nullable=False,
                                                server_default="1"))
    op.execute("UPDATE taught_questions SET version = (SELECT COUNT(*) FROM taught_questions "
               "AS earlier WHERE earlier.owner = taught_questions.owner "
               "AND earlier.match_key = taught_questions.match_key "
               "AND earlier.id <= taught_questions.id)")
    op.create_index("ux_taught_questions_version", "taught_questions",
                    ["owner", "match_key", "version"], unique=True)


def downgrade() -> None:
    op.drop_index("ux_taught_questions_version", table_name="taught_questions")
    op.execute("ALTER TABLE taught_questions DROP COLUMN version")
