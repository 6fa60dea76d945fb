"""A real distributed setup per test (``tests.support.local.LocalCluster``): a fresh PostgreSQL
database, Redis, ``decide serve`` and ``decide worker`` processes."""

from __future__ import annotations

import pytest

from tests.support.local import LocalCluster


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[LocalCluster] = []

    def make(own_postgres: bool = False, **extra_env: str) -> LocalCluster:
        cluster = LocalCluster(tmp_path, extra_env, own_postgres=own_postgres)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()


@pytest.fixture
def cluster(cluster_factory):
    """One worker of the default model and a front door."""
    made = cluster_factory()
    made.start_worker()
    made.start_api()
    return made
