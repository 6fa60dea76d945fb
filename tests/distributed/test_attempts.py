"""Attempts count only crashes of a job's own decode (issue 23, item 9), with real processes:
workers SIGKILLed under a healthy job (a stop grace running out, three deploys in a row) leave
it to finish: with DECIDE_MAX_ATTEMPTS=2 it used to end ``worker_crashed`` at the second."""

from __future__ import annotations

import signal

import pytest

from tests.distributed.test_faults import submit, wait_all_succeeded, wait_until
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model


@pytest.mark.slow
def test_workers_killed_under_a_healthy_job_three_times_leave_it_to_succeed(cluster_factory):
    cluster = cluster_factory(DECIDE_MAX_ATTEMPTS="2")
    worker = cluster.start_worker()
    cluster.start_api()
    with cluster.client() as client:
        # 160 rows: seconds of decoding, so each kill lands mid-decode
        job_id = submit(client, "a long ticket about a late parcel " * 20, distinct_nouls(40))
        for claim in (1, 2, 3):  # each claim's worker is killed while it decodes
            wait_until(lambda claim=claim: cluster.rows(
                "SELECT status, decode_runs FROM jobs WHERE id = :j", j=job_id)[0] == (
                    "running", claim), 120,
                f"claim {claim} never ran: {cluster.rows('SELECT status, error FROM jobs')}\n"
                f"{cluster.logs()}")
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
            worker = cluster.start_worker()
        wait_all_succeeded(cluster, [job_id], 240, "the job after three killed workers")
    runs, crashes = cluster.rows("SELECT decode_runs, crashes FROM jobs WHERE id = :j",
                                 j=job_id)[0]
    assert (runs, crashes) == (4, 0)
