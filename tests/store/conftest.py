"""The jobs store on both of its databases: a fresh SQLite file and a fresh PostgreSQL database
on the local server (127.0.0.1:5432, started by .ci/run when it is stopped)."""

from __future__ import annotations

import os
import uuid

import psycopg
import pytest

from decide.store.db import make_engine
from decide.store.migrate import upgrade

POSTGRES_ADMIN = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")


@pytest.fixture
def postgres_url():
    name = f"decide_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield f"{POSTGRES_ADMIN.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request, tmp_path):
    url = (f"sqlite:///{tmp_path / 'jobs.db'}" if request.param == "sqlite"
           else request.getfixturevalue("postgres_url"))
    upgrade(url)
    engine = make_engine(url)
    yield engine
    engine.dispose()
