"""The one metrics module: every family the service exports (SPEC §6), prefix ``decide_``.

Labels stay bounded: routes are templates (``/v1/jobs/{job_id}``), never ids, keys or states.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

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
rows_total = Counter("decide_rows_total", "Prompt rows decoded", ["model", "type"])
input_tokens = Counter("decide_input_tokens_total", "Tokens read by the model", ["model"])


def exposition() -> tuple[bytes, str]:
    return generate_latest(), CONTENT_TYPE_LATEST
