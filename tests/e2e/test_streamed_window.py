"""A window over ``Store.stream_over`` (4 MiB of stored JSON) read cold by a real daemon is
rendered as it is read (``engine/streamed.py``) and reaches the client whole over stdio: the
same messages, in every format, as the daemon that wrote it serves from its cache (it read
the window while it was small, and its writes kept the entry since)."""

from __future__ import annotations

import msgspec
import pytest

from .conftest import Spawner
from .test_context_delta import FORMATS, session_of, turn

TURNS = 56
OUTPUT = 80_000  # characters of each turn's tool output: 4.5 MB of window in all
LARGE = 1_100_000


@pytest.mark.parametrize("fmt", FORMATS)
async def test_a_cold_window_over_four_mib_reaches_the_client_whole(
    spawner: Spawner, fmt: str
) -> None:
    writer = await spawner()
    sid = await session_of(writer, turns=2, output=OUTPUT)
    # Over 1 MiB: stored as it came, in place (a BLOB row), not deflated like the others.
    await turn(writer, sid, "a large output", output=LARGE)
    await writer.context(sid, fmt)  # still under 4 MiB: read whole, and cached
    for i in range(2, TURNS):
        await turn(writer, sid, f"step {i}", output=OUTPUT)
    cached = await writer.context(sid, fmt)  # from the cache: the whole-window path
    await writer.close()
    reader = await spawner()  # a fresh daemon: the window is read cold
    first = await reader.context(sid, fmt)
    assert msgspec.json.encode(first.messages) == msgspec.json.encode(cached.messages)
    assert len(msgspec.json.encode(first.messages)) > 4 << 20
    assert first.estimated_tokens == cached.estimated_tokens
    again = await reader.context(sid, fmt, since=first.revision)
    assert again.delta is False  # a streamed window is not held for a delta
    assert msgspec.json.encode(again.messages) == msgspec.json.encode(cached.messages)
