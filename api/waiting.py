"""Waiting for a job to finish: sync calls and long polls."""

from __future__ import annotations

import asyncio
import contextlib

from starlette.concurrency import run_in_threadpool

from decide.api.context import ApiContext
from decide.store import jobs
from decide.store.db import DATABASE_AWAY

POLL_SECONDS = 0.5
"""How often a waiter re-reads the database while finishes are not announced."""
TRUSTED_POLL_SECONDS = (3.0, 10.0)
"""While they are (``JobEvents.trusted``), the finish wakes the waiter; it re-reads after
these pauses, then every last one, only for what no worker announces (a cancel made through
another front door, an expiry, an announcement lost in a broker that stalled)."""


def _pause(events_trusted: bool, reads: int) -> float:
    if not events_trusted:
        return POLL_SECONDS
    return TRUSTED_POLL_SECONDS[min(reads, len(TRUSTED_POLL_SECONDS)) - 1]


async def wait_finished(ctx: ApiContext, job_id: str, owner: str,
                        timeout: float) -> jobs.JobRecord | None:
    """The job once finished, or as it stands after ``timeout`` seconds (None if not ours).

    A database that is away for a moment (restarting) does not end the wait: the job is read
    again at the next poll, and at the deadline it is as last read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    job: jobs.JobRecord | None = None
    read_once = False
    reads = 0
    with ctx.events.subscription(job_id) as finished:
        while True:
            finished.clear()
            reads += 1
            try:
                job = await run_in_threadpool(jobs.get_job, ctx.db, job_id, owner)
                read_once = True
            except DATABASE_AWAY:
                if not read_once and loop.time() >= deadline:
                    raise
            remaining = deadline - loop.time()
            if (read_once and (job is None or job.finished)) or remaining <= 0:
                return job
            pause = _pause(ctx.events.trusted and read_once, reads)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), min(remaining, pause))
