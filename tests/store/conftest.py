"""The jobs store on both of its databases: a fresh SQLite file and a fresh PostgreSQL database
on the local server (127.0.0.1:5432, started by .ci/run when it is stopped)."""

from __future__ import annotations

import os
import shutil
import uuid

import psycopg
import pytest

from decide.migrations.apply import upgrade
from decide.store.db import make_engine

POSTGRES_ADMIN = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


def admin_execute(statement: str) -> None:
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        admin.execute(statement)


def engine_url(name: str) -> str:
    return f"{POSTGRES_ADMIN.replace('postgresql://', 'postgresql+psycopg://')}/{name}"


def fresh_name() -> str:
    return f"decide_test_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def postgres_url():
    """An empty database of its own (for tests that migrate it themselves)."""
    name = fresh_name()
    admin_execute(f'CREATE DATABASE "{name}"')
    yield engine_url(name)
    admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory):
    """A SQLite file and a PostgreSQL database migrated to head once per test process; each
    ``db`` is a copy of one (a file copy, ``CREATE DATABASE … TEMPLATE``), which holds the
    same schema, triggers and rows as migrating afresh, in a fraction of the time."""
    sqlite_file = tmp_path_factory.mktemp("template") / "jobs.db"
    upgrade(f"sqlite:///{sqlite_file}")
    name = fresh_name()
    admin_execute(f'CREATE DATABASE "{name}"')
    upgrade(engine_url(name))
    yield {"sqlite": sqlite_file, "postgresql": name}
    admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def migrated_postgres_url(migrated_templates):
    """A database of its own, migrated to head (a copy of the session's template)."""
    name = fresh_name()
    admin_execute(f'CREATE DATABASE "{name}" TEMPLATE "{migrated_templates["postgresql"]}" '
                  f"STRATEGY FILE_COPY")
    yield engine_url(name)
    admin_execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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
