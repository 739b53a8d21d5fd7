"""The steering unit (``engine/steering.py``): pins through the write door, the compaction
records, and undoing a compaction."""

from __future__ import annotations

from sidecar.engine.compactor import Request
from sidecar.engine.window import load_window
from sidecar.store import Store, steer

from .service.harness import Harness


async def test_pin_and_unpin_are_stored(store: Store) -> None:
    h = Harness(store)
    s, a = await h.first_turn(finish=None)
    part = (await store.window(s.id))[-1].parts[-1]
    await h.engine.pin(s.id, a.id, part.id, True)
    assert await steer.pins(store, s.id) == [(a.id, part.id)]
    await h.engine.pin(s.id, a.id, part.id, False)
    assert await steer.pins(store, s.id) == []


async def test_uncompact_restores_the_window_before_the_compaction(store: Store) -> None:
    h = Harness(store)
    s, _a = await h.first_turn(finish=None)
    await h.user(s.id, "more")
    session = await store.require_session(s.id)
    before = [m.info.id for m in await load_window(store, session)]
    await h.engine.compact(Request(session_id=s.id), h.cfg)
    records = await h.engine.compactions(s.id)
    assert len(records) == 1
    assert [m.info.id for m in await load_window(store, session)] != before
    removed = await h.engine.uncompact(s.id, None, False)
    assert records[0].marker_id in removed
    assert [m.info.id for m in await load_window(store, session)] == before
    assert await h.engine.compactions(s.id) == []
