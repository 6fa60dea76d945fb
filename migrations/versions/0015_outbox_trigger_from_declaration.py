"""The outbox trigger fires on the ends of a job that ``store.job_life.CHANGES`` declares
(issue 37, item 1): its condition is built from that table (``job_life.ends_condition``), each
source status with the final ones it may reach, where 0009 wrote any open status to any
final one by hand. The job counts' triggers (0007) need no such condition: they count every
change of status.

A later change to ``CHANGES`` that adds or removes an end needs a revision that runs this
again; ``tests/store/test_outbox.py`` fails until it does (the trigger fires on exactly the
declared ends, on both databases).

Revision ID: 0015
Revises: 0014
"""

import importlib

from alembic import op

from decide.store.job_life import ends_condition

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

WEBHOOKS = importlib.import_module("decide.migrations.versions.0009_webhooks")
"""0009, whose trigger body (the events it writes) this revision keeps."""


def _drop() -> None:
    op.execute("DROP TRIGGER jobs_webhook_finished" + (
        " ON jobs" if op.get_bind().dialect.name == "postgresql" else ""))


def upgrade() -> None:
    _drop()
    when = f"NEW.notify AND ({ends_condition()})"
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE TRIGGER jobs_webhook_finished AFTER UPDATE OF status ON jobs "
                   f"FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION decide_webhook_job_finished()")
    else:
        body = WEBHOOKS.SQLITE_TRIGGER.split("\nBEGIN\n", 1)[1]
        op.execute(f"CREATE TRIGGER jobs_webhook_finished AFTER UPDATE OF status ON jobs "
                   f"WHEN {when}\nBEGIN\n{body}")


def downgrade() -> None:
    _drop()
    op.execute(WEBHOOKS.POSTGRESQL_TRIGGER if op.get_bind().dialect.name == "postgresql"
               else WEBHOOKS.SQLITE_TRIGGER)
