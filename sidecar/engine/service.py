"""The engine as a service: the methods the server exposes and the automatic triggers.

After an assistant message is stored with ``finish`` (or with ``ContextOverflowError``), the
session is checked, once, under its own lock, when that turn has ended (``Turn``): an overflow
compacts (when ``compaction.auto``), otherwise a finished turn prunes. Waiting for the turn's
end (and for the writes queued before it to commit) is what makes the summarized span the
same however late a frontend sends the message's parts. Per-session locks make racing
updates of the same message compact at most once (OpenCode #27468), and a streak counter stops
compaction loops when a compacted context still overflows (OpenCode #27924): one more
attempt, then an error event.

The work a write causes is registered *before* the write is submitted (``will_store``), runs
in the order of the writes (each waits for the one before it), and sees the session only up
to the message that caused it: so the same writes give the same stored result however the
frontend's next writes race it, and a ``session/context`` read behind the write waits for it
(read-your-writes) without a frontend having to know ``session/idle``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable
from typing import Any

import msgspec

from sidecar.engine import breakdown as breakdown_mod
from sidecar.engine import context as context_mod
from sidecar.engine import delta, overhead, prune_run, steer
from sidecar.engine import fork as fork_mod
from sidecar.engine import overflow as overflow_mod
from sidecar.engine import revert as revert_mod
from sidecar.engine.compactor import Compactor, Outcome, Prepared, Request, fingerprint
from sidecar.engine.fit import limit_for_window
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort, steering
from sidecar.engine.window import load_window
from sidecar.engine.writes import (
    COMPACTION,
    FORK,
    MESSAGE,
    MESSAGE_REMOVE,
    PART,
    PART_REMOVE,
    PIN,
    PRUNE,
    REVERT,
    UNCOMPACT,
    UNREVERT,
    WriteDoor,
)
from sidecar.errors import (
    Busy,
    ErrorCode,
    InvalidParams,
    SidecarError,
    UnknownMessage,
    UnknownPart,
)
from sidecar.model.catalog import lookup, lookup_with_source
from sidecar.model.config import Config, SummarizerConfig
from sidecar.model.ids import now_ms
from sidecar.model.messages import AssistantMessage, Message
from sidecar.model.rpc import (
    PRUNED_PER_EVENT,
    BreakdownResult,
    CompactionRecord,
    CompactResult,
    ContextFormat,
    ContextResult,
    Event,
    MessageRemovedEvent,
    MessageUpdatedEvent,
    OverflowResult,
    OverheadSource,
    PartRemovedEvent,
    PartUpdatedEvent,
    PrunedEvent,
    PruneResult,
    StatusEvent,
)
from sidecar.model.session import Session, SessionLimits
from sidecar.model.tokens import ModelLimit, Tokens
from sidecar.store import Key, holder
from sidecar.store import steer as steer_data
from sidecar.store.backend import Done
from sidecar.store.store import PartKey
from sidecar.summarizers.base import Summarizer, SummaryError
from sidecar.summarizers.factory import build_summarizer

log = logging.getLogger("sidecar.engine")

CONTEXT_OVERFLOW = "ContextOverflowError"
# A frontend that never says its turn ended (no ``session/idle``, no waiting read, no next
# user message): the turn is taken to have ended this long after its last write.
TURN_QUIET_S = 2.0
MAX_STREAK = 2  # automatic compactions in a row without a turn that fits
# A compaction holds a lease in the database (other daemons may share it); renewed while it
# runs, so only a daemon that died holding one leaves it, for this long at most (on its own
# machine it is taken over at once: ``holder.gone``).
LEASE_MS = 60_000


class Turn:
    """The end of a session's current turn, which the automatic work its finished messages
    caused waits for (OpenCode compacts only after the step's parts are written): the
    session's next user message, ``session/idle`` or a read that waits for the work, or, for
    a frontend that says none of these, ``TURN_QUIET_S`` without a write to the session."""

    def __init__(self, on_end: Callable[[Turn], None]) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._on_end = on_end
        self.ended: asyncio.Future[None] = loop.create_future()
        self.last = loop.time()
        self._timer = loop.call_later(TURN_QUIET_S, self._quiet)

    def touch(self) -> None:
        self.last = self._loop.time()

    def _quiet(self) -> None:
        due = self.last + TURN_QUIET_S - self._loop.time()
        if due > 0:
            self._timer = self._loop.call_later(due, self._quiet)
        else:
            self.end()

    def cancel(self) -> None:
        self._timer.cancel()

    def end(self) -> None:
        self._timer.cancel()
        if not self.ended.done():
            self.ended.set_result(None)
            self._on_end(self)


class _Preparing:
    """One session's background summary: the task writing it, under which settings."""

    def __init__(self, task: asyncio.Task[Prepared | None], settings: bytes) -> None:
        self.task = task
        self.settings = settings


def _settings(cfg: Config) -> bytes:
    """What a prepared summary was written under (writer, compaction settings): any change
    makes it stale. ``prepare`` itself is left out: raising it changes no summary."""
    ccfg = msgspec.structs.replace(cfg.compaction, prepare=None)
    return msgspec.json.encode([cfg.summarizer, ccfg, cfg.models])


class Engine:
    def __init__(self, store: StorePort, host: Host, config: Callable[[], Config]) -> None:
        self.store = store
        self.host = host
        self.config = config
        self.compactor = Compactor(store, host)
        # The windows ``session/context`` served, for ``since``.
        self.revisions = delta.Revisions()
        # Every write, and what follows it (cache, revisions, prepared summary, turn clock,
        # history index, notifications).
        self.writes = WriteDoor(store, host, self.revisions, self.touched, self.invalidate_prepared)
        # Their estimates and the frontend overhead learned from the steps they served.
        self.overheads = overhead.Overheads()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._by_session: dict[str, set[asyncio.Task[Any]]] = {}
        self._compacting: set[str] = set()
        self._warned: set[str] = set()
        self._streak: dict[str, int] = {}
        self._writers: dict[bytes, Summarizer] = {}
        self._http: Any = None
        self._owner = holder.new_owner()
        # The newest automatic-work task per session: the next one waits for it (write order).
        self._last: dict[str, asyncio.Task[Any]] = {}
        # Per session, the last compaction made here: (its cut, its marker). A new message
        # sorting between the two was written behind the boundary and is invisible.
        self._cuts: dict[str, tuple[Key, Key]] = {}
        self._failed: dict[str, str] = {}  # the last automatic compaction's error, per session
        # The newest time a compaction of ours stamped, per session (``next_time``).
        self._made_until: dict[str, int] = {}
        # Per session, the turn whose end its pending automatic work waits for.
        self._turns: dict[str, Turn] = {}
        # compaction.prepare: per session, the summary being written (or written) ahead of its
        # overflow. In memory only; no read or write waits on it (not in ``_by_session``).
        self._prepared: dict[str, _Preparing] = {}
        self.summary_tokens = 0  # output tokens of every summary written here
        self.prepared_discarded_tokens = 0  # of those, prepared summaries never committed
        self.prepared_failed = 0  # preparations whose writer failed: dropped, never written offline

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
                raise SidecarError(
                    f"summarizer configuration: {exc}", ErrorCode.INVALID_PARAMS
                ) from None
            self._writers[key] = found
        return found

    def use_writer(self, summarizer: SummarizerConfig, writer: Summarizer) -> None:
        """Serve compactions under ``summarizer`` with ``writer`` (an embedder's own writer,
        or a test's), instead of building one from the config."""
        self._writers[msgspec.json.encode(summarizer)] = writer

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
        self._last[session_id] = task

        def forget(t: asyncio.Task[Any]) -> None:
            if self._last.get(session_id) is t:
                del self._last[session_id]

        task.add_done_callback(forget)

    def end_turn(self, session_id: str) -> None:
        """The session's turn ended: its pending automatic work may start."""
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.end()

    def touched(self, session_id: str) -> None:
        """A write to the session: its turn (if work waits for its end) is not quiet yet."""
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.touch()

    def _turn(self, session_id: str) -> Turn:
        turn = self._turns.get(session_id)
        if turn is None:

            def ended(t: Turn) -> None:
                if self._turns.get(session_id) is t:
                    del self._turns[session_id]

            turn = self._turns[session_id] = Turn(ended)
        return turn

    async def idle(self, session_id: str) -> None:
        """End the session's turn, then wait until its automatic work (checks, prune,
        compaction) has finished.

        Free when nothing is pending: no task, an unheld lock, no suspension."""
        self.end_turn(session_id)
        while tasks := self._by_session.get(session_id):
            await asyncio.gather(*list(tasks), return_exceptions=True)
            self.end_turn(session_id)  # work registered meanwhile: its turn ends here too
        lock = self._locks.get(session_id)
        if lock is not None and lock.locked():
            async with lock:
                return None
        return None

    async def settle(self) -> None:
        """End every open turn (as each session's ``session/idle`` would), then wait until all
        automatic work has finished, including any that work started in turn (a prune after a
        compaction)."""
        for sid in list(self._turns):
            self.end_turn(sid)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        for turn in list(self._turns.values()):
            turn.cancel()
        for sid in list(self._prepared):
            self.invalidate_prepared(sid)
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

    async def context(
        self,
        session_id: str,
        fmt: ContextFormat,
        cfg: Config | None = None,
        *,
        wait: bool = True,
        fit: bool = True,
        overhead_tokens: int | None = None,
        since: str | None = None,
    ) -> ContextResult:
        """``session/context``: the window, with its revision; ``wait``: after earlier writes'
        automatic work; ``fit``: see ``_fit``; ``overhead_tokens``: the frontend's overhead
        (None: the learned one); ``since``: a revision served before (then only what changed
        after it, when it can: ``delta``)."""
        if wait:
            await self.idle(session_id)
        session = await self.store.require_session(session_id)
        extra, source = self.overhead_of(session, overhead_tokens)
        result = await self._context(session, fmt, cfg or self.config(), fit, extra)
        result.overhead_tokens, result.overhead_source = extra, source
        self.overheads.served(session_id, result.estimated_tokens)
        return self.revisions.serve(session_id, result, since)

    def overhead_of(self, session: Session, given: int | None) -> tuple[int, OverheadSource]:
        """The frontend overhead a read counts: ``given``, else the one learned here, else the
        one stored with the session's limits (learned before a restart), else none."""
        if given is not None:
            return given, "given"
        learned = self.overheads.learned(session.id)
        if learned is None and session.limits is not None:
            learned = session.limits.overhead
        return (0, "none") if learned is None else (learned, "learned")

    async def _context(
        self, session: Session, fmt: ContextFormat, cfg: Config, fit: bool, extra: int
    ) -> ContextResult:
        stub = cfg.compaction.pruned_stub
        result, window, _ = await context_mod.build_with_window(self.store, session, fmt, stub)
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
        self,
        session_id: str,
        cfg: Config | None = None,
        *,
        wait: bool = True,
        overhead: int | None = None,
    ) -> BreakdownResult:
        """``session/breakdown``: the window ``context`` would serve next, split by category."""
        if wait:
            await self.idle(session_id)
        session = await self.store.require_session(session_id)
        extra, source = self.overhead_of(session, overhead)
        window = await load_window(self.store, session)
        cfg = steer.for_window(cfg or self.config(), window)
        pinned = await steer_data.pinned_ids(steering(self.store), session_id)
        return breakdown_mod.result(
            session_id,
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
        async with self.lock(sid):
            session = await self.store.require_session(sid)
            built = await context_mod.build_with_window(self.store, session, fmt, stub)
            result, window, _ = built
            if result.estimated_tokens > room and cfg.compaction.prune:
                if (await self._prune(sid, cfg)).part_ids:  # else nothing of ours changed
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
                if last is not None and not self.is_compacting(sid):
                    with contextlib.suppress(Busy):  # another daemon compacts it: cut instead
                        # Mid-turn, the model waits for the results it asked for: keep them.
                        await self._auto_compact(
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
        o = overflow_mod.check(tokens, limit, (cfg or self.config()).compaction)
        return OverflowResult(overflow=o.overflow, count=o.count, usable=o.usable)

    async def overflow_session(
        self, session_id: str, cfg: Config | None = None, *, wait: bool = True
    ) -> OverflowResult:
        if wait:
            await self.idle(session_id)
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
        cfg = steer.for_window(cfg or self.config(), window)
        if last is None:
            # No call reported tokens in this window yet (a new session, or right after a
            # compaction): nothing counted, against the usable input of the window's model.
            limit = limit_for_window(window, cfg.models)
            if limit is None or limit.context == 0:
                return OverflowResult(overflow=False, count=0, usable=0, known=False)
            return OverflowResult(
                overflow=False, count=0, usable=overflow_mod.usable(limit, cfg.compaction)
            )
        limit = self.limits(last.provider_id, last.model_id, cfg)
        if limit is None:
            count = last.tokens.input + last.tokens.cache.read + last.tokens.output
            return OverflowResult(overflow=False, count=count, usable=0, known=False)
        return await self.overflow_of(last.tokens, limit, cfg)

    async def prune(self, session_id: str, cfg: Config | None = None) -> PruneResult:
        """A requested prune: after the session's running automatic work, under its lock."""
        async with self.lock(session_id):
            session = await self.store.require_session(session_id)
            cfg = steer.for_window(cfg or self.config(), await load_window(self.store, session))
            return await self._prune(session_id, cfg)

    # -- writes: each through the write door ---------------------------------------------------

    def put_message(
        self,
        info: Message,
        raw: bytes,
        cfg: Config | None,
        then: Done[Any],
        subscribe: Callable[[str], None] | None = None,
    ) -> None:
        """``message/update``: queue the row; once committed the work it causes may run (see
        ``will_store``, registered before the write is queued so a read behind it waits), the
        writer is subscribed, what follows a write is applied and ``then`` gets the stored
        JSON."""
        stored = msgspec.Raw(raw)
        work = self.will_store(info, cfg)
        self.writes.queue(
            MESSAGE,
            info.session_id,
            functools.partial(self.store.put_message_then, info, raw),
            (MessageUpdatedEvent(message=stored),),
            then,
            stored,
            committed=work,
            subscribe=subscribe,
        )

    def put_part(
        self,
        part: PartKey,
        raw: str,
        stored: Any,
        then: Done[Any],
        subscribe: Callable[[str], None] | None = None,
    ) -> None:
        """``part/update``'s hot path: queue the row (``raw``); once committed, ``stored``
        (the client's bytes, whatever encodes as them) is echoed in ``part/updated`` and the
        reply."""
        self.writes.queue(
            PART,
            part.session_id,
            functools.partial(self.store.put_part_then, part, raw),
            (PartUpdatedEvent(part=stored),),
            then,
            stored,
            subscribe=subscribe,
        )

    async def remove_message(self, session_id: str, message_id: str) -> None:
        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            if not await self.store.remove_message(session_id, message_id):
                raise UnknownMessage(message_id)
            return None, [MessageRemovedEvent(session_id=session_id, message_id=message_id)]

        await self.writes.write(MESSAGE_REMOVE, session_id, op)

    async def remove_part(self, session_id: str, message_id: str, part_id: str) -> None:
        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            if not await self.store.remove_part(session_id, message_id, part_id):
                raise UnknownPart(part_id)
            event = PartRemovedEvent(session_id=session_id, message_id=message_id, part_id=part_id)
            return None, [event]

        await self.writes.write(PART_REMOVE, session_id, op)

    async def pin(
        self, session_id: str, message_id: str, part_id: str | None, pinned: bool
    ) -> None:
        """``part/pin``. The kept block of a summary prepared in the background holds the pins
        as they were: the door drops it (``PIN``)."""

        async def op() -> tuple[None, list[Event]]:
            await self.store.require_session(session_id)
            store = steering(self.store)
            await steer_data.set_pin(store, session_id, message_id, part_id, pinned)
            return None, []

        await self.writes.write(PIN, session_id, op)

    async def fork(self, session_id: str, message_id: str | None) -> Session:
        async def op() -> tuple[Session, list[Event]]:
            source = await self.store.require_session(session_id)
            return await fork_mod.fork(self.store, source, message_id), []

        return await self.writes.write(FORK, session_id, op)

    async def revert(self, session_id: str, message_id: str, part_id: str | None) -> Session:
        """Hide messages from ``message_id`` on; refused while the session compacts."""
        if self.is_compacting(session_id):
            raise Busy(f"session {session_id!r} is compacting")

        async def op() -> tuple[Session, list[Event]]:
            session = await self.store.require_session(session_id)
            return await revert_mod.revert(self.store, session, message_id, part_id), []

        return await self.writes.write(REVERT, session_id, op)

    async def unrevert(self, session_id: str) -> Session:
        async def op() -> tuple[Session, list[Event]]:
            session = await self.store.require_session(session_id)
            return await revert_mod.unrevert(self.store, session), []

        return await self.writes.write(UNREVERT, session_id, op)

    async def _prune(
        self,
        session_id: str,
        cfg: Config | None = None,
        *,
        cutoff: Key | None = None,
        ts: int | None = None,
    ) -> PruneResult:
        """Prune (the caller holds the session's lock); ``cutoff``: the walk sees the session
        only up to that message, and marks with ``ts`` (automatic work: deterministic whatever
        the frontend writes next)."""
        session = await self.store.require_session(session_id)
        ts = ts if ts is not None else now_ms()
        plan, _updated = await prune_run.run(
            self.store, session, (cfg or self.config()).compaction, cutoff=cutoff, ts=ts
        )
        if not plan.commit:
            return PruneResult(part_ids=[], tokens_saved=0)
        # No ``part/updated`` per pruned part: it would carry the very output the prune
        # cleared (126 MB for a long imported session's first prune, in one burst). The
        # ``session/pruned`` events name the parts and their ``time.compacted``, a bounded
        # number of ids each.
        events = [
            PrunedEvent(
                session_id=session_id,
                part_ids=plan.part_ids[start : start + PRUNED_PER_EVENT],
                tokens_saved=sum(plan.saved[start : start + PRUNED_PER_EVENT]),
                compacted=ts,
            )
            for start in range(0, len(plan.part_ids), PRUNED_PER_EVENT)
        ]
        self.writes.after(PRUNE, session_id, events)
        return PruneResult(part_ids=plan.part_ids, tokens_saved=plan.tokens_saved)

    def is_compacting(self, session_id: str) -> bool:
        return session_id in self._compacting

    async def _run(self, req: Request, cfg: Config, turn: Key | None = None) -> Outcome | None:
        """Compact under the session's lease; with ``turn`` (automatic work), not at all when a
        compaction (another daemon's) already cut history past that turn."""
        sid = req.session_id
        if req.started is None:
            req = dataclasses.replace(req, started=asyncio.get_running_loop().time())
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
            used = await self._commit_prepared(req, cfg)
            if used is not None:
                self.writes.after(COMPACTION, sid)
                return used
            outcome = await self.compactor.run(req, cfg, self.writer(cfg))
            if outcome.result.error is None:
                self.summary_tokens += await self._summary_output(sid, outcome)
            self.writes.after(COMPACTION, sid)  # its events went out as it ran
            return outcome
        finally:
            renew.cancel()
            self._compacting.discard(sid)
            await self.store.release_lease(lease, self._owner)

    async def _summary_output(self, sid: str, outcome: Outcome) -> int:
        mid = outcome.result.summary_message_id
        if mid is None:
            return 0
        found = await self.store.get_message(mid)
        if found is None or not isinstance(found[0], AssistantMessage):
            return 0
        return found[0].tokens.output

    # -- compaction.prepare --------------------------------------------------------------------

    async def prepared(self, session_id: str) -> Prepared | None:
        """The session's prepared summary, once written (None: none, or it failed). For tests
        and ``inspect``-style tools: nothing in the daemon waits on it except a compaction."""
        entry = self._prepared.get(session_id)
        if entry is None:
            return None
        with contextlib.suppress(Exception, asyncio.CancelledError):
            return await asyncio.shield(entry.task)
        return None

    def invalidate_prepared(self, session_id: str) -> None:
        """Forget the session's prepared summary (cancelling it if still being written) and
        count what it cost. What anything that changes the session's history up to the
        prepared cut without a message write calls (revert, and e.g. uncompact, pins)."""
        entry = self._prepared.pop(session_id, None)
        if entry is None:
            return
        if not entry.task.done():
            entry.task.cancel()
            return
        self._count_discarded(entry)

    def _count_discarded(self, entry: _Preparing) -> None:
        if entry.task.cancelled() or entry.task.exception() is not None:
            return
        result = entry.task.result()
        if result is not None:
            self.prepared_discarded_tokens += result.tokens

    async def _stale(self, sid: str, entry: _Preparing) -> bool:
        """A written prepared summary whose covered history changed since (checked at a turn
        end, so the next preparation starts at once rather than at the overflow)."""
        if not entry.task.done() or entry.task.cancelled() or entry.task.exception():
            return False
        prepared = entry.task.result()
        if prepared is None:
            return False
        session = await self.store.get_session(sid)
        if session is None or session.revert is not None:
            return True
        window = await load_window(self.store, session)
        if not any(Key(m.info.time.created, m.info.id) == prepared.cut for m in window):
            return True
        return fingerprint(window, prepared.cut) != prepared.fingerprint

    def _maybe_prepare(self, info: AssistantMessage, cfg: Config, count: int, usable: int) -> None:
        """A turn ended at ``count`` tokens: start preparing the session's summary when that
        reaches ``prepare x usable`` and no valid one exists (checked again at commit)."""
        share = cfg.compaction.prepare
        if share is None or not cfg.compaction.auto or usable <= 0 or count < share * usable:
            return
        sid = info.session_id
        settings = _settings(cfg)
        entry = self._prepared.get(sid)
        if entry is not None:
            if entry.settings == settings and not entry.task.done():
                return  # being written: the overflow waits for this one
            written = (
                entry.task.done()
                and not entry.task.cancelled()
                and entry.task.exception() is None
                and entry.task.result() is not None
            )
            if entry.settings == settings and written:
                return  # written; its validity is checked when it would be committed
            self.invalidate_prepared(sid)
        req = Request(
            session_id=sid,
            auto=True,
            overflow=True,
            cutoff=Key(info.time.created, info.id),
            keep_open_turn=cfg.compaction.keep_open_turn,
        )
        task = asyncio.get_running_loop().create_task(self._prepare(req, cfg))
        self._prepared[sid] = _Preparing(task, settings)

        def done(t: asyncio.Task[Prepared | None]) -> None:
            current = self._prepared.get(sid)
            if t.cancelled():
                if current is not None and current.task is t:
                    del self._prepared[sid]
                return
            if t.exception() is not None or t.result() is None:
                if current is not None and current.task is t:
                    del self._prepared[sid]  # failed: the next overflow compacts as usual

        task.add_done_callback(done)

    async def _prepare(self, req: Request, cfg: Config) -> Prepared | None:
        """Prepare the session's summary; a failure drops it (counted): the overflow then
        compacts as usual."""
        try:
            prepared = await self.compactor.prepare(req, cfg, self.writer(cfg))
        except asyncio.CancelledError:
            raise
        except SummaryError:  # the writer's failure, already logged to the clients
            self.prepared_failed += 1
            return None
        except Exception:
            log.exception("preparing a summary failed for %s", req.session_id)
            self.prepared_failed += 1
            return None
        if prepared is not None:
            self.summary_tokens += prepared.tokens
        return prepared

    async def _commit_prepared(self, req: Request, cfg: Config) -> Outcome | None:
        """Under the compaction lease: commit the session's prepared summary when it is valid
        (waiting for it when still being written, never starting a second); else discard it
        (counted) and let the compaction run as usual. Every compaction ends the prepared one."""
        sid = req.session_id
        entry = self._prepared.pop(sid, None)
        if entry is None:
            return None
        usable_now = cfg.compaction.prepare is not None and entry.settings == _settings(cfg)
        if not usable_now or req.instructions or req.model is not None:
            self._prepared[sid] = entry
            self.invalidate_prepared(sid)  # another writer or prompt: not this summary
            return None
        try:
            prepared = await asyncio.shield(entry.task)
        except asyncio.CancelledError:
            if not entry.task.done():
                entry.task.cancel()
            raise
        except Exception:
            return None
        if prepared is None:
            return None
        if prepared.session_id != sid:
            return None
        prompt = await self.compactor._prompt(req, cfg)
        outcome = None
        if prompt == prepared.prompt:
            budget = req.usable
            if budget <= 0:
                budget = await self._budget(sid, cfg)
            outcome = await self.compactor.commit_prepared(req, cfg, prepared, budget)
        if outcome is None:
            self.prepared_discarded_tokens += prepared.tokens
        return outcome

    async def _budget(self, sid: str, cfg: Config) -> int:
        """The threshold a compaction's result must fit (0: unknown model)."""
        session = await self.store.require_session(sid)
        window = await load_window(self.store, session)
        limit = limit_for_window(window, cfg.models)
        return 0 if limit is None else self._threshold(limit, cfg)

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
            session = await self.store.require_session(req.session_id)
            window = await load_window(self.store, session)
            outcome = await self._run(req, steer.for_window(cfg or self.config(), window))
            assert outcome is not None  # only automatic work is ever skipped
            await self._record(req.session_id, outcome)
            return outcome.result

    # -- automatic triggers --------------------------------------------------------------------

    def message_stored(self, info: Message, cfg: Config | None = None) -> None:
        """``info`` was stored: run the automatic work it causes (see ``will_store``)."""
        committed = self.will_store(info, cfg)
        if committed is not None:
            committed(None, None)

    def will_store(self, info: Message, cfg: Config | None = None) -> Done[Any] | None:
        """Called just before ``info`` is submitted for storage, with the config of the
        connection that writes it (another client's settings never apply). Registers the
        automatic work it causes at once, so a read dispatched behind the write waits for it;
        returns the write's completion (``Done``: the work runs only if it committed, with no
        error), or None when no work follows."""
        self._behind_boundary(info)
        if not isinstance(info, AssistantMessage):
            self.end_turn(info.session_id)  # the session's next user message
            return None
        self.touched(info.session_id)
        if info.summary:
            return None
        overflowed = info.error is not None and info.error.name == CONTEXT_OVERFLOW
        if info.finish is None and not overflowed:
            return None
        committed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        prev = self._last.get(info.session_id)
        turn = self._turn(info.session_id).ended
        work = self._after_turn(info, overflowed, cfg or self.config(), committed, prev, turn)
        self._spawn(info.session_id, work)

        def done(_result: Any, exc: BaseException | None) -> None:
            if exc is None:  # a finished step: its usage against the window served for it
                self.overheads.finished(info.session_id, info.id, info.tokens)
            if not committed.done():
                committed.set_result(exc is None)

        return done

    def _behind_boundary(self, info: Message) -> None:
        """Report a new message that sorts behind the compaction boundary made here."""
        cut = self._cuts.get(info.session_id)
        if cut is None:
            return
        key = Key(info.time.created, info.id)
        if cut[0] < key < cut[1]:
            self.host.log(
                f"message {info.id} of session {info.session_id} sorts before the compaction "
                f"marker {cut[1].id} (time.created {info.time.created} < {cut[1].created}): it "
                "is behind the compaction boundary and will not appear in the context window; "
                "write it with a later time.created"
            )

    async def _after_turn(
        self,
        info: AssistantMessage,
        overflowed: bool,
        cfg: Config,
        committed: asyncio.Future[bool],
        prev: asyncio.Task[Any] | None,
        turn: asyncio.Future[None],
    ) -> None:
        """The work ``info`` causes, decided on the session as it is once the turn has ended
        and every write queued before that end has committed: the same requests always
        summarize (or prune) the same span, whenever the frontend's parts arrived."""
        sid = info.session_id
        try:
            if not await committed:
                return
            await turn
            await self.store.barrier()
            if prev is not None:
                await asyncio.gather(prev, return_exceptions=True)
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
        # The settings of this turn: ``compaction.overrides`` matching its model and agent.
        cfg = cfg.for_turn(*steer.turn_of_assistant(info))
        ccfg = cfg.compaction
        cutoff = Key(info.time.created, info.id)
        if not overflowed:
            limit = self.limits(info.provider_id, info.model_id, cfg)
            if limit is not None:
                overflowed = overflow_mod.check(info.tokens, limit, ccfg).overflow
            else:  # triggerTokens holds whatever the model's window, known or not
                count = info.tokens.input + info.tokens.cache.read + info.tokens.output
                overflowed = ccfg.auto and overflow_mod.reaches_trigger_tokens(count, ccfg)
        await self._remember_limits(session, info, cfg)
        if overflowed:
            if not ccfg.auto:
                if info.error is not None:
                    self._error(sid, "context overflow and automatic compaction is disabled")
                return
            streak = self._streak.get(sid, 0)
            if streak >= MAX_STREAK:
                failed = self._failed.get(sid)
                if failed is not None:
                    why = f"the last compaction failed ({failed}); check the summarizer"
                else:
                    why = "the compacted context is still too big (check model limits)"
                self._error(
                    sid,
                    f"context still overflows after {streak} compaction attempts in a row; "
                    f"not compacting again until a turn fits: {why}",
                )
                return
            reported = info.tokens.input + info.tokens.cache.read + info.tokens.output
            try:
                done = await self._auto_compact(
                    sid,
                    cfg,
                    limit_for=info,
                    cutoff=cutoff,
                    reported=reported,
                    keep_open_turn=ccfg.keep_open_turn,
                )
            except Busy:
                return  # another daemon is compacting this session now
            if done is not None:
                self._streak[sid] = streak + 1  # failed attempts count too: no retry storms
            return
        self._streak.pop(sid, None)
        if info.finish not in (None, "tool-calls", "unknown"):
            await self._prune(sid, cfg, cutoff=cutoff, ts=info.time.completed or info.time.created)
        if ccfg.prepare is not None:
            limit = self.limits(info.provider_id, info.model_id, cfg)
            entry = self._prepared.get(sid)
            if entry is not None and await self._stale(sid, entry):
                self.invalidate_prepared(sid)
            if limit is not None:
                o = overflow_mod.check(info.tokens, limit, ccfg)
                self._maybe_prepare(info, cfg, o.count, o.usable)

    async def _remember_limits(self, session: Session, info: AssistantMessage, cfg: Config) -> None:
        """Store the limits this turn's decision used with the session (when they changed),
        so ``inspect``/``report`` show the window the session ran under."""
        limit, source = lookup_with_source(info.provider_id, info.model_id, cfg.models)
        if limit is None or not info.model_id:
            return
        learned, how = self.overhead_of(session, None)
        seen = SessionLimits(
            model=f"{info.provider_id}/{info.model_id}",
            source=source,
            context=limit.context,
            output=limit.output,
            input=limit.input,
            usable=overflow_mod.usable(limit, cfg.compaction),
            overhead=learned if how == "learned" else None,
        )
        if session.limits != seen:
            await self.store.put_session(msgspec.structs.replace(session, limits=seen))

    async def _auto_compact(
        self,
        sid: str,
        cfg: Config,
        limit_for: AssistantMessage,
        cutoff: Key | None = None,
        reported: int = 0,
        keep_open_turn: bool = False,
        extra: int = 0,
    ) -> Outcome | None:
        """``cutoff`` (automatic work): the turn that overflowed; the compaction sees the session
        up to it, and is skipped when a compaction (another daemon's) already cut past it.
        ``keep_open_turn``, ``extra`` (the frontend's overhead): see ``Request``."""
        limit = lookup(limit_for.provider_id, limit_for.model_id, cfg.models)
        usable = self._threshold(limit, cfg) if limit is not None else 0
        outcome = await self._run(
            Request(
                session_id=sid,
                auto=True,
                overflow=True,
                cutoff=cutoff,
                reported_tokens=reported,
                usable=usable,
                keep_open_turn=keep_open_turn,
                overhead=extra,
            ),
            cfg,
            cutoff,
        )
        if outcome is None:
            return None
        await self._record(sid, outcome)
        if outcome.result.status != "continue" or limit is None:
            return outcome
        threshold = self._threshold(limit, cfg)
        if outcome.after_tokens <= threshold:
            return outcome
        # One further attempt, then an error: never an endless loop.
        second = await self._run(
            Request(
                session_id=sid,
                auto=True,
                overflow=True,
                cutoff=outcome.end,
                usable=usable,
                keep_open_turn=keep_open_turn,
                overhead=extra,
            ),
            cfg,
        )
        if second is None:
            return outcome
        await self._record(sid, second)
        if second.result.status == "continue" and second.after_tokens > threshold:
            self._error(
                sid,
                f"context is still {second.after_tokens} tokens after two compactions "
                f"(limit {threshold}); not retrying",
            )
        return second

    async def _record(self, sid: str, outcome: Outcome) -> None:
        """Remember a compaction's outcome; report messages the frontend wrote while it ran
        that ended up behind its boundary (between what it saw and its marker)."""
        if outcome.result.error is not None:
            self._failed[sid] = outcome.result.error
        else:
            self._failed.pop(sid, None)
        if outcome.end is not None:
            self._made_until[sid] = max(self._made_until.get(sid, 0), outcome.end.created)
        cut, marker = outcome.cut, outcome.marker
        if cut is None or marker is None:
            return
        self._cuts[sid] = (cut, marker)
        for m in await self.store.window(sid, cut, marker):
            if Key(m.info.time.created, m.info.id) != cut:
                self._behind_boundary(m.info)

    def next_time(self, session_id: str) -> int:
        """``time.created`` for a message whose writer left it out: now, but never before
        what a compaction of ours stamped (its clock runs from the session's latest message,
        which may be ahead of ours), so the frontend's next message sorts after it."""
        return max(now_ms(), self._made_until.get(session_id, 0) + 1)

    def _error(self, sid: str, text: str) -> None:
        """A ``session/status`` error event: how background problems reach the user."""
        event = StatusEvent(session_id=sid, status="error", error=text)
        self.host.publish(sid, event)

    @staticmethod
    def _threshold(limit: ModelLimit, cfg: Config) -> int:
        threshold = int(
            cfg.compaction.effective_trigger() * overflow_mod.usable(limit, cfg.compaction)
        )
        if cfg.compaction.trigger_tokens is not None:
            threshold = min(threshold, cfg.compaction.trigger_tokens)
        return threshold

    # -- steering: pins, diagnostics, undo ----------------------------------------------------

    async def compactions(self, session_id: str) -> list[CompactionRecord]:
        await self.store.require_session(session_id)
        return [
            _record.decode(d)
            for d in await steer_data.compactions(steering(self.store), session_id)
        ]

    async def uncompact(
        self, session_id: str, message_id: str | None, restore_pruned: bool
    ) -> list[str]:
        """Remove the newest compaction (or ``message_id``'s and every later one): marker,
        summary and continue message, so the window is what it was before it; with
        ``restore_pruned``, the outputs pruned among what it replaced come back too."""
        if self.is_compacting(session_id):
            raise Busy(f"session {session_id!r} is compacting")
        async with self.lock(session_id):
            if self.is_compacting(session_id):
                raise Busy(f"session {session_id!r} is compacting")
            # The compaction lease: no other daemon on this database compacts it meanwhile.
            lease = f"compact:{session_id}"
            if not await self.store.acquire_lease(lease, self._owner, LEASE_MS):
                raise Busy(f"session {session_id!r} is being compacted by another daemon")
            try:
                # A summary prepared in the background covers the window being changed: the
                # door drops it (``UNCOMPACT``).
                async def op() -> tuple[list[str], list[Event]]:
                    return await self._uncompact(session_id, message_id, restore_pruned)

                return await self.writes.write(UNCOMPACT, session_id, op)
            finally:
                await self.store.release_lease(lease, self._owner)

    async def _uncompact(
        self, session_id: str, message_id: str | None, restore_pruned: bool
    ) -> tuple[list[str], list[Event]]:
        records = await self.compactions(session_id)
        if not records:
            raise InvalidParams(f"invalid params: session {session_id!r} has no compaction to undo")
        at = len(records) - 1
        if message_id is not None:
            found = next(
                (
                    i
                    for i, r in enumerate(records)
                    if message_id in (r.message_id, r.marker_id, r.continue_id)
                ),
                None,
            )
            if found is None:
                raise InvalidParams(
                    f"invalid params: `$.messageID` {message_id!r} is not a compaction of "
                    f"session {session_id!r} (see session/compactions)"
                )
            at = found
        undone = records[at:]
        ids = [
            mid
            for r in reversed(undone)
            for mid in (r.continue_id, r.message_id, r.marker_id)
            if mid is not None
        ]
        removed = await steer_data.remove_messages(steering(self.store), session_id, ids)
        events: list[Event] = [
            MessageRemovedEvent(session_id=session_id, message_id=mid) for mid in removed
        ]
        if restore_pruned:
            pruned = [pid for r in undone for pid in r.pruned_part_ids]
            for raw in await steer_data.unmark_compacted(steering(self.store), pruned):
                events.append(PartUpdatedEvent(part=msgspec.Raw(raw)))
        self._cuts.pop(session_id, None)
        self._streak.pop(session_id, None)
        return removed, events


_record = msgspec.json.Decoder(CompactionRecord)
