"""Fixtures for the writer tests: a real HTTP server on 127.0.0.1 and a real httpx client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from .helpers import SleepRecorder
from .httpserver import ScriptedServer


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    # trust_env=False: a proxy configured in the environment must not intercept 127.0.0.1.
    async with httpx.AsyncClient(trust_env=False) as client:
        yield client


@pytest.fixture
def sleeper() -> SleepRecorder:
    return SleepRecorder()
