"""Signed webhooks (issue 25, item 3): the key's endpoints and signing secret, and the outbox.

``webhook_events`` is the outbox: one row per event and destination, written in the same
transaction that finishes a job (a row trigger on ``jobs``, so every path that finishes one,
a worker's finish, a cancel, recovery or retention, writes it whatever statement it runs) and
sent later by the webhook delivery loop (``webhooks.delivery``); ``webhook_attempts`` logs each
try. A job is announced when it was submitted to be polled (``notify``: ``POST /v1/jobs``,
``Prefer: respond-async``): to its own ``webhook_url`` and to every endpoint its key has
registered for ``job.finished``. A batch's completion is noted by the delivery loop once its
counts say every item has finished (``completion_noted``), in the transaction that writes
its events; batches stored before this revision are taken as noted.

Columns are added in place (``op.add_column``), keeping the job counts' triggers (0007).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

FINISHED = "('succeeded', 'failed', 'cancelled', 'expired')"
UNFINISHED = "('queued', 'running')"
COLUMNS = ("id, owner, event_type, subject_id, endpoint_id, url, status, attempts, "
           "next_attempt_at, created_at")

POSTGRESQL_FUNCTION = f"""
CREATE OR REPLACE FUNCTION decide_webhook_job_finished() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    now double precision := extract(epoch from clock_timestamp());
BEGIN
    IF NEW.webhook_url IS NOT NULL THEN
        INSERT INTO webhook_events ({COLUMNS})
        VALUES ('msg_' || md5(random()::text || clock_timestamp()::text || NEW.id), NEW.owner,
                'job.finished', NEW.id, NULL, NEW.webhook_url, 'pending', 0, now, now);
    END IF;
    INSERT INTO webhook_events ({COLUMNS})
    SELECT 'msg_' || md5(random()::text || clock_timestamp()::text || e.id || NEW.id),
           NEW.owner, 'job.finished', NEW.id, e.id, e.url, 'pending', 0, now, now
    FROM webhook_endpoints AS e
    WHERE e.owner = NEW.owner AND e.events LIKE '%"job.finished"%';
    RETURN NULL;
END $$
"""
POSTGRESQL_TRIGGER = f"""
CREATE TRIGGER jobs_webhook_finished AFTER UPDATE OF status ON jobs FOR EACH ROW
WHEN (NEW.notify AND OLD.status IN {UNFINISHED} AND NEW.status IN {FINISHED})
EXECUTE FUNCTION decide_webhook_job_finished()
"""
_SQLITE_NOW = "((julianday('now') - 2440587.5) * 86400.0)"
SQLITE_TRIGGER = f"""
CREATE TRIGGER jobs_webhook_finished AFTER UPDATE OF status ON jobs
WHEN NEW.notify AND OLD.status IN {UNFINISHED} AND NEW.status IN {FINISHED}
BEGIN
    INSERT INTO webhook_events ({COLUMNS})
    SELECT 'msg_' || lower(hex(randomblob(16))), NEW.owner, 'job.finished', NEW.id, NULL,
           NEW.webhook_url, 'pending', 0, {_SQLITE_NOW}, {_SQLITE_NOW}
    WHERE NEW.webhook_url IS NOT NULL;
    INSERT INTO webhook_events ({COLUMNS})
    SELECT 'msg_' || lower(hex(randomblob(16))), NEW.owner, 'job.finished', NEW.id, e.id,
           e.url, 'pending', 0, {_SQLITE_NOW}, {_SQLITE_NOW}
    FROM webhook_endpoints AS e
    WHERE e.owner = NEW.owner AND e.events LIKE '%"job.finished"%';
END
"""
PENDING = "status = 'pending'"
UNNOTED = "completion_noted = false"


def upgrade() -> None:
    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("secret", sa.String(100), nullable=False),
        sa.Column("events", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_webhook_endpoints_owner", "webhook_endpoints", ["owner", "id"])
    op.create_table(
        "webhook_secrets",
        sa.Column("owner", sa.String(64), primary_key=True),
        sa.Column("secret", sa.String(100), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    _create_outbox()
    op.add_column("jobs", sa.Column("webhook_url", sa.Text, nullable=True))
    op.add_column("jobs", sa.Column("notify", sa.Boolean, nullable=False,
                                    server_default=sa.false()))
    op.add_column("batches", sa.Column("webhook_url", sa.Text, nullable=True))
    op.add_column("batches", sa.Column("completion_noted", sa.Boolean, nullable=False,
                                       server_default=sa.false()))
    # a batch finished before webhooks existed is noted (no event for the past); one still
    # running is left unnoted, so its batch.completed is written when it completes
    op.execute("UPDATE batches SET completion_noted = true WHERE NOT EXISTS (SELECT 1 FROM jobs "
               "WHERE jobs.batch_id = batches.id AND jobs.status IN ('queued', 'running'))")
    op.create_index("ix_batches_unnoted", "batches", ["id"],
                    postgresql_where=sa.text(UNNOTED), sqlite_where=sa.text(UNNOTED))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRESQL_FUNCTION)
        op.execute(POSTGRESQL_TRIGGER)
    else:
        op.execute(SQLITE_TRIGGER)


def _create_outbox() -> None:
    op.create_table(
        "webhook_events",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("event_type", sa.String(40), nullable=False),
        sa.Column("subject_id", sa.String(40), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("payload", sa.Text, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_webhook_events_due", "webhook_events", ["next_attempt_at"],
                    postgresql_where=sa.text(PENDING), sqlite_where=sa.text(PENDING))
    op.create_index("ix_webhook_events_subject", "webhook_events", ["subject_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("event_id", sa.String(40), nullable=False),
        sa.Column("endpoint_id", sa.String(40), nullable=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("duration_ms", sa.Float, nullable=False),
    )
    op.create_index("ix_webhook_attempts_endpoint", "webhook_attempts", ["endpoint_id", "id"])
    op.create_index("ix_webhook_attempts_event", "webhook_attempts", ["event_id", "id"])


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_webhook_finished" + (
        " ON jobs" if op.get_bind().dialect.name == "postgresql" else ""))
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION decide_webhook_job_finished()")
    op.drop_index("ix_batches_unnoted", table_name="batches")
    # plain ALTERs on SQLite too: batch mode would rebuild the tables and drop their triggers
    for table, column in (("batches", "completion_noted"), ("batches", "webhook_url"),
                          ("jobs", "notify"), ("jobs", "webhook_url")):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    for table in ("webhook_attempts", "webhook_events", "webhook_secrets", "webhook_endpoints"):
        op.drop_table(table)
