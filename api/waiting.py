"""Waiting for a job to finish: sync calls and long polls."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy.exc import InterfaceError, OperationalError
from starlette.concurrency import run_in_threadpool

from api.context import ApiContext
from store import jobs

POLL_SECONDS = 0.5
"""How often a waiter re-reads the database while finishes are not announced."""
TRUSTED_POLL_SECONDS = (1.0, 2.0, 5.0)
"""While they are (``JobEvents.trusted``), the finish wakes the waiter; it re-reads after
these pauses, then every last one, only for what no worker announces (a cancel, an expiry,
an announcement lost in a broker that stalled)."""


def _pause(events_trusted: bool, reads: int) -> float:
    if not events_trusted:
        return POLL_SECONDS
    return TRUSTED_POLL_SECONDS[min(reads, len(TRUSTED_POLL_SECONDS)) - 1]


async def wait_finished(ctx: ApiContext, job_id: str, owner: str, timeout: float,
                        read_before: jobs.JobRecord | None = None) -> jobs.JobRecord | None:
    """The job once finished, or as it stands after ``timeout`` seconds (None if not ours).

    ``read_before``: the job as the caller just read it, so the wait does not begin with the
    same read again; a finish between that read and this subscription is then caught by a
    first re-read after ``POLL_SECONDS``. A database that is away for a moment (restarting)
    does not end the wait: the job is read again at the next poll, and at the deadline it is
    as last read."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    job = read_before
    read_once = read_before is not None
    reads = 0
    with ctx.events.subscription(job_id) as finished:
        while True:
            finished.clear()
            reads += 1
            if reads > 1 or read_before is None:
                try:
                    job = await run_in_threadpool(jobs.get_job, ctx.db, job_id, owner)
                    read_once = True
                except (OperationalError, InterfaceError):
                    if not read_once and loop.time() >= deadline:
                        raise
            remaining = deadline - loop.time()
            if (read_once and (job is None or job.finished)) or remaining <= 0:
                return job
            trusted = ctx.events.trusted and read_once and not (reads == 1 and read_before)
            pause = _pause(trusted, reads)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(finished.wait(), min(remaining, pause))
