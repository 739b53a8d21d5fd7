"""The engine's face: what the server (and an embedder) calls, over the engine's units.

``Engine`` holds the per-session locks and the automatic-work tasks, and hands each request to
its unit: the write door (``writes``) for every write, ``reads`` for windows, ``auto`` for what
a finished turn causes (overflow → compaction, else prune; ``turns`` says when a turn ended),
``prepared`` for ``compaction.prepare``, ``steering`` for pins and undo, ``revert``, ``fork``,
``prune_run`` and the ``compactor`` (standard and collapse). Each unit is typed on the narrow
store ``ports.StorePort`` and on the part of this face it needs (a ``Face`` protocol in its
module), so none imports this one.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from sidecar.engine import delta, overhead, prune_run, steer
from sidecar.engine import lease as lease_mod
from sidecar.engine import revert as revert_mod
from sidecar.engine.auto import Automatic
from sidecar.engine.compactor import Compactor, Outcome, Prepared, Request
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort
from sidecar.engine.prepared import Preparer, Tally
from sidecar.engine.reads import Reads
from sidecar.engine.steering import Steering
from sidecar.engine.turns import Turn, Turns
from sidecar.engine.window import load_window
from sidecar.engine.writers import Writers
from sidecar.engine.writes import (
    COMPACTION,
    REVERT,
    UNREVERT,
    WriteDoor,
)
from sidecar.errors import Busy
from sidecar.model.catalog import lookup
from sidecar.model.config import Config, SummarizerConfig
from sidecar.model.ids import now_ms
from sidecar.model.messages import AssistantMessage, Message
from sidecar.model.rpc import (
    BreakdownResult,
    CompactionRecord,
    CompactResult,
    ContextFormat,
    ContextResult,
    Event,
    OverflowResult,
    OverheadSource,
    PruneResult,
)
from sidecar.model.session import Session
from sidecar.model.tokens import ModelLimit, Tokens
from sidecar.store import Done, Key, holder
from sidecar.summarizers.base import Summarizer

log = logging.getLogger("sidecar.engine")


class Engine:
    def __init__(self, store: StorePort, host: Host, config: Callable[[], Config]) -> None:
        self.store = store
        self.host = host
        self.config = config
        self.owner = holder.new_owner()  # of the compaction leases taken here
        self.compactor = Compactor(store, host)
        self.writers = Writers(host)
        self.tally = Tally()
        self.turns = Turns()
        self.preparer = Preparer(store, self.compactor, self.writers.get, self.tally)
        # The windows ``session/context`` served, for ``since``.
        self.revisions = delta.Revisions()
        # Every write, and what follows it (cache, revisions, prepared summary, turn clock,
        # history index, notifications).
        # Their estimates and the frontend overhead learned from the steps they served.
        self.overheads = overhead.Overheads()
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._by_session: dict[str, set[asyncio.Task[Any]]] = {}
        self._compacting: set[str] = set()
        self._warned: set[str] = set()
        # The newest automatic-work task per session: the next one waits for it (write order).
        self._last: dict[str, asyncio.Task[Any]] = {}
        self.auto = Automatic(self)
        self.writes = WriteDoor(
            store,
            host,
            self.revisions,
            self.turns.touch,
            self.preparer.invalidate,
            self.auto.will_store,
        )
        self.reads = Reads(self)
        self.steering = Steering(self)

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
        return self.writers.get(cfg)

    def use_writer(self, summarizer: SummarizerConfig, writer: Summarizer) -> None:
        """Serve compactions under ``summarizer`` with ``writer`` (an embedder's own writer,
        or a test's), instead of building one from the config."""
        self.writers.use(summarizer, writer)

    def spawn(self, session_id: str, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as the session's newest automatic work (``idle`` waits for it)."""
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

    def last_work(self, session_id: str) -> asyncio.Task[Any] | None:
        return self._last.get(session_id)

    def end_turn(self, session_id: str) -> None:
        """The session's turn ended: its pending automatic work may start."""
        self.turns.end(session_id)

    def touched(self, session_id: str) -> None:
        """A write to the session: its turn (if work waits for its end) is not quiet yet."""
        self.turns.touch(session_id)

    def _turn(self, session_id: str) -> Turn:
        return self.turns.of(session_id)

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
        for sid in self.turns.sessions():
            self.end_turn(sid)
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        self.turns.cancel_all()
        self.preparer.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            try:
                await task
            except BaseException:
                pass
        await self.writers.aclose()

    # -- reads (``reads``) ---------------------------------------------------------------------

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
        stream: bool = False,
    ) -> ContextResult:
        """``session/context``: the window, with its revision; ``wait``: after earlier writes'
        automatic work; ``fit``: see ``Reads.window``; ``overhead_tokens``: the frontend's
        overhead (None: the learned one); ``since``: a revision served before (then only
        what changed after it, when it can: ``delta``); ``stream``: a window too large to keep
        may be rendered as it is read, its ``messages`` then only for an encoder
        (``streamed``)."""
        if wait:
            await self.idle(session_id)
        session = await self.store.require_session(session_id)
        extra, source = self.overhead_of(session, overhead_tokens)
        result = await self.reads.window(session, fmt, cfg or self.config(), fit, extra, stream)
        result.overhead_tokens, result.overhead_source = extra, source
        self.overheads.served(session_id, result.estimated_tokens)
        return self.revisions.serve(session_id, result, since)

    def overhead_of(self, session: Session, given: int | None) -> tuple[int, OverheadSource]:
        return self.reads.overhead_of(session, given)

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
        return await self.reads.breakdown(session, cfg or self.config(), extra, source)

    async def overflow_of(
        self, tokens: Tokens, limit: ModelLimit, cfg: Config | None = None
    ) -> OverflowResult:
        return await self.reads.overflow_of(tokens, limit, cfg)

    async def overflow_session(
        self, session_id: str, cfg: Config | None = None, *, wait: bool = True
    ) -> OverflowResult:
        return await self.reads.overflow_session(session_id, cfg, wait=wait)

    async def prune(self, session_id: str, cfg: Config | None = None) -> PruneResult:
        """A requested prune: after the session's running automatic work, under its lock."""
        async with self.lock(session_id):
            session = await self.store.require_session(session_id)
            cfg = steer.for_window(cfg or self.config(), await load_window(self.store, session))
            return await self.prune_locked(session_id, cfg)

    # -- writes: through the write door (``writes``) ----------------------------------------

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

    async def prune_locked(
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
        ccfg = (cfg or self.config()).compaction
        ts = ts if ts is not None else now_ms()
        return await prune_run.prune(self.store, self.writes, session, ccfg, cutoff=cutoff, ts=ts)

    def is_compacting(self, session_id: str) -> bool:
        return session_id in self._compacting

    async def run_compaction(
        self, req: Request, cfg: Config, turn: Key | None = None
    ) -> Outcome | None:
        """Compact under the session's lease; with ``turn`` (automatic work), not at all when a
        compaction (another daemon's) already cut history past that turn."""
        sid = req.session_id
        if req.started is None:
            req = dataclasses.replace(req, started=asyncio.get_running_loop().time())
        lease = lease_mod.name(sid)
        if not await self.store.acquire_lease(lease, self.owner, lease_mod.LEASE_MS):
            raise Busy(f"session {sid!r} is being compacted by another daemon")
        self._compacting.add(sid)
        renew = asyncio.ensure_future(lease_mod.keep(self.store, lease, self.owner))
        try:
            if turn is not None:
                boundary = await self.store.boundary(sid)
                if boundary is not None and boundary.marker > turn:
                    return None
            used = await self.preparer.commit(req, cfg)
            if used is not None:
                self.writes.after(COMPACTION, sid)
                return used
            outcome = await self.compactor.run(req, cfg, self.writers.get(cfg))
            if outcome.result.error is None:
                self.tally.summary_tokens += await self._summary_output(sid, outcome)
            self.writes.after(COMPACTION, sid)  # its events went out as it ran
            return outcome
        finally:
            renew.cancel()
            self._compacting.discard(sid)
            await self.store.release_lease(lease, self.owner)

    async def _summary_output(self, sid: str, outcome: Outcome) -> int:
        mid = outcome.result.summary_message_id
        if mid is None:
            return 0
        found = await self.store.get_message(mid)
        if found is None or not isinstance(found[0], AssistantMessage):
            return 0
        return found[0].tokens.output

    # -- compaction.prepare (``prepared``) -----------------------------------------------------

    async def prepared(self, session_id: str) -> Prepared | None:
        """The session's prepared summary, once written (see ``Preparer.prepared``)."""
        return await self.preparer.prepared(session_id)

    def invalidate_prepared(self, session_id: str) -> None:
        self.preparer.invalidate(session_id)

    async def compact(self, req: Request, cfg: Config | None = None) -> CompactResult:
        """A requested compaction; waits for a running prune, refuses a second compaction."""
        if self.is_compacting(req.session_id):
            raise Busy(f"session {req.session_id!r} is already compacting")
        async with self.lock(req.session_id):
            if self.is_compacting(req.session_id):
                raise Busy(f"session {req.session_id!r} is already compacting")
            session = await self.store.require_session(req.session_id)
            window = await load_window(self.store, session)
            outcome = await self.run_compaction(req, steer.for_window(cfg or self.config(), window))
            assert outcome is not None  # only automatic work is ever skipped
            await self.auto.record(req.session_id, outcome)
            return outcome.result

    # -- automatic triggers (``auto``) ---------------------------------------------------------

    def message_stored(self, info: Message, cfg: Config | None = None) -> None:
        """``info`` was stored: run the automatic work it causes (see ``will_store``)."""
        self.auto.message_stored(info, cfg)

    def will_store(self, info: Message, cfg: Config | None = None) -> Done[Any] | None:
        """See ``Automatic.will_store``."""
        return self.auto.will_store(info, cfg)

    def next_time(self, session_id: str) -> int:
        return self.auto.next_time(session_id)

    # -- steering (``steering``) ---------------------------------------------------------------

    async def pin(
        self, session_id: str, message_id: str, part_id: str | None, pinned: bool
    ) -> None:
        await self.steering.pin(session_id, message_id, part_id, pinned)

    async def compactions(self, session_id: str) -> list[CompactionRecord]:
        return await self.steering.compactions(session_id)

    async def uncompact(
        self, session_id: str, message_id: str | None, restore_pruned: bool
    ) -> list[str]:
        return await self.steering.uncompact(session_id, message_id, restore_pruned)
