"""Job counts kept on write: per lane and status (jobs and rows), per batch and status (jobs and
the latest finish), so a scrape, a lane's backpressure and a page of batches read a few rows
instead of counting the backlog (``store.counts``).

The database keeps them itself, with triggers on ``jobs``, so every change of state is counted
whichever statement made it. SQLite (one writer at a time) updates the counts in place, row by
row (a new batch's items once for the batch: ``store.counts.count_new_batch``). PostgreSQL
appends each statement's changes, summed, to ``count_deltas`` (statement-level triggers over
transition tables): concurrent transactions never wait on, nor deadlock over, a shared count
row; ``store.counts.fold`` moves the deltas into the counts, and reads add what is not folded
yet.

A later migration that rebuilds ``jobs`` on SQLite (``batch_alter_table`` with a recreate) drops
these triggers with the table, and must create them again (``create_triggers``).

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

POSTGRESQL_FUNCTION = """
CREATE OR REPLACE FUNCTION decide_count_jobs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO count_deltas (model, priority, status, batch_id, jobs, rows, last_finished_at)
        SELECT model, priority, status, batch_id, count(*), sum(rows), max(finished_at)
        FROM new_rows GROUP BY model, priority, status, batch_id;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO count_deltas (model, priority, status, batch_id, jobs, rows, last_finished_at)
        SELECT model, priority, status, batch_id, -count(*), -sum(rows), NULL
        FROM old_rows GROUP BY model, priority, status, batch_id;
    ELSE
        -- each side summed on its own (transition tables have no index: a join of a
        -- 20,000-row cancel with itself was quadratic), groups whose net is zero dropped
        INSERT INTO count_deltas (model, priority, status, batch_id, jobs, rows, last_finished_at)
        SELECT model, priority, status, batch_id, sum(jobs), sum(rows), max(finished_at)
        FROM (
            SELECT model, priority, status, batch_id, 1 AS jobs, rows, finished_at
            FROM new_rows
          UNION ALL
            SELECT model, priority, status, batch_id, -1, -rows, NULL FROM old_rows
        ) AS changed
        GROUP BY model, priority, status, batch_id
        HAVING sum(jobs) <> 0 OR sum(rows) <> 0;
    END IF;
    RETURN NULL;
END $$
"""
POSTGRESQL_TRIGGERS = {
    "INSERT": "REFERENCING NEW TABLE AS new_rows",
    "UPDATE": "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows",
    "DELETE": "REFERENCING OLD TABLE AS old_rows",
}

_SQLITE_ADD = """
    INSERT INTO lane_counts (model, priority, status, jobs, rows)
    VALUES (NEW.model, NEW.priority, NEW.status, 1, NEW.rows)
    ON CONFLICT (model, priority, status)
    DO UPDATE SET jobs = jobs + 1, rows = rows + excluded.rows;
    INSERT INTO batch_counts (batch_id, status, jobs, last_finished_at)
    SELECT NEW.batch_id, NEW.status, 1, NEW.finished_at WHERE NEW.batch_id IS NOT NULL
    ON CONFLICT (batch_id, status) DO UPDATE SET jobs = jobs + 1,
        last_finished_at = max(coalesce(last_finished_at, excluded.last_finished_at),
                               coalesce(excluded.last_finished_at, last_finished_at));
"""
_SQLITE_REMOVE = """
    UPDATE lane_counts SET jobs = jobs - 1, rows = rows - OLD.rows
    WHERE model = OLD.model AND priority = OLD.priority AND status = OLD.status;
    UPDATE batch_counts SET jobs = jobs - 1
    WHERE OLD.batch_id IS NOT NULL AND batch_id = OLD.batch_id AND status = OLD.status;
"""
SQLITE_TRIGGERS = {
    # a batch's items are counted by ``store.counts.count_new_batch``, once for the batch:
    # counted row by row, 100,000 items took twice as long to store
    "jobs_counted_insert": (f"AFTER INSERT ON jobs WHEN NEW.batch_id IS NULL "
                            f"BEGIN {_SQLITE_ADD} END"),
    "jobs_counted_update": (f"AFTER UPDATE OF status ON jobs WHEN OLD.status <> NEW.status "
                            f"BEGIN {_SQLITE_REMOVE} {_SQLITE_ADD} END"),
    "jobs_counted_delete": f"AFTER DELETE ON jobs BEGIN {_SQLITE_REMOVE} END",
}


def create_triggers() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(POSTGRESQL_FUNCTION)
        for event, transitions in POSTGRESQL_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER jobs_counted_{event.lower()} AFTER {event} ON jobs "
                       f"{transitions} FOR EACH STATEMENT EXECUTE FUNCTION decide_count_jobs()")
        return
    for name, body in SQLITE_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {body}")


def upgrade() -> None:
    op.create_table(
        "lane_counts",
        sa.Column("model", sa.String(200), primary_key=True),
        sa.Column("priority", sa.String(16), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "batch_counts",
        sa.Column("batch_id", sa.String(40), primary_key=True),
        sa.Column("status", sa.String(16), primary_key=True),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.Column("last_finished_at", sa.Float, nullable=True),
    )
    op.create_table(
        "count_deltas",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("priority", sa.String(16), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("batch_id", sa.String(40), nullable=True),
        sa.Column("jobs", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("last_finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_count_deltas_lane", "count_deltas", ["model", "priority", "status"])
    op.create_index("ix_count_deltas_batch", "count_deltas", ["batch_id"])
    op.execute("INSERT INTO lane_counts (model, priority, status, jobs, rows) "
               "SELECT model, priority, status, count(*), coalesce(sum(rows), 0) FROM jobs "
               "GROUP BY model, priority, status")
    op.execute("INSERT INTO batch_counts (batch_id, status, jobs, last_finished_at) "
               "SELECT batch_id, status, count(*), max(finished_at) FROM jobs "
               "WHERE batch_id IS NOT NULL GROUP BY batch_id, status")
    create_triggers()


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for event in POSTGRESQL_TRIGGERS:
            op.execute(f"DROP TRIGGER jobs_counted_{event.lower()} ON jobs")
        op.execute("DROP FUNCTION decide_count_jobs()")
    else:
        for name in SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_table("count_deltas")
    op.drop_table("batch_counts")
    op.drop_table("lane_counts")
