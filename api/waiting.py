"""Waiting for a job to finish: sync calls and long polls."""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import Counter
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from decide.api.context import ApiContext
from decide.store import job_reads, jobs, submission
from decide.store.db import DATABASE_AWAY, no_answer
from decide.transport.events import JobEvents

POLL_SECONDS = 0.5
"""How often a waiter re-reads the database while finishes are not announced."""
TRUSTED_POLL_SECONDS = (3.0, 10.0)
"""While they are (``JobEvents.trusted``), the finish wakes the waiter; it re-reads after
these pauses, then every last one, only for what no worker announces (a cancel made through
another front door, an expiry, an announcement lost in a broker that stalled)."""
SHARED_READ_SECONDS = 0.25
"""A waiter's own re-read takes another waiter's read of the same job when that one started at
most this long ago: however many wait on one job, it is read at most 4 times a second by them
(400 long polls would otherwise read it 800 times a second while Redis is away)."""


READ_AT_LEAST_SECONDS = 2.0
"""How long a waiter's read may take past its wait's deadline before the database is taken as
away: a stalled server (it takes the connection and never answers) must not hold a sync call,
or a long poll, past its wait."""


async def _read_within(read: Awaitable[jobs.JobRecord | None],
                       seconds: float) -> jobs.JobRecord | None:
    """``read``, or OperationalError (the database away) once it took ``seconds`` (at least
    ``READ_AT_LEAST_SECONDS``); the read itself goes on, shared, for whoever comes next."""
    seconds = max(seconds, READ_AT_LEAST_SECONDS)
    try:
        return await asyncio.wait_for(read, seconds)
    except TimeoutError as error:
        raise no_answer("reading a job", seconds) from error


def _pause(events_trusted: bool, reads: int) -> float:
    if not events_trusted:
        return POLL_SECONDS
    return TRUSTED_POLL_SECONDS[min(reads, len(TRUSTED_POLL_SECONDS)) - 1]


@dataclass
class _Read:
    started: float
    result: asyncio.Future[jobs.JobRecord | None]


class SharedReads:
    """The latest read of each waited-on job, per owner, for its waiters to share. A waiter
    names how fresh a read it needs (``not_before``, loop time): one started since then, done
    or in flight, is shared; otherwise it reads. A read is forgotten with its last waiter."""

    def __init__(self) -> None:
        self._latest: dict[tuple[str, str], _Read] = {}
        self._waiters: Counter[tuple[str, str]] = Counter()

    @contextlib.contextmanager
    def waiting(self, job_id: str, owner: str) -> Iterator[None]:
        key = (job_id, owner)
        self._waiters[key] += 1
        try:
            yield
        finally:
            self._waiters[key] -= 1
            if not self._waiters[key]:
                del self._waiters[key]
                self._latest.pop(key, None)

    async def read(self, ctx: ApiContext, job_id: str, owner: str,
                   not_before: float) -> jobs.JobRecord | None:
        key = (job_id, owner)
        latest = self._latest.get(key)
        if latest is None or latest.started < not_before:
            loop = asyncio.get_running_loop()
            latest = _Read(loop.time(), asyncio.ensure_future(
                run_in_threadpool(job_reads.get_job, ctx.db, job_id, owner)))
            # its error is each waiter's to raise; none left to wait is no error to report
            latest.result.add_done_callback(lambda done: done.cancelled() or done.exception())
            self._latest[key] = latest
        # shielded: a waiter that leaves (its caller hung up) does not end the others' read
        return await asyncio.shield(latest.result)


_Loops = weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, SharedReads]
_shared: weakref.WeakKeyDictionary[JobEvents, _Loops] = weakref.WeakKeyDictionary()


def shared_reads(ctx: ApiContext) -> SharedReads:
    """The front door's shared reads (one per app, kept beside its events, per event loop)."""
    per_loop = _shared.setdefault(ctx.events, weakref.WeakKeyDictionary())
    return per_loop.setdefault(asyncio.get_running_loop(), SharedReads())


async def wait_finished(ctx: ApiContext, job_id: str, owner: str,
                        timeout: float) -> jobs.JobRecord | None:
    """The job once finished, or as it stands after ``timeout`` seconds (None if not ours).

    A database that is away for a moment (restarting), or slow to answer, does not end the
    wait: the job is read again at the next poll, and at the deadline it is as last read. A
    wait none of whose reads was answered ends at its deadline (plus
    ``READ_AT_LEAST_SECONDS``) as a database away. The first read, and each
    after a wake-up, is one started since; a re-read on a timer may be another waiter's."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reads = shared_reads(ctx)
    job: jobs.JobRecord | None = None
    read_once = False
    count = 0
    with ctx.events.subscription(job_id) as finished, reads.waiting(job_id, owner):
        fresh_since = loop.time()  # a read from before the subscription might miss the finish
        while True:
            finished.clear()
            count += 1
            try:
                job = await _read_within(reads.read(ctx, job_id, owner, fresh_since),
                                         deadline - loop.time())
                read_once = True
            except DATABASE_AWAY:
                if not read_once and loop.time() >= deadline:
                    raise
            remaining = deadline - loop.time()
            if (read_once and (job is None or job.finished)) or remaining <= 0:
                return job
            pause = _pause(ctx.events.trusted and read_once, count)
            try:
                await asyncio.wait_for(finished.wait(), min(remaining, pause))
                fresh_since = loop.time()  # woken: only a read from now on will do
            except TimeoutError:
                fresh_since = loop.time() - SHARED_READ_SECONDS


LEFT_GRACE_SECONDS = 3.0
"""How long a job whose sync caller went away waits for the caller's retry to join it before
it is cancelled (if it has not started)."""
DISCONNECT_CHECK_SECONDS = 0.5


async def wait_while_connected(ctx: ApiContext, request: Request, job_id: str,
                               owner: str) -> tuple[bool, jobs.JobRecord | None]:
    """(still connected, the job once finished or at the sync wait's end, as
    ``wait_finished``); (False, None) when the caller disconnected first. A caller that leaves
    stops being a waiter, and a job nobody waits on that has not started is cancelled after a
    grace for the caller's retry."""
    waiting = asyncio.ensure_future(
        wait_finished(ctx, job_id, owner, ctx.settings.sync_wait_seconds))
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=DISCONNECT_CHECK_SECONDS)
            if not waiting.done() and await request.is_disconnected():
                waiting.cancel()
                await run_in_threadpool(submission.leave_sync_waiter, ctx.db, job_id)
                await asyncio.sleep(LEFT_GRACE_SECONDS)
                await run_in_threadpool(submission.cancel_unwaited, ctx.db, job_id)
                return False, None
    except BaseException:
        waiting.cancel()
        raise
    # a waiter left counted (the database away) only spares the job from being cancelled
    with contextlib.suppress(*DATABASE_AWAY):
        await run_in_threadpool(submission.leave_sync_waiter, ctx.db, job_id)
    return True, waiting.result()


class CallerLeft(Exception):
    """The sync caller went away before the answer (nobody reads what it would have been)."""


async def wait_as_sync_caller(ctx: ApiContext, job_id: str, owner: str,
                              request: Request | None = None) -> jobs.JobRecord | None:
    """``wait_finished`` for the sync wait as one of the job's sync waiters (submitted with
    ``sync_call``), leaving as one however the wait ends. ``request`` given, as
    ``wait_while_connected``: a caller that leaves raises ``CallerLeft``, and its job is
    cancelled after the grace if nobody else waits on it and it has not started."""
    if request is not None:
        connected, job = await wait_while_connected(ctx, request, job_id, owner)
        if not connected:
            raise CallerLeft(f"the caller left before job {job_id} finished")
        return job
    try:
        return await wait_finished(ctx, job_id, owner, ctx.settings.sync_wait_seconds)
    finally:  # a waiter left counted (the database away) only spares the job from cancelling
        with contextlib.suppress(*DATABASE_AWAY):
            await run_in_threadpool(submission.leave_sync_waiter, ctx.db, job_id)
