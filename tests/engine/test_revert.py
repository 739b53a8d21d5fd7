"""The revert unit (``engine/revert.py``): hiding messages, undoing it, and the cleanup a
compaction does first; Structs read from the store are never mutated."""

from __future__ import annotations

import copy

import pytest

from sidecar.engine import revert
from sidecar.engine.window import load_window
from sidecar.errors import SidecarError
from sidecar.store import Store

from .service.harness import Harness


async def test_revert_hides_from_the_message_on_and_unrevert_brings_it_back(store: Store) -> None:
    h = Harness(store)
    s, a = await h.first_turn(finish=None)
    u2 = await h.user(s.id, "again")
    read = await store.require_session(s.id)
    before = copy.deepcopy(read)
    reverted = await revert.revert(store, read, u2.id, None)
    assert read == before  # the Struct read is shared: a new one is returned instead
    assert reverted.revert is not None and reverted.revert.message_id == u2.id
    stored = await store.require_session(s.id)
    assert stored.revert == reverted.revert
    assert [m.info.id for m in await load_window(store, stored)][-1] == a.id
    back = await revert.unrevert(store, stored)
    assert stored.revert is not None and back.revert is None
    window = await load_window(store, await store.require_session(s.id))
    assert window[-1].info.id == u2.id


async def test_revert_refuses_a_message_of_another_session(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(finish=None)
    other, a = await h.first_turn(finish=None)
    with pytest.raises(SidecarError):
        await revert.revert(store, await store.require_session(s.id), a.id, None)
    assert (await store.require_session(s.id)).revert is None
    assert other.id != s.id


async def test_cleanup_deletes_what_the_revert_hides(store: Store) -> None:
    h = Harness(store)
    s, _a = await h.first_turn(finish=None)
    u2 = await h.user(s.id, "again")
    reverted = await revert.revert(store, await store.require_session(s.id), u2.id, None)
    cleaned = await revert.cleanup(store, h.host, reverted)
    assert cleaned.revert is None
    assert u2.id not in [m.info.id for m in await store.window(s.id)]
    assert [p.message_id for p in h.host.methods("message/removed")] == [u2.id]
