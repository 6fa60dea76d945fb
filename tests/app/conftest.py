"""The front door in-process: ``create_app`` (through ``launch.common``, as both front doors
are built) over a real SQLite store and the embedded model's real vocabulary, so rows, tokens
and limits are the service's own, with a scripted reader in place of the model's weights.

Jobs are decoded inline by the worker's own ``run_job`` in the thread that queues them, so a
request that is answered has been decoded by then: nothing here waits on a clock. A test that
needs jobs to stay queued holds the worker (``front_door.worker.holding = True``) and lets
them go with ``release()``."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from decide.config.settings import Settings
from decide.core.engine import DecisionEngine
from decide.launch.common import api_context, app_for
from decide.llm.catalog import ModelConfig, install_embedded_default, load_catalog
from decide.llm.engines import LoadedEngine, context_window, load_planner
from decide.llm.gguf import GgufTokenizer
from decide.migrations.apply import upgrade
from decide.store import job_reads
from decide.store.db import Database, make_engine
from decide.transport.events import JobEvents
from decide.worker.execute import run_job
from tests.fakes import ScriptedReader

KEYS = ("key-alpha", "key-beta", "key-admin")


class InlineWorker:
    """The ``JobQueue`` of this tier: each job sent is decoded at once by ``run_job`` over the
    scripted engine, or kept queued while ``holding``."""

    def __init__(self, db: Database, engines: dict[str, DecisionEngine],
                 events: JobEvents) -> None:
        self._db = db
        self._engines = engines
        self._events = events
        self.holding = False
        self.sent: list[tuple[str, str, str]] = []
        """(job id, priority, owner) in the order the front door queued them."""
        self.cancels: list[str] = []

    def send(self, job_id: str, model: str, priority: str, owner: str = "") -> None:
        self.sent.append((job_id, priority, owner))
        if not self.holding:
            self.decode(job_id)

    def batch_stored(self, job_ids: list[str], model: str, priority: str,
                     owner: str = "") -> None:
        for job_id in job_ids:
            self.send(job_id, model, priority, owner)

    def cancel(self, job_id: str) -> None:
        self.cancels.append(job_id)

    def ready(self) -> tuple[bool, str]:
        return True, "the inline worker decodes as jobs arrive"

    def decode(self, job_id: str) -> str | None:
        return run_job(job_id, db=self._db, engine_for=self._engines.__getitem__,
                       on_finished=self._events.publish)

    def release(self) -> list[str | None]:
        """Stop holding, and decode every job still queued, oldest first."""
        self.holding = False
        queued = [job_id for job_id, *_ in job_reads.queued_jobs(self._db)]
        return [self.decode(job_id) for job_id in queued]


@dataclass
class FrontDoor:
    client: TestClient
    worker: InlineWorker
    db: Database
    reader: ScriptedReader

    def keyed(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture(autouse=True)
def four_penalties(monkeypatch):
    """Fits here try four of the service's penalties, its range end to end, and the gate's
    noise test two shuffles: these tests show the routes and the worker around a fit, which
    hold for any grid and count (the fit's own choices are tests/unit/test_fit.py's and the
    real model's), and the fast tier stays fast."""
    from decide.teach import gate, regression

    monkeypatch.setattr(regression, "PENALTIES", (0.001, 0.1, 10.0, 1000.0))
    monkeypatch.setattr(gate, "SHUFFLES", 2)


@pytest.fixture(scope="session")
def vocabulary(settings) -> LoadedEngine:
    """The embedded default's planner: its real tokenizer, profile and window (no weights)."""
    return load_planner(load_catalog(settings).get(None), settings)


@pytest.fixture(scope="session")
def tokenizer(vocabulary) -> GgufTokenizer:
    return GgufTokenizer(vocabulary.model)


@pytest.fixture(scope="session")
def migrated_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("app-template") / "jobs.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def front_door_factory(tmp_path, settings, vocabulary, tokenizer, migrated_file
                       ) -> Iterator[Callable[..., FrontDoor]]:
    """``front_door_factory(**settings)``: a front door with those settings (keys, limits)."""
    opened: list[TestClient] = []

    def make(**overrides: object) -> FrontDoor:
        database = tmp_path / f"jobs-{len(opened)}.db"
        shutil.copyfile(migrated_file, database)
        chosen = Settings(**{"data_dir": settings.data_dir, "api_keys": "",
                             "database_url": f"sqlite:///{database}", **overrides})
        db = make_engine(chosen.resolved_database_url)
        catalog = load_catalog(chosen)
        reader = ScriptedReader()

        def engine(config: ModelConfig, reads: ScriptedReader | None) -> DecisionEngine:
            """Each configured model as the embedded GGUF with that model's window."""
            return DecisionEngine(config.name, tokenizer, reads, vocabulary.engine.profile,
                                  context_window(config, vocabulary.model))

        events = JobEvents()
        worker = InlineWorker(db, {name: engine(config, reader)
                                   for name, config in catalog.models.items()}, events)
        context = api_context(chosen, db, catalog, worker, events,
                              planners={name: engine(config, None)
                                        for name, config in catalog.models.items()})
        client = TestClient(app_for(context, lambda: None), raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        return FrontDoor(client=client, worker=worker, db=db, reader=reader)

    yield make
    for client in opened:
        client.__exit__(None, None, None)


@pytest.fixture
def front_door(front_door_factory) -> FrontDoor:
    """Two keys and an admin key, a 3-second sync wait."""
    return front_door_factory(api_keys=",".join(KEYS), admin_keys=KEYS[2],
                              sync_wait_seconds=3)


@pytest.fixture
def open_door(front_door_factory) -> FrontDoor:
    """No keys."""
    return front_door_factory()


@pytest.fixture
def open_client(front_door_factory, tmp_path, settings) -> TestClient:
    """No keys; besides the default, ``gemma-long`` configures the same GGUF with a 65,536-token
    window, so a 40,000-token row meets the 36,864-token row limit before the window."""
    models = tmp_path / "models.toml"
    models.write_text(f'[models.gemma-long]\npath = "{install_embedded_default(settings.data_dir)}"'
                      '\ncontext_size = 65536\ndescription = "the embedded GGUF, a long window"\n')
    return front_door_factory(models_file=models).client
