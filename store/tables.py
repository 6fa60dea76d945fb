"""The tables, as SQLAlchemy Core. The migrations in ``migrations/`` create exactly these."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)

metadata = MetaData()

QUEUED = "status = 'queued'"
UNSENT = f"{QUEUED} AND sent_at IS NULL"
SENT = f"{QUEUED} AND sent_at IS NOT NULL"
UNNOTED = "completion_noted = false"
PENDING = "status = 'pending'"

jobs = Table(
    "jobs", metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("priority", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("request", Text, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("result", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("rows", Integer, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("idempotency_key", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("decode_runs", Integer, nullable=False, default=0),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("decode_ms", Float, nullable=True),
    Column("sent_at", Float, nullable=True),
    Column("worker_id", String(120), nullable=True),
    Column("batch_id", String(40), nullable=True),
    Column("item_index", Integer, nullable=True),
    Column("custom_id", Text, nullable=True),
    Column("sync_waiters", Integer, nullable=False, default=0, server_default="0"),
    Column("kind", String(16), nullable=False, default="decision", server_default="decision"),
    Column("request_bytes", Integer, nullable=False, default=0, server_default="0"),
    Column("crashes", Integer, nullable=False, default=0, server_default="0"),
    Column("webhook_url", Text, nullable=True),
    Column("notify", Boolean, nullable=False, default=False, server_default=false()),
    UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
    Index("ix_jobs_owner_id", "owner", "id"),
    Index("ix_jobs_lane", "status", "model", "priority", "created_at"),
    Index("ix_jobs_batch", "batch_id", "item_index"),
    Index("ix_jobs_owner_request_hash", "owner", "request_hash"),
    # partial indexes over queued jobs only, so a lane's reads cost what is queued in it
    # (the feeder's fair pick, its repair, the lane and key sums), not the table's history
    Index("ix_jobs_unsent", "model", "priority", "owner", "created_at", "id",
          postgresql_where=text(UNSENT), sqlite_where=text(UNSENT)),
    Index("ix_jobs_queued_sent", "model", "priority", "sent_at",
          postgresql_where=text(SENT), sqlite_where=text(SENT)),
    Index("ix_jobs_queued_rows", "model", "priority", "rows",
          postgresql_where=text(QUEUED), sqlite_where=text(QUEUED)),
    Index("ix_jobs_owner_queued", "owner", "priority", "rows", "request_bytes",
          postgresql_where=text(QUEUED), sqlite_where=text(QUEUED)),
)

batches = Table(
    "batches", metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("priority", String(16), nullable=False),
    Column("questions", Text, nullable=False),
    Column("metadata", Text, nullable=True),
    Column("total", Integer, nullable=False),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("created_at", Float, nullable=False),
    Column("webhook_url", Text, nullable=True),
    Column("completion_noted", Boolean, nullable=False, default=False,
           server_default=false()),
    Column("idempotency_key", String(255), nullable=True),
    Column("request_hash", String(64), nullable=True),
    Index("ix_batches_owner_id", "owner", "id"),
    Index("uq_batches_owner_idempotency_key", "owner", "idempotency_key", unique=True),
    Index("ix_batches_unnoted", "id", postgresql_where=text(UNNOTED),
          sqlite_where=text(UNNOTED)),
)

workers = Table(
    "workers", metadata,
    Column("id", String(120), primary_key=True),
    Column("model", String(200), nullable=False),
    Column("hostname", String(200), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("metrics_port", Integer, nullable=True),
    Column("started_at", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
    Column("runner_ready", Boolean, nullable=False, server_default=true()),
    Column("runner_problem", Text, nullable=True),
)
"""A live worker beats every few seconds, saying whether its decoding runner is ready."""

taught_questions = Table(
    "taught_questions", metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("match_key", String(64), nullable=False),
    Column("question", Text, nullable=False),
    Column("examples", Text, nullable=False),
    Column("example_count", Integer, nullable=False),
    Column("from_labels", Boolean, nullable=False, default=False),
    Column("status", String(16), nullable=False),
    Column("fit", Text, nullable=True),
    Column("readout", Text, nullable=True),
    Column("model_identity", String(100), nullable=True),
    Column("error", Text, nullable=True),
    Column("job_id", String(40), nullable=True),
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    Column("version", Integer, nullable=False, server_default="1"),
    Index("ix_taught_owner_id", "owner", "id"),
    Index("ux_taught_questions_version", "owner", "match_key", "version", unique=True),
    Index("ix_taught_match", "owner", "match_key", "status"),
)
"""Questions taught from labelled examples; a ready one holds its fitted readout. Teaching the
same question again (owner and match key) stores its next ``version``."""

job_labels = Table(
    "job_labels", metadata,
    Column("job_id", String(40), primary_key=True),
    Column("question_key", Text, primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("match_key", String(64), nullable=False),
    Column("answer", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_job_labels_match", "owner", "match_key"),
)
"""The right answer to a past decision's question, recorded by its owner."""

usage = Table(
    "usage", metadata,
    Column("job_id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("model", String(200), nullable=False),
    Column("finished_at", Float, nullable=False),
    Column("input_tokens", Integer, nullable=False),
    Column("rows", Integer, nullable=False),
    Index("ix_usage_owner_time", "owner", "finished_at"),
)

lane_counts = Table(
    "lane_counts", metadata,
    Column("model", String(200), primary_key=True),
    Column("priority", String(16), primary_key=True),
    Column("status", String(16), primary_key=True),
    Column("jobs", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
)
"""Jobs and rows per lane and status, kept by triggers on ``jobs`` (``store.counts``)."""

batch_counts = Table(
    "batch_counts", metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("status", String(16), primary_key=True),
    Column("jobs", BigInteger, nullable=False),
    Column("last_finished_at", Float, nullable=True),
)
"""Items per batch and status, and the latest finish, kept by triggers on ``jobs``."""

count_deltas = Table(
    "count_deltas", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("model", String(200), nullable=False),
    Column("priority", String(16), nullable=False),
    Column("status", String(16), nullable=False),
    Column("batch_id", String(40), nullable=True),
    Column("jobs", BigInteger, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("last_finished_at", Float, nullable=True),
    Index("ix_count_deltas_lane", "model", "priority", "status"),
    Index("ix_count_deltas_batch", "batch_id"),
)
"""PostgreSQL's changes to the counts, one row per statement and group, not folded yet."""

webhook_endpoints = Table(
    "webhook_endpoints", metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("url", Text, nullable=False),
    Column("secret", String(100), nullable=False),
    Column("events", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Index("ix_webhook_endpoints_owner", "owner", "id"),
)
"""A key's registered webhook endpoints, each with its own signing secret."""

webhook_secrets = Table(
    "webhook_secrets", metadata,
    Column("owner", String(64), primary_key=True),
    Column("secret", String(100), nullable=False),
    Column("created_at", Float, nullable=False),
    Column("shown_at", Float),
)
"""A key's signing secret for the URLs its jobs and batches name (``x_webhook``), and when it
was shown (null until a submission storing a URL, or a rotation, answers with it)."""

webhook_events = Table(
    "webhook_events", metadata,
    Column("id", String(40), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("event_type", String(40), nullable=False),
    Column("subject_id", String(40), nullable=False),
    Column("endpoint_id", String(40), nullable=True),
    Column("url", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_at", Float, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("payload", Text, nullable=True),
    Column("finished_at", Float, nullable=True),
    Index("ix_webhook_events_due", "next_attempt_at", postgresql_where=text(PENDING),
          sqlite_where=text(PENDING)),
    Index("ix_webhook_events_subject", "subject_id"),
    Index("ix_webhook_events_finished", "finished_at"),
)
"""The webhook outbox: one row per event and destination (migrations 0009 and 0010,
``webhooks.outbox``)."""

webhook_attempts = Table(
    "webhook_attempts", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True,
           autoincrement=True),
    Column("event_id", String(40), nullable=False),
    Column("endpoint_id", String(40), nullable=True),
    Column("attempt", Integer, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", Text, nullable=True),
    Column("at", Float, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Index("ix_webhook_attempts_endpoint", "endpoint_id", "id"),
    Index("ix_webhook_attempts_event", "event_id", "id"),
)
"""Every try of a webhook delivery: the delivery log."""
