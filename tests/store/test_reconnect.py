"""A worker's engine does not ping before each use: its job operations survive PostgreSQL
dropping every connection (a server restart) by retrying once on a fresh one."""

from __future__ import annotations

import psycopg

from store import jobs
from store.db import make_engine
from store.migrate import upgrade
from tests.store.conftest import POSTGRES_ADMIN


def drop_every_connection(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        return len(admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()", (name,)).fetchall())


def test_claim_cancel_check_and_finish_survive_dropped_connections(postgres_url):
    upgrade(postgres_url)
    db = make_engine(postgres_url, ping_on_checkout=False)
    try:
        job, _ = jobs.create_job(db, owner="o", model="m", priority="background",
                                 request={"state": "s", "questions": {}}, metadata=None,
                                 rows=2, input_tokens=9)
        assert drop_every_connection(postgres_url) >= 1  # the pooled one goes stale
        claimed = jobs.claim_job(db, job.id, "w")
        assert claimed is not None and claimed.decode_runs == 1
        drop_every_connection(postgres_url)
        assert jobs.cancel_requested(db, job.id) is False
        drop_every_connection(postgres_url)
        assert jobs.finish_job(db, claimed, status=jobs.SUCCEEDED, result={"answers": {}},
                               input_tokens=9)
        done = jobs.get_job(db, job.id)
        assert done.status == jobs.SUCCEEDED and done.decode_runs == 1
    finally:
        db.dispose()
