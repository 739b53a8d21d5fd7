"""The reads of a window: ``session/context`` (fitted to the budget, with its revision),
``session/breakdown`` and ``session/overflow``.

A read waits for the automatic work earlier writes caused, then loads the window once
(``context.build_with_window``); only a window over budget is worked on, under the session's
lock: pruned, compacted (keeping the open turn verbatim) or cut in the rendering, reading the
window again only after something of ours changed it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

from sidecar.engine import breakdown as breakdown_mod
from sidecar.engine import context as context_mod
from sidecar.engine import overflow as overflow_mod
from sidecar.engine import overhead, steer, streamed
from sidecar.engine.auto import Automatic
from sidecar.engine.fit import limit_for_window
from sidecar.engine.ports import StorePort
from sidecar.engine.window import load_window
from sidecar.errors import Busy
from sidecar.model.config import Config
from sidecar.model.messages import AssistantMessage
from sidecar.model.rpc import (
    BreakdownResult,
    ContextFormat,
    ContextResult,
    OverflowResult,
    OverheadSource,
    PruneResult,
)
from sidecar.model.session import Session
from sidecar.model.tokens import ModelLimit, Tokens


class Face(Protocol):
    """What the reads need of the ``Engine`` (its face)."""

    store: StorePort
    config: Callable[[], Config]
    overheads: overhead.Overheads
    auto: Automatic

    def lock(self, session_id: str) -> asyncio.Lock: ...
    def is_compacting(self, session_id: str) -> bool: ...
    async def idle(self, session_id: str) -> None: ...
    def limits(
        self, provider_id: str, model_id: str, cfg: Config | None = None
    ) -> ModelLimit | None: ...
    async def prune_locked(self, session_id: str, cfg: Config | None = None) -> PruneResult: ...


class Reads:
    def __init__(self, face: Face) -> None:
        self.face = face
        self.store = face.store

    def overhead_of(self, session: Session, given: int | None) -> tuple[int, OverheadSource]:
        """The frontend overhead a read counts: ``given``, else the one learned here, else the
        one stored with the session's limits (learned before a restart), else none."""
        if given is not None:
            return given, "given"
        learned = self.face.overheads.learned(session.id)
        if learned is None and session.limits is not None:
            learned = session.limits.overhead
        return (0, "none") if learned is None else (learned, "learned")

    async def window(
        self,
        session: Session,
        fmt: ContextFormat,
        cfg: Config,
        fit: bool,
        extra: int,
        stream: bool = False,
    ) -> ContextResult:
        """``stream``: a window too large to keep may be rendered as it is read
        (``streamed``), its ``messages`` then only for an encoder."""
        stub = cfg.compaction.pruned_stub
        # A session with a window in the cache is served from it (the turn after turn case).
        cold = stream and not self.store.cache.has(session.id)
        got = await streamed.build(self.store, session, fmt, stub) if cold else None
        if got is None:
            result, window, _ = await context_mod.build_with_window(self.store, session, fmt, stub)
        else:
            result, window = got  # ``window``: what ``fit`` reads of it (``streamed.Lite``)
        if not fit:
            return result
        cfg = steer.for_window(cfg, window)
        limit = limit_for_window(window, cfg.models)
        if limit is None:
            return result
        usable = overflow_mod.usable(limit, cfg.compaction)
        if result.estimated_tokens + extra <= usable:
            return result
        return await self._fit(session.id, fmt, usable, cfg, extra)

    async def breakdown(
        self, session: Session, cfg: Config, extra: int, source: OverheadSource
    ) -> BreakdownResult:
        """``session/breakdown``: the window ``context`` would serve next, split by category;
        ``extra``: the frontend overhead counted (``source``: where it came from)."""
        window = await load_window(self.store, session)
        cfg = steer.for_window(cfg, window)
        pinned = await self.store.pinned_ids(session.id)
        return breakdown_mod.result(
            session.id,
            window,
            pinned,
            limit_for_window(window, cfg.models),
            cfg.compaction,
            overhead=extra,
            overhead_source=source,
        )

    async def _fit(
        self, sid: str, fmt: ContextFormat, usable: int, cfg: Config, extra: int = 0
    ) -> ContextResult:
        """Make an over-budget window fit: prune, then compact (the automatic path, same
        events), then truncate single oversized outputs in the rendering only; else say so.
        ``extra``: the frontend's overhead, which the window must leave room for."""
        stub = cfg.compaction.pruned_stub
        room = usable - extra
        async with self.face.lock(sid):
            session = await self.store.require_session(sid)
            built = await context_mod.build_with_window(self.store, session, fmt, stub)
            result, window, _ = built
            if result.estimated_tokens > room and cfg.compaction.prune:
                if (
                    await self.face.prune_locked(sid, cfg)
                ).part_ids:  # else nothing of ours changed
                    built = await context_mod.build_with_window(self.store, session, fmt, stub)
                    result, window, _ = built
            if result.estimated_tokens > room and cfg.compaction.auto:
                last = next(
                    (
                        m.info
                        for m in reversed(window)
                        if isinstance(m.info, AssistantMessage) and not m.info.summary
                    ),
                    None,
                )
                if last is not None and not self.face.is_compacting(sid):
                    with contextlib.suppress(Busy):  # another daemon compacts it: cut instead
                        # Mid-turn, the model waits for the results it asked for: keep them.
                        await self.face.auto.auto_compact(
                            sid, cfg, limit_for=last, keep_open_turn=True, extra=extra
                        )
                    built = await context_mod.build_with_window(self.store, session, fmt, stub)
                    result, window, _ = built
            if result.estimated_tokens > room:
                # The stored JSON of the window just read: no second read for it.
                return context_mod.build_fitted(fmt, window, built[2], usable, stub, extra)
            return result

    async def overflow_of(
        self, tokens: Tokens, limit: ModelLimit, cfg: Config | None = None
    ) -> OverflowResult:
        o = overflow_mod.check(tokens, limit, (cfg or self.face.config()).compaction)
        return OverflowResult(overflow=o.overflow, count=o.count, usable=o.usable)

    async def overflow_session(
        self, session_id: str, cfg: Config | None = None, *, wait: bool = True
    ) -> OverflowResult:
        if wait:
            await self.face.idle(session_id)
        session = await self.store.require_session(session_id)
        window = await load_window(self.store, session)
        last = next(
            (
                m.info
                for m in reversed(window)
                if isinstance(m.info, AssistantMessage) and m.info.finish and not m.info.summary
            ),
            None,
        )
        cfg = steer.for_window(cfg or self.face.config(), window)
        if last is None:
            # No call reported tokens in this window yet (a new session, or right after a
            # compaction): nothing counted, against the usable input of the window's model.
            limit = limit_for_window(window, cfg.models)
            if limit is None or limit.context == 0:
                return OverflowResult(overflow=False, count=0, usable=0, known=False)
            return OverflowResult(
                overflow=False, count=0, usable=overflow_mod.usable(limit, cfg.compaction)
            )
        limit = self.face.limits(last.provider_id, last.model_id, cfg)
        if limit is None:
            count = last.tokens.input + last.tokens.cache.read + last.tokens.output
            return OverflowResult(overflow=False, count=count, usable=0, known=False)
        return await self.overflow_of(last.tokens, limit, cfg)
