"""Random write sequences through the write door: the window ``session/context`` serves
(through the window cache, and assembled from deltas with ``since``) is always the one a
fresh store, with an empty cache, builds from what is stored."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.engine import context as context_mod
from sidecar.engine.compactor import Request
from sidecar.errors import SidecarError
from sidecar.model.messages import AssistantMessage, MessageTime, UserMessage
from sidecar.model.parts import TextPart, ToolCompleted, ToolPart, ToolTime
from sidecar.model.rpc import ContextFormat
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import Tokens
from sidecar.store import Store, part_key

from .service.harness import MODEL, Harness

enc = msgspec.json.encode
FORMATS: list[ContextFormat] = ["parts", "openai", "anthropic"]

op = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 400)),
    st.tuples(st.just("assistant"), st.integers(1, 3_000), st.booleans()),
    st.tuples(st.just("edit"), st.integers(0, 50), st.integers(1, 400)),
    st.tuples(st.just("pin"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("remove_part"), st.integers(0, 50)),
    st.tuples(st.just("remove_message"), st.integers(0, 50)),
    st.tuples(st.just("revert"), st.integers(0, 50)),
    st.tuples(st.just("unrevert")),
    st.tuples(st.just("prune")),
    st.tuples(st.just("compact")),
    st.tuples(st.just("read"), st.sampled_from(FORMATS), st.booleans()),
)


async def _committed(queue: Any, *args: Any) -> Any:
    """A queued write (``Engine.put_message``/``put_part``), awaited until it is answered."""
    answered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def then(result: Any, exc: BaseException | None) -> None:
        if exc is not None:
            answered.set_exception(exc)
        else:
            answered.set_result(result)

    queue(*args, then)
    return await answered


class Session_:
    """One session written through the door, and what its reads were served."""

    def __init__(self, h: Harness, sid: str) -> None:
        self.h = h
        self.sid = sid
        self.ids = itertools.count()
        self.messages: list[str] = []
        self.parts: list[tuple[str, str, Any]] = []  # (message id, part id, the part)
        self.served: dict[str, tuple[str, list[Any]]] = {}  # format -> (revision, messages)

    def _id(self, kind: str) -> str:
        return f"{kind}_{self.sid}_{next(self.ids):04d}"

    async def message(self, info: Any) -> None:
        await _committed(self.h.engine.writes.put_message, info, enc(info), self.h.cfg)
        self.messages.append(info.id)

    async def part(self, part: Any) -> None:
        raw = enc(part).decode()
        await _committed(
            self.h.engine.writes.put_part, part_key(part), raw, msgspec.Raw(raw.encode())
        )
        self.parts = [p for p in self.parts if p[1] != part.id] + [(part.message_id, part.id, part)]

    async def apply(self, o: tuple[Any, ...]) -> None:
        kind = o[0]
        engine, sid = self.h.engine, self.sid
        try:
            if kind == "user":
                m = UserMessage(
                    id=self._id("msg"),
                    session_id=sid,
                    time=MessageTime(created=self.h.tick()),
                    model=MODEL,
                )
                await self.message(m)
                await self.part(
                    TextPart(id=self._id("prt"), session_id=sid, message_id=m.id, text="u" * o[1])
                )
            elif kind == "assistant":
                await self.assistant(o[1], o[2])
            elif kind == "edit" and self.parts:
                mid, pid, old = self.parts[o[1] % len(self.parts)]
                if isinstance(old, TextPart):
                    await self.part(msgspec.structs.replace(old, text="e" * o[2]))
            elif kind == "pin" and self.parts:
                mid, pid, _ = self.parts[o[1] % len(self.parts)]
                await engine.pin(sid, mid, pid, o[2])
            elif kind == "remove_part" and self.parts:
                mid, pid, _ = self.parts.pop(o[1] % len(self.parts))
                await engine.writes.remove_part(sid, mid, pid)
            elif kind == "remove_message" and self.messages:
                mid = self.messages.pop(o[1] % len(self.messages))
                self.parts = [p for p in self.parts if p[0] != mid]
                await engine.writes.remove_message(sid, mid)
            elif kind == "revert" and self.messages:
                await engine.revert(sid, self.messages[o[1] % len(self.messages)], None)
            elif kind == "unrevert":
                await engine.unrevert(sid)
            elif kind == "prune":
                await engine.prune(sid, self.h.cfg)
            elif kind == "compact":
                await engine.compact(Request(session_id=sid), self.h.cfg)
            elif kind == "read":
                await self.read(o[1], o[2])
        except SidecarError:
            pass  # refused (nothing to compact, a message a compaction removed): nothing stored

    async def assistant(self, size: int, finish: bool) -> None:
        parent = self.messages[-1] if self.messages else ""
        m = AssistantMessage(
            id=self._id("msg"),
            session_id=self.sid,
            parent_id=parent,
            time=MessageTime(created=self.h.tick()),
            provider_id=MODEL.provider_id,
            model_id=MODEL.model_id,
            finish="stop" if finish else None,
            tokens=Tokens(input=1_000, output=100),
        )
        await self.message(m)
        call = self._id("call")
        await self.part(
            ToolPart(
                id=self._id("prt"),
                session_id=self.sid,
                message_id=m.id,
                call_id=call,
                tool="bash",
                state=ToolCompleted(
                    input={"command": "cat f"}, output="o" * size, time=ToolTime(start=1, end=2)
                ),
            )
        )

    async def read(self, fmt: ContextFormat, with_since: bool) -> list[Any]:
        """What a client holds after ``session/context``: the served window, assembled from
        the delta when it asked ``since`` its last revision of that format."""
        since = self.served[fmt][0] if with_since and fmt in self.served else None
        result = await self.h.engine.context(self.sid, fmt, self.h.cfg, since=since)
        messages = list(result.messages)
        if result.delta:
            assert since is not None and result.start is not None
            messages = self.served[fmt][1][: result.start] + messages
        assert result.revision is not None
        self.served[fmt] = (result.revision, messages)
        return messages


def _plain(messages: list[Any]) -> Any:
    """A window as JSON values (``parts`` messages hold raw JSON)."""
    return msgspec.json.decode(enc(messages))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(op, min_size=1, max_size=14))
async def test_the_served_window_is_always_a_fresh_one(
    store: Store, db: str | Path, ops: list[tuple[Any, ...]]
) -> None:
    h = Harness(store, {"compaction": {"pruneProtect": 1_000, "pruneMinimum": 500}})
    sid = f"ses_{abs(hash(tuple(ops))):x}_{h.tick()}"
    await store.put_session(Session(id=sid, title="", time=SessionTime(created=1, updated=1)))
    s = Session_(h, sid)
    fresh = await Store.open(db)
    try:
        for i, o in enumerate(ops):
            await s.apply(o)
            # After every write, a read since the last one of a format (deltas as they come).
            fmt = o[1] if o[0] == "read" else FORMATS[i % len(FORMATS)]
            if o[0] != "read":
                await s.read(fmt, True)
            session = await fresh.require_session(sid)
            built = await context_mod.build(fresh, session, fmt)
            assert _plain(s.served[fmt][1]) == _plain(list(built.messages)), (i, o)
    finally:
        await fresh.close()
        await h.engine.close()
