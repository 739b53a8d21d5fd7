"""``session/context`` of a window too large to keep, rendered as it is read.

A window read cold (not in the window cache) with more stored JSON than
``Store.stream_over`` is a session without limits, or one that was never compacted: far
larger than any model's window. Decoded whole, it is its JSON, its Structs and its rendering
in memory at once, several times the reply. Here each message is decoded, measured, rendered
and encoded as its rows arrive, then let go: what stays is the reply's bytes, in runs of
about ``RUN_BYTES`` that the outbox sends without copying them again (``Elements``).

The reply is the one the whole-window path gives, byte for byte
(``tests/engine/test_streamed_window.py``). ``filter_compacted`` looks ahead: a window that
needs it to (a reverted session, a collapse tail read before its marker, a compaction marker
after the window's first message) is left to the whole-window path, which reads it again. So
does the chat formats' duplicate-call rule: a call id met twice costs one more pass, which
finds each id's keeper before the pass that renders.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from typing import Any, TypeVar

import msgspec

from sidecar.engine import render
from sidecar.engine.ports import StorePort
from sidecar.engine.tokens import MESSAGE_OVERHEAD, estimate_part
from sidecar.engine.window import window_start
from sidecar.model.buffers import Elements
from sidecar.model.conversation import compaction_part, is_finished_summary, is_marker, is_summary
from sidecar.model.messages import UserMessage, WithParts
from sidecar.model.parts import CompactionPart, ToolPart
from sidecar.model.rpc import ContextFormat, ContextResult
from sidecar.model.session import Session
from sidecar.store import Streamed

T = TypeVar("T")

#: The reply's bytes are sealed in runs of about this size: few buffers, none copied again.
RUN_BYTES = 1 << 20


class _Whole(Exception):
    """The window needs the whole-window path (a rule that looks ahead)."""


class _Twice(Exception):
    """A call id met twice: which part keeps it depends on what follows (``_keepers``)."""


# A call id -> the id of the part that keeps it (``render._keeper``'s rule, by part id).
Keepers = dict[str, str]


async def build(
    store: StorePort, session: Session, fmt: ContextFormat, stub: render.Stub = "opencode"
) -> tuple[ContextResult, list[WithParts]] | None:
    """The rendered window and what ``fit`` reads of it (``Lite``), when it is streamed;
    None when the whole-window path serves it (cached, small, or needing a look-ahead).

    One pass renders; a call id met twice (OpenCode #40235: the last part with it wins)
    costs a pass that finds the keepers first, then one that renders with them."""
    if session.revert is not None:
        return None
    boundary, start = await window_start(store, session)
    if boundary is not None and start != boundary.marker:
        return None  # a collapse tail goes before its marker: the window is reordered
    marker_id = boundary.marker.id if boundary else None

    async def over(read: Callable[[Streamed], Awaitable[T]]) -> T | None:
        """``read`` of one pass over the window; None: the whole-window path serves it."""
        stream = await store.stream_window(session.id, start)
        if stream is None:
            return None
        try:
            return await read(stream)
        except _Whole:
            return None
        finally:
            await stream.aclose()

    try:
        return await over(lambda s: _render(s, fmt, stub, marker_id, None))
    except _Twice:
        keepers = await over(lambda s: _keepers(s, marker_id))
    if keepers is None:
        return None
    return await over(lambda s: _render(s, fmt, stub, marker_id, keepers))


async def _window(
    stream: Streamed, marker_id: str | None
) -> AsyncGenerator[tuple[WithParts, dict[str, str]], None]:
    """``filter_compacted`` of the stream (``marker_id``: the boundary's marker, which must
    come first), where it needs no look-ahead."""
    first = True
    async for msg, raws in stream.messages():  # (``Streamed.aclose`` ends it)
        if first and marker_id is not None:
            if msg.info.id != marker_id:
                raise _Whole
        elif compaction_part(msg) is not None:
            raise _Whole  # is it answered later? ``filter_compacted`` looks ahead
        elif is_summary(msg) and not is_finished_summary(msg.info):
            first = False
            continue  # ``filter_compacted`` drops it
        first = False
        yield msg, raws


async def _keepers(stream: Streamed, marker_id: str | None) -> Keepers:
    keepers: Keepers = {}
    async with aclosing(_window(stream, marker_id)) as window:
        async for msg, _ in window:
            for p in render.kept_calls(msg, render.sent(msg)):
                keepers[render.call_id(p)] = p.id
    return keepers


async def _render(
    stream: Streamed,
    fmt: ContextFormat,
    stub: render.Stub,
    marker_id: str | None,
    keepers: Keepers | None,
) -> tuple[ContextResult, list[WithParts]]:
    """``context.render_result`` of ``filter_compacted`` of the stream, one message at a time.
    ``keepers``: from a pass before this one (None: a call id met twice is ``_Twice``); the
    window must not have changed since (else ``_Whole``)."""
    out = _Out(fmt, stub)
    lite = Lite()
    met: set[str] = set()  # call ids met (without keepers), or whose keeper was met
    total = 0
    async with aclosing(_window(stream, marker_id)) as window:
        async for msg, raws in window:
            # ``tokens.estimate_messages``'s sum, without its memo: parts read once would push
            # out the windows read every turn (a cost parameter there slowed it 5%).
            total += MESSAGE_OVERHEAD + sum(estimate_part(p) for p in msg.parts)
            total += render.stub_extra((msg,), stub)
            lite.see(msg)
            ok = render.sent(msg)
            out.message(msg, raws, ok, {} if fmt == "parts" else _kept(msg, ok, keepers, met))
    if keepers is not None and len(met) != len(keepers):
        raise _Whole  # a keeper gone since
    result = ContextResult(
        format=fmt, messages=out.sealed(), estimated_tokens=total, boundary_message_id=marker_id
    )
    return result, lite.window()


def _kept(msg: WithParts, ok: bool, keepers: Keepers | None, met: set[str]) -> dict[str, ToolPart]:
    """The calls of ``msg`` (``ok``: sent) the chat formats send (``render._keeper`` of the
    window), by id; ``met`` is added to."""
    keeper: dict[str, ToolPart] = {}
    for p in render.kept_calls(msg, ok):
        cid = render.call_id(p)
        if cid in met:  # after its keeper: the window changed since, or no keepers
            raise _Whole if keepers is not None else _Twice
        if keepers is None or keepers.get(cid) == p.id:
            met.add(cid)
            keeper[cid] = p
        elif cid not in keepers:
            raise _Whole  # a call the keepers' pass did not see
    return keeper


class _Out:
    """The rendered messages, each encoded as soon as no later message can change it."""

    def __init__(self, fmt: ContextFormat, stub: render.Stub) -> None:
        self._fmt = fmt
        self._stub = stub
        self._runs = _Runs()
        self._chat: list[dict[str, Any]] = []  # anthropic: the message a merge may extend

    def message(
        self, msg: WithParts, raws: dict[str, str], ok: bool, keeper: dict[str, ToolPart]
    ) -> None:
        """Render ``msg`` (``ok``: sent; ``keeper``: its calls that are sent)."""
        runs, stub = self._runs, self._stub
        if self._fmt == "parts":
            runs.add(render.parts_entry(msg, raws, stub))
            return
        if self._fmt == "openai":
            for item in render.openai_message(msg, ok, keeper, stub):
                runs.add(item)
            return
        chat = self._chat
        for turn in render.message_turns(msg, ok, keeper, stub):
            render.anthropic_turn(chat, turn, False)
        while len(chat) > 1:
            runs.add(chat.pop(0))

    def sealed(self) -> list[Any]:
        for item in self._chat:
            self._runs.add(item)
        self._chat = []
        return self._runs.sealed()


class _Runs:
    """The array's elements encoded one by one into buffers of about ``RUN_BYTES``."""

    def __init__(self) -> None:
        self._sealed: list[Any] = []
        self._buf = bytearray()
        self._encoder = msgspec.json.Encoder()

    def add(self, value: Any) -> None:
        buf = self._buf
        if buf:
            buf += b","
        self._encoder.encode_into(value, buf, -1)
        if len(buf) >= RUN_BYTES:
            self._seal()

    def _seal(self) -> None:
        if self._buf:
            # A copy of its length: the bytearray grew with room to spare, let go here.
            self._sealed.append(Elements(bytes(self._buf)))
            self._buf = bytearray()

    def sealed(self) -> list[Any]:
        self._seal()
        return self._sealed


class Lite:
    """What ``fit`` reads of a window (``steer.turn_of``, ``fit.limit_for_window``): its
    latest user message that is not a marker and its latest message naming a model, each
    without content."""

    def __init__(self) -> None:
        self._seen = 0
        self._user: tuple[int, WithParts] | None = None
        self._model: tuple[int, WithParts] | None = None

    def see(self, msg: WithParts) -> None:
        info, at = msg.info, self._seen
        self._seen += 1
        if isinstance(info, UserMessage):
            turn, model = not is_marker(msg), info.model is not None
        else:
            turn, model = False, not info.summary and bool(info.model_id)
        if not (turn or model):
            return
        kept = WithParts(info=info, parts=[p for p in msg.parts if isinstance(p, CompactionPart)])
        light = (at, kept)
        if turn:
            self._user = light
        if model:
            self._model = light

    def window(self) -> list[WithParts]:
        kept = dict(m for m in (self._user, self._model) if m is not None)
        return [kept[at] for at in sorted(kept)]
