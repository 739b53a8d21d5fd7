"""The reads unit (``engine/reads.py``): one call serves ``session/context`` with its
revision, and a delta ``since`` one served before."""

from __future__ import annotations

import msgspec

from sidecar.store import Store

from .service.harness import Harness


async def test_context_serves_a_revision_and_a_delta_since_it(store: Store) -> None:
    h = Harness(store)
    s, _a = await h.first_turn(finish=None)
    first = await h.engine.context(s.id, "parts", h.cfg)
    assert first.revision is not None and first.delta is msgspec.UNSET  # no ``since``
    await h.user(s.id, "next")
    second = await h.engine.context(s.id, "parts", h.cfg, since=first.revision)
    assert second.delta is True and second.start is not None
    full = await h.engine.context(s.id, "parts", h.cfg)
    assembled = list(first.messages)[: second.start] + list(second.messages)
    assert assembled == list(full.messages)
