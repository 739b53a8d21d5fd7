"""Issue 32 item 4: a preparation whose writer fails is dropped, never written offline.

With ``compaction.prepare``, the configured writer (an OpenAI-compatible HTTP server on
127.0.0.1) fails while the summary is prepared in the background. The preparation is
discarded and counted (``prepared_failed``, ``daemon/status`` ``preparedFailed``); it is
not replaced by the offline writer's summary. The overflow then compacts as usual, with the
configured writer, healthy again (and with its fallback when it fails there too).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from sidecar.store import Store
from tests.summarizers.httpserver import Reply, ScriptedServer
from tests.summarizers.test_openai_writer import stream

from .harness import Harness
from .test_prepare import _compacted, _near, _overflow

SUMMARY = "We are refactoring the parser; next: the tests."
DOWN = Reply(503, body={"error": {"message": "overloaded"}})


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    async with ScriptedServer() as srv:
        yield srv


def _harness(store: Store, server: ScriptedServer) -> Harness:
    layer: dict[str, Any] = {
        "summarizer": {"provider": "openai", "model": "m", "baseURL": server.url + "/v1"},
        "compaction": {"prepare": 0.7},
    }
    layer["summarizer"]["maxRetries"] = 0
    return Harness(store, layer)


async def test_a_failed_preparation_is_dropped_and_the_overflow_uses_the_writer(
    store: Store, server: ScriptedServer
) -> None:
    h = _harness(store, server)
    server.script(DOWN, stream(SUMMARY))  # down while preparing, healthy at the overflow
    s = await h.session()
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is None  # dropped, not written offline
    assert len(server.requests) == 1
    assert h.engine.tally.prepared_failed == 1
    assert h.engine.tally.prepared_discarded_tokens == 0
    await _overflow(h, s.id)
    [event] = _compacted(h)
    assert event.prepared is False and not event.rejected
    assert event.writer == "openai/m"  # the configured writer, not the offline one
    assert len(server.requests) == 2
    await h.engine.close()


async def test_when_the_writer_fails_again_at_the_overflow_its_fallback_writes(
    store: Store, server: ScriptedServer
) -> None:
    h = _harness(store, server)
    server.script(DOWN, DOWN)
    s = await h.session()
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is None and h.engine.tally.prepared_failed == 1
    await _overflow(h, s.id)
    [event] = _compacted(h)
    assert event.prepared is False and event.writer == "extractive"
    assert len(server.requests) == 2
    await h.engine.close()
