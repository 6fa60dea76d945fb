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
def own_cluster(cluster_factory):
    """One worker of the default model and a front door, the test's own."""
    made = cluster_factory()
    made.start_worker()
    made.start_api()
    return made


@pytest.fixture
def cluster(own_cluster):
    """A test's cluster (a file may share one among tests that leave it as they found it)."""
    return own_cluster
