"""The one metrics module: every family the service exports (SPEC §6), prefix ``decide_``.

Labels stay bounded: routes are templates (``/v1/jobs/{job_id}``), never ids, keys or states.

Counters and histograms live in the process that counts them (the API counts requests and
submissions; a worker counts what it decodes, on its own metrics port). Queue depth, the age
of the oldest queued job and live workers are read from the database when scraped, so every
API process reports the same truth. With ``PROMETHEUS_MULTIPROC_DIR`` set (several API
processes on one host), prometheus_client's multiprocess mode merges the processes' counters.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from decide.core.protocol import PRIORITIES

log = logging.getLogger("decide.metrics")

# Buckets from a few milliseconds to ten minutes: sync calls and multi-minute backlogs alike.
SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300,
                   600)

http_requests = Counter("decide_http_requests_total", "HTTP requests answered",
                        ["route", "method", "status"])
http_duration = Histogram("decide_http_request_duration_seconds", "HTTP request latency",
                          ["route"], buckets=SECONDS_BUCKETS)
jobs_submitted = Counter("decide_jobs_submitted_total", "Jobs accepted", ["model", "priority"])
jobs_finished = Counter("decide_jobs_finished_total", "Jobs that reached a final state",
                        ["model", "priority", "status"])
queue_wait = Histogram("decide_job_queue_wait_seconds", "Time from accepted to started",
                       ["model", "priority"], buckets=SECONDS_BUCKETS)
decode_time = Histogram("decide_job_decode_seconds", "Time spent decoding a job", ["model"],
                        buckets=SECONDS_BUCKETS)
jobs_together = Histogram("decide_jobs_decoded_together",
                          "Jobs a worker decoded in one shared decode (batches across jobs)",
                          ["model"], buckets=(2, 4, 8, 16, 32, 64, 128, 256))
rows_total = Counter("decide_rows_total", "Prompt rows decoded", ["model", "type"])
input_tokens = Counter("decide_input_tokens_total", "Tokens read by the model", ["model"])
taught_answers = Counter("decide_taught_answers_total",
                         "Answers given by a taught question's readout", ["model", "type"])
webhook_tries = Counter("decide_webhook_deliveries_total",
                        "Webhook delivery tries, by event type and outcome (delivered, retried, "
                        "failed)", ["event", "outcome"])
model_loaded = Gauge("decide_model_loaded", "1 while this worker holds its model loaded",
                     ["model"], multiprocess_mode="livemax")

EXPORTED = ("decide_http_requests_total", "decide_http_request_duration_seconds",
            "decide_jobs_submitted_total", "decide_jobs_finished_total",
            "decide_job_queue_wait_seconds", "decide_job_decode_seconds",
            "decide_jobs_decoded_together", "decide_rows_total",
            "decide_input_tokens_total", "decide_taught_answers_total", "decide_model_loaded",
            "decide_webhook_deliveries_total",
            "decide_queue_depth",
            "decide_oldest_queued_job_age_seconds", "decide_workers", "decide_store_up")
"""Every family name, for the dashboard and alert tests."""


LaneFigures = dict[tuple[str, str], tuple[int, float | None]]
"""(model, priority) -> (jobs queued, age in seconds of the oldest queued job, by the
database's clock, or None)."""


class LaneCollector(Collector):
    """Lane depth, oldest queued job and live workers, read from the source of truth when
    scraped, through the two readers the composition root passes in (this module holds no
    SQL: ``store.status.queued_lanes`` and ``store.workers.live_counts``)."""

    def __init__(self, models: list[str], *, queued_lanes: Callable[[], LaneFigures],
                 live_workers: Callable[[], dict[str, int]]) -> None:
        self._models = models
        self._queued_lanes = queued_lanes
        self._live_workers = live_workers

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The lane gauges and ``decide_store_up`` 1; only ``decide_store_up`` 0 when the
        database cannot be read: the rest of the scrape (the request and job counters) still
        comes, and an alert sees the database, instead of a failed scrape hiding everything."""
        store_up = GaugeMetricFamily("decide_store_up",
                                     "Whether the last scrape could read the job store")
        try:
            figures = list(self._lane_figures())
        except Exception as error:  # any failure of the store: the scrape itself goes on
            log.warning("metrics: the job store could not be read (%s)", type(error).__name__)
            store_up.add_metric([], 0)
            yield store_up
            return
        store_up.add_metric([], 1)
        yield from (*figures, store_up)

    def _lane_figures(self) -> Iterator[GaugeMetricFamily]:
        lanes = self._queued_lanes()
        depth = GaugeMetricFamily("decide_queue_depth", "Jobs queued per lane",
                                  labels=["model", "priority"])
        age = GaugeMetricFamily("decide_oldest_queued_job_age_seconds",
                                "Age of the oldest queued job per lane (0 when none)",
                                labels=["model", "priority"])
        models = sorted(set(self._models) | {model for model, _ in lanes})
        for model in models:
            for priority in PRIORITIES:
                count, oldest = lanes.get((model, priority), (0, None))
                depth.add_metric([model, priority], count)
                age.add_metric([model, priority], 0.0 if oldest is None else oldest)
        workers = GaugeMetricFamily("decide_workers", "Live workers per model",
                                    labels=["model"])
        alive = self._live_workers()
        for model in models:
            workers.add_metric([model], alive.get(model, 0))
        yield from (depth, age, workers)


PORTS_TRIED = 100
"""How many ports from the configured one a worker tries for its metrics (9101 to 9200)."""


def serve(port: int, host: str, tries: int = PORTS_TRIED) -> int:
    """Serve this process's metrics on ``host`` in a thread, on the first free port from
    ``port`` up (several workers on one host take 9101, 9102, ...); the port taken. Raises
    the last ``OSError`` when none of ``tries`` ports is free."""
    failure = OSError(f"no port from {port} to try")
    for candidate in range(port, min(port + tries, 65536)):
        try:
            start_http_server(candidate, addr=host)
        except OSError as error:
            failure = error
            continue
        return candidate
    raise failure


class Exposition:
    """What ``GET /metrics`` answers in one process."""

    def __init__(self, store: LaneCollector | None = None) -> None:
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self._registry = CollectorRegistry()
            MultiProcessCollector(self._registry)
        else:
            self._registry = REGISTRY
        if store is not None:
            self._registry.register(store)
        self._store = store

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self._registry), CONTENT_TYPE_LATEST

    def close(self) -> None:
        if self._store is not None:
            self._registry.unregister(self._store)
            self._store = None  # closed once, however often asked
