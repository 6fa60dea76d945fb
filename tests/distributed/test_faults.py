"""Faults an operator meets, with real processes (issue 12): Redis restarted empty or paused,
PostgreSQL restarted, a worker killed and restarted as PID 1 of its namespace, clocks 30 s
off, the delivery leader frozen. Each ends with every accepted job finished, decode runs
counted."""

from __future__ import annotations

import shutil
import signal
import threading
import time

import pytest

from decide.store.workers import DEAD_AFTER_SECONDS
from tests.slow_work import distinct_nouls
from tests.support.pausing import paused_runners

pytestmark = pytest.mark.model

FOREGROUND_LANE = "decide.gemma-3-270m.foreground"


def submit(client, state: str, questions: dict, priority: str = "background") -> str:
    response = client.post("/v1/jobs", json={"state": state, "questions": questions,
                                             "priority": priority})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_redis_restarted_empty_with_one_busy_worker_and_one_waiting_job(cluster):
    assert cluster.own_redis is not None, "redis-server is needed (.ci/run installs it)"
    with cluster.client() as client:
        # 80 rows: a second or more, while the worker is stopped within milliseconds of the
        # job's start (its runner then stops at its next row, waiting for the worker's go)
        busy = submit(client, "a long ticket", distinct_nouls(20))
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=busy)
                   == "running", 60, "the long job never started")
        worker = cluster.workers[0]
        worker.send_signal(signal.SIGSTOP)  # held mid-job, so the next message stays queued
        try:
            assert cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=busy) == "running"
            # foreground: the front door sends it itself (a background job waits for the
            # delivery loop, which runs in the worker held here)
            waiting = submit(client, "Where is my parcel?",
                             {"late": {"type": "noul", "instructions": "Is the parcel late?"}},
                             priority="foreground")
            wait_until(lambda: cluster.redis.llen(FOREGROUND_LANE) == 1, 10,
                       "the waiting job's message never reached its lane")
            cluster.own_redis.stop()  # everything Redis held is gone
            cluster.own_redis.start()
            assert cluster.redis.llen(FOREGROUND_LANE) == 0
        finally:
            worker.send_signal(signal.SIGCONT)  # back within its heartbeat limit: still alive
        for job_id in (busy, waiting):
            wait_until(lambda job_id=job_id: cluster.scalar(
                "SELECT status FROM jobs WHERE id = :j", j=job_id) == "succeeded", 90,
                f"job {job_id} never finished after Redis restarted\n{cluster.logs()}")
        runs = dict(cluster.rows("SELECT id, decode_runs FROM jobs"))
        assert runs == {busy: 1, waiting: 1}


@pytest.mark.slow
def test_a_worker_killed_and_restarted_as_pid_1_of_its_namespace_does_not_hold_its_job(
        cluster_factory):
    assert shutil.which("unshare"), "unshare (util-linux) is needed"
    cluster = cluster_factory()
    cluster.start_worker(own_pid_namespace=True)
    cluster.start_api()
    with cluster.client() as client:
        job_id = submit(client, "a long ticket", distinct_nouls(40))  # seconds of decoding
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=job_id)
                   == "running", 60, f"the job never started\n{cluster.logs()}")
        first = cluster.scalar("SELECT worker_id FROM jobs WHERE id = :j", j=job_id)
        assert first.split(":")[1] == "1"  # PID 1, as in a container
        cluster.workers[0].send_signal(signal.SIGKILL)
        cluster.workers[0].wait()
        cluster.start_worker(own_pid_namespace=True)  # same hostname, PID 1 again
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=job_id)
                   == "succeeded", 120, f"the job stayed held by the dead worker\n"
                                         f"{cluster.logs()}")
        assert cluster.scalar("SELECT decode_runs FROM jobs WHERE id = :j", j=job_id) == 2
        second = cluster.scalar("SELECT worker_id FROM jobs WHERE id = :j", j=job_id)
        assert second != first and second.split(":")[:2] == first.split(":")[:2]


def status_of(cluster, job_id: str) -> str:
    return cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=job_id)


def wait_all_succeeded(cluster, job_ids: list[str], seconds: float, what: str) -> None:
    wait_until(lambda: cluster.scalar(
        "SELECT count(*) FROM jobs WHERE id = ANY(:ids) AND status = 'succeeded'",
        ids=job_ids) == len(job_ids), seconds,
        f"{what}: {dict(cluster.rows('SELECT id, status FROM jobs'))}\n{cluster.logs()}")


def decode_runs(cluster) -> dict[str, int]:
    return dict(cluster.rows("SELECT id, decode_runs FROM jobs"))


@pytest.mark.slow
def test_postgresql_restarted_while_jobs_finish(cluster_factory):
    """A fast shutdown ends every session mid-claim, mid-read and mid-finish, and every
    connection is refused for 3 s or more. Nothing accepted is lost or decoded twice, the
    worker lives on, and the front door answers 503 (with Retry-After) meanwhile, never 500."""
    cluster = cluster_factory(own_postgres=True)
    worker = cluster.start_worker()
    cluster.start_api()
    sync_answers: list[int] = []
    with cluster.client() as client:
        accepted = [submit(client, f"ticket {i}", distinct_nouls(4)) for i in range(24)]
        wait_until(lambda: cluster.scalar("SELECT count(*) FROM jobs WHERE status = "
                                          "'succeeded'") >= 2, 60, "no job finished")
        waiter = threading.Thread(target=lambda: sync_answers.append(client.post(
            "/v1/systemone", json={"state": "Is this urgent?", "questions": distinct_nouls(3)}
        ).status_code))
        waiter.start()
        # the sync call's job stored (a sync call is the only foreground job): PostgreSQL
        # stopped before that would refuse the call itself
        wait_until(lambda: cluster.scalar("SELECT count(*) FROM jobs WHERE priority = "
                                          "'foreground'") == 1, 30, "the sync call made no job")
        cluster.db.dispose()
        cluster.own_postgres.stop()
        refused = client.post("/v1/jobs", json={"state": "during the outage",
                                                "questions": distinct_nouls(1)})
        time.sleep(3)
        cluster.own_postgres.start()
        assert refused.status_code == 503, refused.text
        assert refused.headers["Retry-After"] == "2"
        assert refused.json()["detail"]["error_type"] == "unavailable_error"
        wait_all_succeeded(cluster, accepted, 120, "jobs unfinished after PostgreSQL restarted")
        waiter.join(timeout=90)
    assert sync_answers == [200], cluster.logs()
    assert set(decode_runs(cluster).values()) == {1}, decode_runs(cluster)
    assert worker.poll() is None, cluster.logs()


@pytest.mark.slow
def test_redis_paused_during_a_long_background_job_with_foreground_traffic(cluster):
    """``DEBUG SLEEP``: Redis accepts connections and answers nothing for 8 s. The background
    job goes on, foreground calls made meanwhile are answered once Redis is back, and every
    job is decoded once."""
    assert cluster.own_redis is not None, "redis-server is needed (.ci/run installs it)"
    answers: list[int] = []
    with cluster.client() as client:
        long = submit(client, "a long ticket", distinct_nouls(150))  # outlasts the stall
        wait_until(lambda: status_of(cluster, long) == "running", 60, "the long job never ran")
        cluster.own_redis.pause(8)
        callers = [threading.Thread(target=lambda i=i: answers.append(client.post(
            "/v1/systemone", json={"state": f"call {i}", "questions": distinct_nouls(2)}
        ).status_code)) for i in range(3)]
        for caller in callers:
            caller.start()
            time.sleep(1)
        for caller in callers:
            caller.join(timeout=120)
        wait_all_succeeded(cluster, [long], 180, "the background job never finished")
    assert answers == [200, 200, 200], cluster.logs()
    assert status_of(cluster, long) == "succeeded"
    assert set(decode_runs(cluster).values()) == {1}, decode_runs(cluster)
    assert len(decode_runs(cluster)) == 4
    assert cluster.workers[0].poll() is None


@pytest.mark.slow
def test_workers_whose_clocks_are_30_s_off_keep_their_jobs(cluster_factory):
    """libfaketime moves the wall clocks: the delivery leader's 30 s ahead, the other
    worker's 30 s behind. Liveness and the repair of lost messages read the database's clock,
    so neither worker looks dead to the other while it decodes: every job runs once. Each
    worker holds a job for longer than the liveness window (its runner stopped meanwhile, so
    the decode is long at no cost to the machine)."""
    assert shutil.which("faketime"), "faketime (libfaketime) is needed (.ci/run installs it)"
    cluster = cluster_factory()
    cluster.start_worker(clock_offset="+30s")
    wait_until(lambda: len(cluster.delivery_leader_pids()) == 1, 90,
               f"the first worker never led delivery\n{cluster.logs()}")
    cluster.start_worker(clock_offset="-30s")
    wait_until(lambda: cluster.scalar("SELECT count(*) FROM workers") == 2, 90,
               f"the second worker never beat\n{cluster.logs()}")
    cluster.start_api()
    with cluster.client() as client:
        with paused_runners(*(worker.pid for worker in cluster.workers)):
            accepted = [submit(client, f"long ticket {i}", distinct_nouls(4)) for i in range(4)]
            wait_until(lambda: cluster.scalar(
                "SELECT count(DISTINCT worker_id) FROM jobs WHERE status = 'running'") == 2, 60,
                f"the two workers never both took a job\n{cluster.logs()}")
            time.sleep(DEAD_AFTER_SECONDS + 2)  # both decodes outlast the liveness window
        wait_all_succeeded(cluster, accepted, 240, "jobs unfinished under skewed clocks")
    assert decode_runs(cluster) == dict.fromkeys(accepted, 1), cluster.logs()
    holders = {row[0].split(":")[2] for row in cluster.rows("SELECT worker_id FROM jobs")}
    assert len(holders) == 2  # both workers decoded, each for more than 10 s of its clock


@pytest.mark.slow
def test_the_delivery_leader_frozen_until_another_has_taken_over(cluster_factory):
    """SIGSTOP the worker that leads delivery while it decodes a job. PostgreSQL ends its
    idle lock session within 20 s, the other worker takes over: it re-queues the frozen
    worker's job and decodes it, and feeds a batch submitted meanwhile (batch items reach
    Redis only through delivery). Thawed once all that is done (within 90 s: 20 s for the
    lock session, then the job's 60 rows and the batch's 5 on a machine the suite's other
    processes load), the old leader stores nothing for the job it lost and does not lead
    again."""
    cluster = cluster_factory()
    frozen = cluster.start_worker()
    wait_until(lambda: cluster.delivery_leader_pids() == [frozen.pid], 90,
               f"the first worker never led delivery\n{cluster.logs()}")
    successor = cluster.start_worker()
    cluster.start_api()
    wait_until(lambda: cluster.scalar("SELECT count(*) FROM workers") == 2, 90,
               f"the second worker never beat\n{cluster.logs()}")
    with cluster.client() as client:
        successor.send_signal(signal.SIGSTOP)  # a moment, so the leader takes the long job
        try:
            held = submit(client, "a ticket", distinct_nouls(60))  # running when frozen
            wait_until(lambda: status_of(cluster, held) == "running", 30, "the job never ran")
        finally:
            successor.send_signal(signal.SIGCONT)
        holder = cluster.scalar("SELECT worker_id FROM jobs WHERE id = :j", j=held)
        assert holder.split(":")[1] == str(frozen.pid)
        frozen.send_signal(signal.SIGSTOP)
        thawed_at = time.monotonic() + 90  # at the latest
        try:
            response = client.post("/v1/batches", json={
                "questions": {"late": {"type": "noul", "instructions": "Is it late?"}},
                "items": [{"custom_id": f"T-{i}", "state": f"parcel {i}"} for i in range(5)]})
            assert response.status_code in (200, 202), response.text
            batch = response.json()["id"]
            wait_until(lambda: cluster.delivery_leader_pids() == [successor.pid], 45,
                       f"nobody took over delivery\n{cluster.logs()}")
            wait_until(lambda: cluster.scalar(
                "SELECT count(*) FROM jobs WHERE batch_id = :b AND status = 'succeeded'",
                b=batch) == 5, thawed_at - time.monotonic(),
                f"the batch was not fed while the leader was frozen\n{cluster.logs()}")
            wait_until(lambda: status_of(cluster, held) == "succeeded",
                       thawed_at - time.monotonic(),
                       f"the frozen worker's job was not taken over\n{cluster.logs()}")
        finally:
            frozen.send_signal(signal.SIGCONT)
        wait_until(lambda: gave_up(cluster, held), 60,  # it wakes and finds its claim stale
                   f"the thawed worker never gave the job up\n{cluster.logs()}")
        later = submit(client, "after the thaw", distinct_nouls(2))
        wait_all_succeeded(cluster, [later], 60, "the cluster stopped working after the thaw")
    runs = decode_runs(cluster)
    assert runs.pop(held) == 2  # the frozen worker's claim, then the successor's
    assert set(runs.values()) == {1}, runs
    assert cluster.delivery_leader_pids() == [successor.pid]
    assert frozen.poll() is None, cluster.logs()


def gave_up(cluster, job_id: str) -> bool:
    """Whether a worker logged that its claim on ``job_id`` was stale: it stopped decoding the
    job, its finish was refused (another claim owns the job), or its runner was taken for hung
    after the freeze and the job left as it stood."""
    return any(job_id in line and any(sign in line for sign in (
                   "looked dead", "not finished by claim", "the job is"))
               for path in cluster.root.glob("worker-*.log")
               for line in path.read_text().splitlines())
