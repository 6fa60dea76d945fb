"""The jobs store on both of its databases: a fresh SQLite file and a fresh PostgreSQL database
on the local server (127.0.0.1:5432, started by .ci/run when it is stopped)."""

from __future__ import annotations

import shutil
import uuid

import pytest

from decide.migrations.apply import upgrade
from decide.store.db import make_engine
from tests.support.local import (
    POSTGRES_ADMIN,
    create_database,
    database_url,
    drop_database,
    migrated_template,
)


def engine_url(name: str) -> str:
    return database_url(POSTGRES_ADMIN, name)


def fresh_name() -> str:
    return f"decide_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def postgres_url():
    """An empty database of its own (for tests that migrate it themselves)."""
    name = fresh_name()
    create_database(POSTGRES_ADMIN, name)
    yield engine_url(name)
    drop_database(POSTGRES_ADMIN, name)


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory):
    """A SQLite file migrated to head once per test process, and the process's migrated
    PostgreSQL database (``tests.support.local.migrated_template``, which the clusters copy
    too); each ``db`` is a copy of one, which holds the same schema, triggers and rows as
    migrating afresh, in a fraction of the time."""
    sqlite_file = tmp_path_factory.mktemp("template") / "jobs.db"
    upgrade(f"sqlite:///{sqlite_file}")
    return {"sqlite": sqlite_file, "postgresql": migrated_template(POSTGRES_ADMIN)}


@pytest.fixture
def migrated_postgres_url(migrated_templates):
    """A database of its own, migrated to head (a copy of the process's template)."""
    name = fresh_name()
    create_database(POSTGRES_ADMIN, name, migrated_templates["postgresql"])
    yield engine_url(name)
    drop_database(POSTGRES_ADMIN, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path, migrated_templates):
    """The store, migrated to head, on a database of its own of each kind."""
    if request.param == "sqlite":
        shutil.copyfile(migrated_templates["sqlite"], tmp_path / "jobs.db")
        url = f"sqlite:///{tmp_path / 'jobs.db'}"
    else:
        url = request.getfixturevalue("migrated_postgres_url")
    engine = make_engine(url)
    yield engine
    engine.dispose()
