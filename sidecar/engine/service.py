"""The engine as a service: the methods the server exposes and the automatic triggers.

After an assistant message is stored with ``finish`` (or with ``ContextOverflowError``), the
session is checked, once, under its own lock: an overflow compacts (when ``compaction.auto``),
otherwise a finished turn prunes. Per-session locks make racing updates of the same message
compact at most once (OpenCode #27468), and a streak counter stops compaction loops when a
compacted context still overflows (OpenCode #27924): one more attempt, then an error event.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from sidecar.engine import context as context_mod
from sidecar.engine import overflow as overflow_mod
from sidecar.engine import pruner
from sidecar.engine.compactor import Compactor, Outcome, Request
from sidecar.engine.host import Host
from sidecar.engine.window import load_window
from sidecar.errors import Busy, SidecarError
from sidecar.model.catalog import lookup
from sidecar.model.config import Config
from sidecar.model.messages import AssistantMessage, Message
from sidecar.model.rpc import (
    CompactResult,
    ContextFormat,
    ContextResult,
    OverflowResult,
    PartUpdatedEvent,
    PrunedEvent,
    PruneResult,
    StatusEvent,
)
from sidecar.model.tokens import ModelLimit, Tokens
from sidecar.store import Key, Store
from sidecar.summarizers.base import Summarizer, build_summarizer

log = logging.getLogger("sidecar.engine")

CONTEXT_OVERFLOW = "ContextOverflowError"
MAX_STREAK = 2  # automatic compactions in a row without a turn that fits
# A compaction holds a lease in the database (other daemons may share it); renewed while it
# runs, so only a daemon that died holding one leaves it, for this long.
LEASE_MS = 60_000


class Engine:
    def __init__(self, store: Store, host: Host, config: Callable[[], Config]) -> None:
        self.store = store
        self.host = host
        self.config = config
        self.compactor = Compactor(store, host)
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._by_session: dict[str, set[asyncio.Task[Any]]] = {}
        self._compacting: set[str] = set()
        self._warned: set[str] = set()
        self._streak: dict[str, int] = {}
        self._writers: dict[bytes, Summarizer] = {}
        self._http: Any = None
        self._owner = f"{os.getpid()}-{uuid.uuid4().hex[:12]}"

    # -- helpers -------------------------------------------------------------------------------

    def lock(self, session_id: str) -> asyncio.Lock:
        return self._locks.setdefault(session_id, asyncio.Lock())

    def limits(
        self, provider_id: str, model_id: str, cfg: Config | None = None
    ) -> ModelLimit | None:
        limit = lookup(provider_id, model_id, (cfg or self.config()).models)
        if limit is None:
            key = f"{provider_id}/{model_id}"
            if key not in self._warned:
                self._warned.add(key)
                self.host.log(
                    f"no context limits known for model {key!r}: automatic compaction is off for "
                    f'it until config "models" names its limits'
                )
        return limit

    def writer(self, cfg: Config) -> Summarizer:
        key = msgspec.json.encode(cfg.summarizer)
        found = self._writers.get(key)
        if found is None:
            http = None
            if cfg.summarizer.provider in ("openai", "anthropic"):
                if self._http is None:
                    import httpx

                    self._http = httpx.AsyncClient(
                        timeout=httpx.Timeout(cfg.summarizer.timeout, connect=10.0)
                    )
                http = self._http
            try:
                found = build_summarizer(
                    cfg.summarizer, http=http, client_call=self.host.client_complete
                )
            except ValueError as exc:
                raise SidecarError(f"summarizer configuration: {exc}", -32602) from None
            self._writers[key] = found
        return found

    def _spawn(self, session_id: str, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        mine = self._by_session.setdefault(session_id, set())
        mine.add(task)

        def done(t: asyncio.Task[Any]) -> None:
            self._tasks.discard(t)
            mine.discard(t)
            if not mine and self._by_session.get(session_id) is mine:
                del self._by_session[session_id]

        task.add_done_callback(done)

    async def idle(self, session_id: str) -> None:
        """Wait until the session's automatic work (checks, prune, compaction) has finished."""
        while tasks := self._by_session.get(session_id):
            await asyncio.gather(*list(tasks), return_exceptions=True)
        async with self.lock(session_id):
            return None

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except BaseException:
                pass
        for w in self._writers.values():
            await w.aclose()
        if self._http is not None:
            await self._http.aclose()

    # -- requests ------------------------------------------------------------------------------

    async def context(self, session_id: str, fmt: ContextFormat) -> ContextResult:
        session = await self.store.require_session(session_id)
        return await context_mod.build(self.store, session, fmt)

    async def overflow_of(
        self, tokens: Tokens, limit: ModelLimit, cfg: Config | None = None
    ) -> OverflowResult:
        o = overflow_mod.check(tokens, limit, (cfg or self.config()).compaction)
        return OverflowResult(overflow=o.overflow, count=o.count, usable=o.usable)

    async def overflow_session(self, session_id: str, cfg: Config | None = None) -> OverflowResult:
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
        if last is None:
            return OverflowResult(overflow=False, count=0, usable=0)
        limit = self.limits(last.provider_id, last.model_id, cfg)
        if limit is None:
            count = last.tokens.input + last.tokens.cache.read + last.tokens.output
            return OverflowResult(overflow=False, count=count, usable=0, known=False)
        return await self.overflow_of(last.tokens, limit, cfg)

    async def prune(self, session_id: str, cfg: Config | None = None) -> PruneResult:
        session = await self.store.require_session(session_id)
        plan, updated = await pruner.run(self.store, session, (cfg or self.config()).compaction)
        if not plan.commit:
            return PruneResult(part_ids=[], tokens_saved=0)
        for raw in updated:
            self.host.publish(
                session_id, "part/updated", PartUpdatedEvent(part=msgspec.Raw(raw.encode()))
            )
        self.host.publish(
            session_id,
            "session/pruned",
            PrunedEvent(
                session_id=session_id, part_ids=plan.part_ids, tokens_saved=plan.tokens_saved
            ),
        )
        return PruneResult(part_ids=plan.part_ids, tokens_saved=plan.tokens_saved)

    def is_compacting(self, session_id: str) -> bool:
        return session_id in self._compacting

    async def _run(self, req: Request, cfg: Config, turn: Key | None = None) -> Outcome | None:
        """Compact under the session's lease; with ``turn`` (automatic work), not at all when a
        compaction (another daemon's) already cut history past that turn."""
        sid = req.session_id
        lease = f"compact:{sid}"
        if not await self.store.acquire_lease(lease, self._owner, LEASE_MS):
            raise Busy(f"session {sid!r} is being compacted by another daemon")
        self._compacting.add(sid)
        renew = asyncio.ensure_future(self._keep_lease(lease))
        try:
            if turn is not None:
                boundary = await self.store.boundary(sid)
                if boundary is not None and boundary.marker > turn:
                    return None
            return await self.compactor.run(req, cfg, self.writer(cfg))
        finally:
            renew.cancel()
            self._compacting.discard(sid)
            await self.store.release_lease(lease, self._owner)

    async def _keep_lease(self, lease: str) -> None:
        while True:
            await asyncio.sleep(LEASE_MS / 3000)
            await self.store.acquire_lease(lease, self._owner, LEASE_MS)

    async def compact(self, req: Request, cfg: Config | None = None) -> CompactResult:
        """A requested compaction; waits for a running prune, refuses a second compaction."""
        if self.is_compacting(req.session_id):
            raise Busy(f"session {req.session_id!r} is already compacting")
        async with self.lock(req.session_id):
            if self.is_compacting(req.session_id):
                raise Busy(f"session {req.session_id!r} is already compacting")
            await self.store.require_session(req.session_id)
            outcome = await self._run(req, cfg or self.config())
            assert outcome is not None  # only automatic work is ever skipped
            return outcome.result

    # -- automatic triggers --------------------------------------------------------------------

    def message_stored(self, info: Message, cfg: Config | None = None) -> None:
        """Start the automatic checks a stored message calls for, under ``cfg``: the config of
        the connection that wrote it (another client's settings never apply)."""
        if not isinstance(info, AssistantMessage) or info.summary:
            return
        overflowed = info.error is not None and info.error.name == CONTEXT_OVERFLOW
        if info.finish is None and not overflowed:
            return
        self._spawn(info.session_id, self._after_turn(info, overflowed, cfg or self.config()))

    async def _after_turn(self, info: AssistantMessage, overflowed: bool, cfg: Config) -> None:
        sid = info.session_id
        try:
            async with self.lock(sid):
                await self._check(info, overflowed, cfg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a background failure must be visible, never fatal
            log.exception("automatic compaction check failed for %s", sid)
            self._error(sid, str(exc))

    async def _check(self, info: AssistantMessage, overflowed: bool, cfg: Config) -> None:
        sid = info.session_id
        session = await self.store.get_session(sid)
        if session is None:
            return
        boundary = await self.store.boundary(sid)
        if boundary is not None and boundary.marker > Key(info.time.created, info.id):
            return  # this turn was already compacted away
        ccfg = cfg.compaction
        if not overflowed:
            limit = self.limits(info.provider_id, info.model_id, cfg)
            overflowed = limit is not None and overflow_mod.check(info.tokens, limit, ccfg).overflow
        if overflowed:
            if not ccfg.auto:
                if info.error is not None:
                    self._error(sid, "context overflow and automatic compaction is disabled")
                return
            streak = self._streak.get(sid, 0)
            if streak >= MAX_STREAK:
                self._error(
                    sid,
                    f"context still overflows after {streak} compactions in a row; "
                    "not compacting again until a turn fits (check model limits)",
                )
                return
            try:
                done = await self._auto_compact(sid, cfg, limit_for=info)
            except Busy:
                return  # another daemon is compacting this session now
            if done is not None:
                self._streak[sid] = streak + 1  # failed attempts count too: no retry storms
            return
        self._streak.pop(sid, None)
        if info.finish not in (None, "tool-calls", "unknown"):
            await self.prune(sid, cfg)

    async def _auto_compact(
        self, sid: str, cfg: Config, limit_for: AssistantMessage
    ) -> Outcome | None:
        turn = Key(limit_for.time.created, limit_for.id)
        outcome = await self._run(Request(session_id=sid, auto=True, overflow=True), cfg, turn)
        limit = lookup(limit_for.provider_id, limit_for.model_id, cfg.models)
        if outcome is None or outcome.result.status != "continue" or limit is None:
            return outcome
        threshold = self._threshold(limit, cfg)
        if outcome.after_tokens <= threshold:
            return outcome
        # One further attempt, then an error: never an endless loop.
        second = await self._run(Request(session_id=sid, auto=True, overflow=True), cfg)
        if second is None:
            return outcome
        if second.result.status == "continue" and second.after_tokens > threshold:
            self._error(
                sid,
                f"context is still {second.after_tokens} tokens after two compactions "
                f"(limit {threshold}); not retrying",
            )
        return second

    def _error(self, sid: str, text: str) -> None:
        """A ``session/status`` error event: how background problems reach the user."""
        event = StatusEvent(session_id=sid, status="error", error=text)
        self.host.publish(sid, "session/status", event)

    @staticmethod
    def _threshold(limit: ModelLimit, cfg: Config) -> int:
        o = overflow_mod.check(Tokens(), limit, cfg.compaction)
        return int(cfg.compaction.effective_trigger() * o.usable)
