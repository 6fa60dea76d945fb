"""A batch may be submitted under an ``Idempotency-Key``, as a job may: its replay (a client's
retry after an answer it never got) returns the batch stored the first time instead of
storing, decoding and billing another. The key and the body's digest are kept on the batch,
the key unique per owner (an index: NULLs, batches without a key, never collide).

Plain ALTERs and an index on SQLite too: batch mode would rebuild ``batches`` and drop the
triggers of migrations 0007 and 0009.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("batches", sa.Column("idempotency_key", sa.String(255), nullable=True))
    op.add_column("batches", sa.Column("request_hash", sa.String(64), nullable=True))
    op.create_index("uq_batches_owner_idempotency_key", "batches",
                    ["owner", "idempotency_key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_batches_owner_idempotency_key", table_name="batches")
    for column in ("request_hash", "idempotency_key"):
        op.execute(f"ALTER TABLE batches DROP COLUMN {column}")
