"""The webhook delivery loop on SQLite and PostgreSQL against a real HTTP receiver that verifies
every signature with the ``standardwebhooks`` library (issue 25, item 3)."""

from __future__ import annotations

import itertools
import socket
import socketserver
import threading
import time

import pytest

from decide.store import batches, job_claims, jobs, submission
from decide.transport.name_lookup import LOOKUPS_WAITING
from decide.webhooks import endpoints, outbox
from decide.webhooks.delivery import Backoff, WebhookDelivery
from decide.webhooks.send import Sender
from decide.webhooks.urls import WebhookPolicy
from tests.support.waits import wait_until
from tests.support.webhook_receiver import Receiver

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}
LOOPBACK = WebhookPolicy.of(False, ["127.0.0.0/8"])


@pytest.fixture
def receiver():
    receiver = Receiver().up()
    yield receiver
    receiver.close()


def loop(db, *, policy=LOOPBACK, first=0.05, give_up=60.0, resolve=None, tick=0.02):
    sender = Sender(policy, 2.0, **({"resolve": resolve} if resolve else {}))
    return WebhookDelivery(db=db, sender=sender, backoff=Backoff(first, 0.2, give_up),
                           lease_seconds=5.0, keep_seconds=3600.0, tick=tick)


def finished_job(db, owner="alice", status=jobs.SUCCEEDED, **extra):
    job, _ = submission.create_job(db, owner=owner, model="m", priority="background",
                                   request=REQUEST, metadata={"ticket": "A-1"}, rows=1,
                                   input_tokens=3, notify=True, **extra)
    claimed = job_claims.claim_job(db, job.id)
    job_claims.finish_job(db, claimed, status=status, result={"answers": {"r": {"noul": 0.9}}})
    return job


def test_a_finished_job_reaches_its_endpoint_signed_with_the_endpoint_secret(db, receiver):
    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=[endpoints.JOB_FINISHED])
    receiver.trust(endpoint.secret)
    job = finished_job(db)
    assert loop(db).round() == 1
    (delivery,) = receiver.accepted
    assert receiver.rejected == []
    assert delivery.payload["type"] == "job.finished"
    assert delivery.payload["data"]["id"] == job.id
    assert delivery.payload["data"]["status"] == "succeeded"
    assert delivery.payload["data"]["result"] == {"answers": {"r": {"noul": 0.9}}}
    (event,) = outbox.events_of(db, job.id)
    assert event.status == outbox.DELIVERED and delivery.webhook_id == event.id
    (entry,) = outbox.deliveries(db, endpoint.id, limit=10)
    assert entry["status_code"] == 204 and entry["attempt"] == 1 and entry["error"] is None


def test_a_job_url_is_signed_with_the_key_signing_secret(db, receiver):
    endpoints.ensure_signing_secret(db, "alice")
    secret = endpoints.show_signing_secret(db, "alice")
    receiver.trust(secret)
    job = finished_job(db, status=jobs.FAILED, webhook_url=receiver.url + "?job=1")
    loop(db).round()
    (delivery,) = receiver.accepted
    assert delivery.payload["data"]["id"] == job.id and delivery.path == "/hooks?job=1"
    assert delivery.payload["data"]["status"] == "failed"


def test_a_receiver_down_then_up_gets_every_event_once(db, receiver):
    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=list(endpoints.EVENT_TYPES))
    receiver.trust(endpoint.secret)
    receiver.down()
    job_ids = [finished_job(db).id for _ in range(5)]
    batch, item_ids = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "x")], rows_per_item=1)
    item = job_claims.claim_job(db, item_ids[0])
    job_claims.finish_job(db, item, status=jobs.SUCCEEDED, result={"answers": {}})
    delivery = loop(db)
    delivery.start()
    try:
        wait_until(lambda: len([entry for entry in outbox.deliveries(db, endpoint.id, limit=100)
                                if entry["error"]]) >= 12, what="failed tries logged")
        receiver.up()
        wait_until(lambda: len(receiver.unique()) == 6, what=lambda: f"{receiver.ids()}")
        wait_until(lambda: all(event.status == outbox.DELIVERED
                               for subject in [*job_ids, batch.id]
                               for event in outbox.events_of(db, subject)))
    finally:
        delivery.stop()
        assert delivery.join(10)
    ids = receiver.ids()
    assert len(ids) == len(set(ids)) == 6  # each event once: no success was sent again
    kinds = sorted(entry.payload["type"] for entry in receiver.accepted)
    assert kinds == ["batch.completed"] + ["job.finished"] * 5
    (completed,) = [entry for entry in receiver.accepted if entry.payload["type"] ==
                    "batch.completed"]
    assert completed.payload["data"]["request_counts"]["succeeded"] == 1
    log = outbox.deliveries(db, endpoint.id, limit=500)
    assert any(entry["error"] and "ConnectError" in entry["error"] for entry in log)
    assert sum(1 for entry in log if entry["status_code"] == 204) == 6


def test_a_name_resolving_to_loopback_is_refused_at_delivery(db, receiver):
    endpoint = endpoints.add_endpoint(db, owner="alice", url="http://hooks.example/x",
                                      events=[endpoints.JOB_FINISHED])
    job = finished_job(db)
    loop(db, policy=WebhookPolicy(), resolve=lambda host, port: ["127.0.0.1"]).round()
    (event,) = outbox.events_of(db, job.id)
    assert event.status == outbox.FAILED  # refused is final: no retries
    (entry,) = outbox.deliveries(db, endpoint.id, limit=10)
    assert entry["error"].startswith("refused: url's host hooks.example resolves to a "
                                     "loopback address")
    assert receiver.accepted == []


def test_an_event_out_of_time_ends_failed_and_a_deleted_endpoint_fails_its_events(db, receiver):
    kept = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                  events=[endpoints.JOB_FINISHED])
    receiver.trust(kept.secret)
    gone = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                  events=[endpoints.JOB_FINISHED])
    receiver.answer = 500
    # built first, and a second to give up in: the event's age counts from its creation, so
    # a slow first round must still leave time for a second try
    delivery = loop(db, give_up=1.0)
    job = finished_job(db)
    endpoints.delete_endpoint(db, gone.id, "alice")
    wait_until(lambda: delivery.round() == 0 and all(
        event.status == outbox.FAILED for event in outbox.events_of(db, job.id)),
        what=lambda: f"{outbox.events_of(db, job.id)}")
    tries = outbox.deliveries(db, kept.id, limit=100)
    assert len(tries) >= 2 and {entry["status_code"] for entry in tries} == {500}
    assert [entry["error"] for entry in outbox.deliveries(db, gone.id, limit=10)] == [
        "the endpoint was deleted"]


def test_two_loops_share_the_outbox_and_send_each_event_once(db, receiver):
    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=[endpoints.JOB_FINISHED])
    receiver.trust(endpoint.secret)
    for _ in range(20):
        finished_job(db)
    first, second = loop(db), loop(db)
    first.start()
    second.start()
    try:
        wait_until(lambda: len(receiver.ids()) >= 20)
    finally:
        first.stop()
        second.stop()
        assert first.join(10) and second.join(10)
    assert sorted(receiver.ids()) == sorted(set(receiver.ids()))
    assert len(receiver.ids()) == 20


def test_a_name_is_sent_to_the_address_it_was_checked_at(receiver):
    """The try connects to the address the check resolved (no second lookup to rebind), and
    the receiver still sees its own name in Host."""
    secret = endpoints.new_secret()
    receiver.trust(secret)
    sender = Sender(LOOPBACK, 2.0, resolve=lambda host, port: ["127.0.0.1"])
    url = f"http://hooks.test:{receiver.port}/hooks?x=1"
    sent = sender.send(url, secret, "msg_1", '{"type": "job.finished", "data": {}}')
    assert sent.outcome.status_code == 204 and not sent.final
    (delivery,) = receiver.accepted
    assert delivery.host == f"hooks.test:{receiver.port}" and delivery.path == "/hooks?x=1"
    sender.close()


class Trickler:
    """A receiver that answers slowly, one byte at a time: its status and headers at once and
    then a chunked body that never ends (``body``), or its status line itself (``headers``)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.stopping = threading.Event()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[socketserver.BaseRequestHandler]:
        trickler = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                self.request.recv(65536)
                head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                if trickler.mode == "body":
                    self.request.sendall(head)
                    head = b"1\r\nx\r\n" * 1000
                try:
                    for byte in head:
                        self.request.sendall(bytes([byte]))
                        if trickler.stopping.wait(0.2):
                            return
                except OSError:
                    return  # the sender hung up: what a try that ends does

        return Handler

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("mode", ["body", "headers"])
def test_a_slow_receiver_holds_a_try_no_longer_than_its_timeout(mode):
    """httpx's timeout bounds each read, not the whole: a 200 whose body trickles is
    delivered as soon as its status came (the body is not read), and a receiver that trickles
    its status line is cut off at the try's deadline and the try failed."""
    trickler = Trickler(mode)
    # the body's case: 3 s, room for a loaded machine, yet the trickled body takes minutes
    timeout = 3.0 if mode == "body" else 1.0
    sender = Sender(LOOPBACK, timeout)
    try:
        started = time.monotonic()
        sent = sender.send(f"http://127.0.0.1:{trickler.port}/hooks", endpoints.new_secret(),
                           "msg_1", '{"type": "job.finished", "data": {}}')
        took = time.monotonic() - started
    finally:
        sender.close()
        trickler.close()
    if mode == "body":
        assert sent.outcome.status_code == 200 and sent.outcome.error is None
        assert took < timeout
    else:
        assert sent.outcome.status_code is None
        assert sent.outcome.error == "no answer within 1 s (the try's deadline)"
        assert 0.9 < took < 6.0  # a try that waited on the receiver would take about 9 s
    assert not sent.final


def test_a_resolver_that_never_answers_fails_the_try_at_its_deadline():
    """The name's lookup is part of the try: a dead DNS server (a lookup that hangs) fails
    the try once its timeout has passed, to be tried again later, instead of holding the
    delivery loop for the resolver's own timeouts."""
    release = threading.Event()

    def hanging(host: str, port: int) -> list[str]:
        release.wait(30)
        return ["127.0.0.1"]

    sender = Sender(LOOPBACK, 1.0, resolve=hanging)
    try:
        started = time.monotonic()
        sent = sender.send("http://hooks.example/in", endpoints.new_secret(), "msg_1", "{}")
        took = time.monotonic() - started
    finally:
        release.set()
        sender.close()
    assert sent.outcome.status_code is None and not sent.final
    assert sent.outcome.error == ("cannot resolve the host: no answer from the resolver "
                                  "within 1 s")
    assert 0.9 < took < 10.0  # the resolver holds a lookup for 30 s


def test_lookups_left_waiting_on_a_dead_resolver_are_bounded():
    """Each timed-out lookup's thread waits on until the resolver gives up; once
    ``LOOKUPS_WAITING`` wait, a try fails at once instead of leaving another thread, and the
    slots come back when the resolver answers."""
    release = threading.Event()

    def hanging(host: str, port: int) -> list[str]:
        release.wait(30)
        raise OSError("the resolver gave up")

    sender = Sender(LOOPBACK, 0.05, resolve=hanging)
    try:
        errors = [sender.send("http://hooks.example/in", endpoints.new_secret(), f"msg_{n}",
                              "{}").outcome.error for n in range(LOOKUPS_WAITING + 1)]
        waiting = [t for t in threading.enumerate() if t.name == "name-lookup"]
    finally:
        release.set()
    assert errors[:-1] == ["cannot resolve the host: no answer from the resolver "
                           "within 0.05 s"] * LOOKUPS_WAITING
    assert errors[-1] == (f"cannot resolve the host: {LOOKUPS_WAITING} lookups are still "
                          "waiting on the resolver")
    assert len(waiting) >= LOOKUPS_WAITING
    wait_until(lambda: not any(t.name == "name-lookup" for t in threading.enumerate()))
    after = sender.send("http://hooks.example/in", endpoints.new_secret(), "msg_x", "{}")
    sender.close()
    assert after.outcome.error == "cannot resolve the host: the resolver gave up"


def test_a_try_that_fails_in_an_unforeseen_way_is_recorded_as_a_failed_try():
    """Whatever the HTTP client raises ends as a failed try with its error (retried, then out
    of time after the give-up), never as an event that no try is ever recorded for."""
    sender = Sender(LOOPBACK, 1.0, resolve=lambda host, port: ["127.0.0.1"])

    def broken(*args, **kwargs):
        raise RuntimeError("something nobody foresaw")

    sender._http().stream = broken  # type: ignore[method-assign]
    try:
        sent = sender.send("http://hooks.example/in", endpoints.new_secret(), "msg_1", "{}")
    finally:
        sender.close()
    assert sent.outcome.status_code is None and not sent.final
    assert sent.outcome.error == "RuntimeError: something nobody foresaw"


def test_no_connection_is_kept_alive_for_another_host_at_the_same_address():
    sender = Sender(LOOPBACK, 1.0)
    pool = sender._http()._transport._pool  # type: ignore[attr-defined]
    assert pool._max_keepalive_connections == 0
    sender.close()


def test_a_failed_try_logs_the_urls_origin_not_its_token(db, receiver, caplog):
    endpoints.ensure_signing_secret(db, "alice")
    secret = endpoints.show_signing_secret(db, "alice")
    receiver.trust(secret)
    receiver.answer = 503
    finished_job(db, webhook_url=receiver.url + "?token=s3cr3t-t0ken")
    with caplog.at_level("WARNING", logger="decide.webhooks"):
        assert loop(db).round() == 1
    (record,) = [r for r in caplog.records if r.name == "decide.webhooks"]
    assert f"http://127.0.0.1:{receiver.port}," in record.getMessage()
    assert "s3cr3t" not in record.getMessage() and "/hooks" not in record.getMessage()


def test_a_job_url_whose_key_has_no_secret_waits_for_one(db, receiver, caplog):
    """The key's secret may have been taken back by a refused submission racing this job's:
    its event stays pending, tried again, and is signed with the secret made meanwhile."""
    job = finished_job(db, webhook_url=receiver.url)
    delivery = loop(db)
    with caplog.at_level("WARNING", logger="decide.webhooks"):
        assert delivery.round() == 1
    (event,) = outbox.events_of(db, job.id)
    assert event.status == outbox.PENDING
    assert "no signing secret (POST /v1/webhooks/secret)" in caplog.text
    receiver.trust(endpoints.rotate_signing_secret(db, "alice"))
    wait_until(lambda: delivery.round() >= 0 and len(receiver.unique()) == 1)
    (event,) = outbox.events_of(db, job.id)
    assert event.status == outbox.DELIVERED and receiver.ids() == [event.id]


class Hanging:
    """A receiver that takes every connection and never answers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self.listener.getsockname()[1]
        self.held: list[socket.socket] = []
        self.stopping = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self.held.append(connection)

    def close(self) -> None:
        self.stopping.set()
        self.listener.close()
        for connection in self.held:
            connection.close()


def test_a_key_whose_receivers_hang_never_holds_another_keys_event(db, receiver):
    """Issue 35, item 4: bob's 16 endpoints never answer and he has 3 finished jobs (48
    events due first); alice's one event still goes out at once, while bob's tries hang,
    and bob never has more than half the senders."""
    hanging = Hanging()
    for number in range(16):
        endpoints.add_endpoint(db, owner="bob", url=f"http://127.0.0.1:{hanging.port}/b{number}",
                               events=[endpoints.JOB_FINISHED])
    for _ in range(3):
        finished_job(db, owner="bob")
    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=[endpoints.JOB_FINISHED])
    receiver.trust(endpoint.secret)
    delivery = loop(db)
    delivery.start()
    try:
        # bob's tries hang first (under load alice's could otherwise go before any did)
        wait_until(lambda: len(hanging.held) >= 1, timeout=10.0)
        started = time.monotonic()
        job = finished_job(db, owner="alice")
        wait_until(lambda: len(receiver.unique()) == 1, timeout=10.0)
        took = time.monotonic() - started
        hung = len(hanging.held)
    finally:
        delivery.stop()
        delivery.join(15.0)
        hanging.close()
    assert receiver.unique()[outbox.events_of(db, job.id)[0].id].payload["data"]["id"] == job.id
    assert took < 1.5  # bob's tries end at their 2 s timeout: alice's did not wait for one
    assert 1 <= hung <= 4  # at most PER_KEY_IN_FLIGHT of bob's in flight


def test_due_events_take_keys_in_turn(db):
    """Read key by key: every key's longest due first, however many one key has."""
    for _ in range(5):
        endpoints.add_endpoint(db, owner="bob", url="http://hooks.example/b",
                               events=[endpoints.JOB_FINISHED])
    endpoints.add_endpoint(db, owner="alice", url="http://hooks.example/a",
                           events=[endpoints.JOB_FINISHED])
    for _ in range(2):
        finished_job(db, owner="bob")
    finished_job(db, owner="alice")
    everything = outbox.due_events(db, 100)
    assert [event.owner for event in everything].count("bob") == 10
    taken = outbox.due_events(db, 3, per_owner=2)
    assert sorted(event.owner for event in taken) == ["alice", "bob", "bob"]
    assert [event.owner for event in outbox.due_events(db, 100, per_owner=1)] in (
        ["bob", "alice"], ["alice", "bob"])


def counting_rounds(delivery: WebhookDelivery) -> list[tuple[float, float]]:
    """When each of the loop's rounds started and ended."""
    rounds: list[tuple[float, float]] = []
    dispatch = delivery.dispatch

    def counted():
        started = time.monotonic()
        try:
            return dispatch()
        finally:
            rounds.append((started, time.monotonic()))

    delivery.dispatch = counted
    return rounds


def test_an_idle_loop_spreads_its_rounds_out_and_a_job_ending_here_starts_one(db, receiver):
    """Rounds that find nothing double the wait (0.02 s up to 0.32 s here: 75 rounds in 1.5 s
    at the busy tick, about 9 so); a job that ends in this process starts one at once. In the
    second loop rounds are 0.5, 1 and 2 s apart, so one that ends 3.7 s in would otherwise wait
    for the round at 7.5 s."""
    idle = WebhookDelivery(db=db, sender=Sender(LOOPBACK, 2.0), backoff=Backoff(0.05, 0.2),
                           lease_seconds=5.0, keep_seconds=3600.0, tick=0.02, idle_tick=0.32)
    rounds = counting_rounds(idle)
    idle.start()
    time.sleep(1.5)
    idle.stop()
    assert idle.join(10)
    assert 5 <= len(rounds) <= 14, len(rounds)
    # the waits between rounds (a round's own time left out: a busy host lengthens it)
    gaps = [later[0] - earlier[1] for earlier, later in itertools.pairwise(rounds)]
    assert max(gaps) < 0.5 and gaps[-1] > 0.25, gaps  # backed off, never past the idle wait

    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=[endpoints.JOB_FINISHED])
    receiver.trust(endpoint.secret)
    delivery = WebhookDelivery(db=db, sender=Sender(LOOPBACK, 2.0),
                               backoff=Backoff(0.05, 0.2), lease_seconds=5.0,
                               keep_seconds=3600.0, tick=0.5, idle_tick=30.0)
    delivery.start()
    try:
        time.sleep(3.7)
        ended = time.monotonic()
        job = finished_job(db)
        wait_until(lambda: len(receiver.accepted) == 1, timeout=10, poll=0.05,
                   what="the event sent")
        assert time.monotonic() - ended < 2.5
    finally:
        delivery.stop()
        assert delivery.join(10)
    assert receiver.accepted[0].payload["data"]["id"] == job.id


def test_a_retry_of_an_idle_loop_goes_out_when_it_falls_due(db, receiver):
    """The receiver is down for the first try; the retry, due 4 s later, is sent then. Rounds
    that found nothing would otherwise have backed off past it (0.5, 1, 2, 4 s apart: the
    round after it about 7.5 s after the first try)."""
    endpoint = endpoints.add_endpoint(db, owner="alice", url=receiver.url,
                                      events=[endpoints.JOB_FINISHED])
    receiver.trust(endpoint.secret)
    receiver.down()
    delivery = WebhookDelivery(db=db, sender=Sender(LOOPBACK, 2.0), backoff=Backoff(4.0, 4.0),
                               lease_seconds=5.0, keep_seconds=3600.0, tick=0.5,
                               idle_tick=30.0)
    delivery.start()
    try:
        finished_job(db)
        wait_until(lambda: outbox.deliveries(db, endpoint.id, limit=10), timeout=10,
                   poll=0.02, what="the first try")
        failed = time.monotonic()
        receiver.up()
        wait_until(lambda: len(receiver.accepted) == 1, timeout=15, poll=0.05,
                   what="the retry")
        assert 3.5 < time.monotonic() - failed < 6.0
    finally:
        delivery.stop()
        assert delivery.join(10)
