"""The daemons of the compaction end-to-end tests: real stdio processes, isolated, one database
each, all closed when the test ends."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from daemon_env import isolated_env
from sidecar_client import Client, spawn

Spawn = Callable[..., Any]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Spawn]:
    """``await start(env=..., config=..., **spawn_kwargs)``: a new initialized daemon on a new
    database; ``config`` (a dict) is written to a file and passed as ``--config``."""
    clients: list[Client] = []

    async def go(
        env: Mapping[str, str | None] | None = None,
        config: dict[str, Any] | None = None,
        **kw: Any,
    ) -> Client:
        n = len(clients)
        if config is not None:
            path = tmp_path / f"config{n}.json"
            path.write_text(json.dumps(config))
            kw["extra_args"] = [*kw.get("extra_args", ()), "--config", str(path)]
        client = await spawn(
            tmp_path / f"db{n}.sqlite", env={**isolated_env(tmp_path), **(env or {})}, **kw
        )
        clients.append(client)
        return client

    yield go
    for c in clients:
        await c.close()
