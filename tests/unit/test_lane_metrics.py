"""The lane gauges are read from the job store at scrape time; a store that cannot be read
fails no scrape: ``decide_store_up`` says 0, and the rest of the scrape still comes (a failed
scrape would hide every series, and every alert on them, while the store is away)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest

from decide.metrics import LaneCollector


def scrape(collector: LaneCollector) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    served = Counter("decide_example_total", "a counter beside the lanes", registry=registry)
    served.inc()
    return generate_latest(registry).decode()


def test_the_lanes_and_the_store_up_when_it_reads():
    text = scrape(LaneCollector(["m"], queued_lanes=lambda: {("m", "foreground"): (2, 7.5)},
                                live_workers=lambda: {"m": 1}))
    assert 'decide_queue_depth{model="m",priority="foreground"} 2.0' in text
    assert 'decide_oldest_queued_job_age_seconds{model="m",priority="foreground"} 7.5' in text
    assert 'decide_workers{model="m"} 1.0' in text
    assert "decide_store_up 1.0" in text


def test_a_store_that_cannot_be_read_says_so_and_fails_no_scrape():
    def unreadable():
        raise ConnectionError("the database is away")

    text = scrape(LaneCollector(["m"], queued_lanes=unreadable, live_workers=lambda: {}))
    assert "decide_store_up 0.0" in text
    assert "decide_example_total 1.0" in text  # the rest of the scrape came
    assert "decide_queue_depth{" not in text and "decide_workers{" not in text
