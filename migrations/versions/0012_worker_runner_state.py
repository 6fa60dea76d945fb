"""A worker's heartbeat carries its decoding runner's state: whether the runner is ready, and
why not. ``/ready`` and ``decide_workers`` count a worker only while its runner is ready, so a
worker whose model cannot load is not taken for one that serves (issue 35, item 2).

Plain ALTERs on SQLite too (batch mode would rebuild the table); rows from before say ready.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("workers", sa.Column("runner_ready", sa.Boolean(), nullable=False,
                                       server_default=sa.true()))
    op.add_column("workers", sa.Column("runner_problem", sa.Text(), nullable=True))


def downgrade() -> None:
    for column in ("runner_problem", "runner_ready"):
        op.execute(f"ALTER TABLE workers DROP COLUMN {column}")
