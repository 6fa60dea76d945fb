"""A job's own decode crashes, counted apart from its claims: DECIDE_MAX_ATTEMPTS counts only
the times its decoding process died or hung, never a worker that vanished under it (a stop
grace running out, a database outage). Jobs already stored start at zero.

``op.add_column`` alters the table in place on SQLite too, keeping the job counts' triggers
(migration 0007).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("jobs", sa.Column("crashes", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    # a plain ALTER on SQLite too (3.35 and later): batch mode would rebuild ``jobs`` and drop
    # the job counts' triggers with it
    op.execute("ALTER TABLE jobs DROP COLUMN crashes")
