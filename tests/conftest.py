"""Shared fixtures (a real store per test, on each backend) and the Hypothesis profiles.

Backends: every test that asks for ``store`` or ``db`` runs twice, on a SQLite file and on a
fresh database of a throwaway PostgreSQL cluster (``pgcluster.py``), started once per run.
Where PostgreSQL's server programs are missing those runs skip, saying what to install; under
CI (``CI=true``) they fail instead, since .ci/run installs them.

Profiles: ``ci`` (derandomized: the same examples every run, no example database), chosen when
``CI=true`` (.ci/run sets it); ``random`` (fresh examples each run, for hunting by hand:
``HYPOTHESIS_PROFILE=random python -m pytest``). Without either, Hypothesis' defaults apply.
Per-test ``@settings`` inherit from the loaded profile, since it is loaded before the test
modules are imported.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import settings
from pgcluster import BACKENDS, Cluster, available_reason, fresh_database, make_template, run_async

from sidecar.store import Store

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
_profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "")
if _profile:
    settings.load_profile(_profile)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[Cluster]:
    """The run's PostgreSQL cluster, with a migrated template database to copy per test."""
    reason = available_reason()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"PostgreSQL is required under CI: {reason}")
        pytest.skip(f"PostgreSQL tests need a PostgreSQL server: {reason}")
    cluster = Cluster()
    cluster.start()
    try:
        run_async(make_template(cluster))
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend this test runs on."""
    param: str = request.param
    return param


@pytest.fixture
async def db(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str | Path:
    """Where a fresh database is, for ``Store.open`` or ``serve --db``."""
    return await fresh_database(backend, request, tmp_path / "store.db")


@pytest.fixture
async def store(db: str | Path) -> AsyncIterator[Store]:
    s = await Store.open(db)
    try:
        yield s
    finally:
        await s.close()
