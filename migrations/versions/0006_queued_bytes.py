"""A job's stored size, for the queued-bytes quota per key; the key's queued sums read it from
the same partial index as its queued rows.

Jobs already queued are given the size of their own stored request (a batch item's share of
its batch's questions, which new items carry, is left out for them).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

QUEUED = "status = 'queued'"
INDEX = "ix_jobs_owner_queued"


def _stored_length() -> str:
    if op.get_bind().dialect.name == "postgresql":
        return "octet_length(request)"
    return "length(CAST(request AS BLOB))"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("request_bytes", sa.Integer, nullable=False,
                                  server_default="0"))
    op.execute(f"UPDATE jobs SET request_bytes = {_stored_length()} WHERE {QUEUED}")
    op.drop_index(INDEX, "jobs")
    op.create_index(INDEX, "jobs", ["owner", "priority", "rows", "request_bytes"],
                    postgresql_where=sa.text(QUEUED), sqlite_where=sa.text(QUEUED))


def downgrade() -> None:
    op.drop_index(INDEX, "jobs")
    op.create_index(INDEX, "jobs", ["owner", "priority", "rows"],
                    postgresql_where=sa.text(QUEUED), sqlite_where=sa.text(QUEUED))
    with op.batch_alter_table("jobs") as jobs:
        jobs.drop_column("request_bytes")
