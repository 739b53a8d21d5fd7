"""``Writers.warm``: the HTTP writers' client built ahead of the first compaction (what its
first summary request would otherwise pay: the HTTP stack's imports and TLS setup)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

import sidecar.engine.writers as writers_mod
from sidecar.engine.writers import Writers
from sidecar.model.config import Config, SummarizerConfig
from sidecar.summarizers.factory import HTTP_WRITERS


class _Host:
    async def client_complete(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("not called")


def _config(provider: str) -> Config:
    return Config(summarizer=SummarizerConfig(provider=provider, model="m"))  # type: ignore[arg-type]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The HTTP clients the writers build."""
    made: list[Any] = []
    real = writers_mod._http_client

    def counting(timeout: float) -> Any:
        made.append(real(timeout))
        return made[-1]

    monkeypatch.setattr(writers_mod, "_http_client", counting)
    return made


async def test_warm_builds_the_client_the_first_writer_then_uses(built: list[Any]) -> None:
    writers = Writers(_Host())  # type: ignore[arg-type]
    cfg = _config("openai")
    await writers.warm(cfg)
    assert len(built) == 1
    writers.get(cfg)
    writers.get(_config("anthropic"))
    assert len(built) == 1  # built once, ahead of the first compaction
    await writers.aclose()


async def test_warm_leaves_the_offline_writer_alone(built: list[Any]) -> None:
    writers = Writers(_Host())  # type: ignore[arg-type]
    await writers.warm(_config("extractive"))
    assert built == []
    await writers.aclose()


_WARM_THEN_LIST = """
import asyncio, sys
from sidecar.engine.writers import Writers
from sidecar.model.config import Config, SummarizerConfig

class Host:
    async def client_complete(self, *a, **k):
        raise AssertionError("not called")

async def main():
    writers = Writers(Host())
    await writers.warm(Config(summarizer=SummarizerConfig(provider=sys.argv[1], model="m")))
    print(" ".join(sorted(m for m in sys.modules if m.startswith("sidecar.summarizers."))))
    await writers.aclose()

asyncio.run(main())
"""


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_warm_imports_the_configured_writer_ahead_of_the_first_compaction(provider: str) -> None:
    """The writer's module (and what it imports: the retry loop, the SSE parser) was imported by
    the first compaction, ~15-35 ms of CPU in the turn that compacted first."""
    out = subprocess.run(
        [sys.executable, "-c", _WARM_THEN_LIST, provider],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    assert f"sidecar.summarizers.{provider}" in out
    assert "sidecar.summarizers._retry" in out


@pytest.mark.parametrize("provider", sorted(HTTP_WRITERS))
async def test_the_module_warm_imports_is_the_one_the_writer_comes_from(provider: str) -> None:
    writers = Writers(_Host())  # type: ignore[arg-type]
    writer = writers.get(_config(provider))
    assert type(writer).__module__ == HTTP_WRITERS[provider]
    await writers.aclose()
