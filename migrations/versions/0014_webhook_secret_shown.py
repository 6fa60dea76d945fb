"""A key's signing secret records when it was shown (issue 35, item 8): it is made by the first
submission naming an ``x_webhook`` URL and shown by the first that stores one, so two first
submissions racing, one of them refused, can neither leave the key without a secret nor keep
one nobody saw. Secrets from before were shown when they were made.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("webhook_secrets", sa.Column("shown_at", sa.Float(), nullable=True))
    op.execute("UPDATE webhook_secrets SET shown_at = created_at")


def downgrade() -> None:
    op.execute("ALTER TABLE webhook_secrets DROP COLUMN shown_at")
