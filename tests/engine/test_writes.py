"""The write door (``engine/writes.py``): a write kind added through it gets every
consequence of a write, with no handler involved."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from sidecar.engine import writes
from sidecar.engine.prepared import _Preparing
from sidecar.engine.service import Engine
from sidecar.engine.writes import WriteKind
from sidecar.model.rpc import Event, StatusEvent
from sidecar.model.session import Session
from sidecar.store import Store

from .service.harness import Harness


async def _prepared(engine: Engine, sid: str) -> asyncio.Task[Any]:
    """A summary being prepared for the session (compaction.prepare), as the turn end starts
    one: a task the door must cancel when the session's history changes under it."""
    never: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(never)
    engine.preparer._prepared[sid] = _Preparing(task, b"")
    return task


def _watch(door: writes.WriteDoor) -> list[tuple[str, str]]:
    """``(kind, session)`` of each write the door applies what follows to, in order."""
    seen: list[tuple[str, str]] = []
    after = door.after

    def watched(kind: WriteKind, session_id: str, *rest: Any) -> None:
        seen.append((kind.name, session_id))
        after(kind, session_id, *rest)

    door.after = watched  # type: ignore[method-assign,assignment]
    return seen


async def test_a_new_write_kind_gets_every_invalidation(store: Store) -> None:
    h = Harness(store)
    engine = h.engine
    s, _a = await h.first_turn(finish=None)
    sid = s.id
    await engine.context(sid, "parts")  # the window is cached now
    assert store.cache.holds(sid, None)
    followed = _watch(engine.writes)
    turn = engine._turn(sid)  # automatic work waits for this turn's end
    touched_at = turn.last
    task = await _prepared(engine, sid)
    generation = engine.revisions.generation(sid)

    retitle = WriteKind("test.retitle", cache_kept=False, history=True, turn=True)
    event = StatusEvent(session_id=sid, status="idle")

    async def op() -> tuple[Session, list[Event]]:
        await asyncio.sleep(0)  # the turn's clock reads the loop's time: let it move
        session = await store.require_session(sid)
        changed = msgspec.structs.replace(session, title="renamed")
        await store.put_session(changed)
        return changed, [event]

    while asyncio.get_running_loop().time() == touched_at:
        await asyncio.sleep(0)
    result = await engine.writes.write(retitle, sid, op)

    assert result.title == "renamed"
    assert not store.cache.holds(sid, None)  # the window cache dropped
    assert engine.revisions.generation(sid) == generation + 1  # revisions told
    await asyncio.sleep(0)
    assert (
        task.cancelled() and engine.preparer._prepared.get(sid) is None
    )  # prepared summary dropped
    assert turn.last > touched_at  # the turn clock touched
    assert followed == [("test.retitle", sid)]  # what follows a write applied once
    assert (sid, "session/status", event) in h.host.events  # the notification sent
    turn.cancel()


async def test_a_failed_write_has_no_consequence(store: Store) -> None:
    h = Harness(store)
    s, _a = await h.first_turn(finish=None)
    followed = _watch(h.engine.writes)
    generation = h.engine.revisions.generation(s.id)

    async def op() -> tuple[None, list[Event]]:
        raise ValueError("refused")

    try:
        await h.engine.writes.write(writes.PIN, s.id, op)
    except ValueError:
        pass
    assert followed == [] and h.engine.revisions.generation(s.id) == generation
    assert h.host.events == []


async def test_every_engine_write_goes_through_the_door(store: Store) -> None:
    """Each write entry of the engine reaches the door's hook with its kind."""
    h = Harness(store)
    engine = h.engine
    s, a = await h.first_turn(finish=None)
    followed = _watch(engine.writes)
    part = (await store.window(s.id))[-1].parts[-1]
    await engine.pin(s.id, a.id, part.id, True)
    await engine.revert(s.id, a.id, None)
    await engine.unrevert(s.id)
    forked = await engine.writes.fork(s.id, None)
    await engine.writes.remove_part(s.id, a.id, part.id)
    await engine.writes.remove_message(s.id, a.id)
    assert [kind for kind, _sid in followed] == [
        *("pin", "revert", "unrevert", "fork", "part.remove", "message.remove")
    ]
    assert forked.id != s.id
