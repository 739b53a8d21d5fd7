"""Shared fixtures (a real on-disk store per test) and the Hypothesis profiles.

Profiles: ``ci`` (derandomized: the same examples every run, no example database), chosen when
``CI=true`` (.ci/run sets it); ``random`` (fresh examples each run, for hunting by hand:
``HYPOTHESIS_PROFILE=random python -m pytest``). Without either, Hypothesis' defaults apply.
Per-test ``@settings`` inherit from the loaded profile, since it is loaded before the test
modules are imported.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import settings

from sidecar.store import Store

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False)
_profile = os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") == "true" else "")
if _profile:
    settings.load_profile(_profile)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = await Store.open(tmp_path / "store.db")
    try:
        yield s
    finally:
        await s.close()
