"""The hourly purge of finished webhook events reads them by when they finished: an index on
``webhook_events.finished_at`` (NULL while an event is pending, so only finished events are
in its range) instead of a walk over the whole outbox.

Revision ID: 0010
Revises: 0009
"""

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_webhook_events_finished", "webhook_events", ["finished_at"])


def downgrade() -> None:
    op.drop_index("ix_webhook_events_finished", table_name="webhook_events")
