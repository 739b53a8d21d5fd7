"""The automatic triggers: what a finished assistant message causes once its turn ended.

After an assistant message is stored with ``finish`` (or with ``ContextOverflowError``), the
session is checked, once, under its own lock, when that turn has ended (``turns.Turn``): an
overflow compacts (when ``compaction.auto``), otherwise a finished turn prunes (and may start
preparing a summary, ``prepared``). Waiting for the turn's end (and for the writes queued
before it to commit) is what makes the summarized span the same however late a frontend sends
the message's parts. Per-session locks make racing updates of the same message compact at
most once (OpenCode #27468), and a streak counter stops compaction loops when a compacted
context still overflows (OpenCode #27924): one more attempt, then an error event.

The work a write causes is registered *before* the write is submitted (``will_store``), runs
in the order of the writes (each waits for the one before it), and sees the session only up
to the message that caused it: so the same writes give the same stored result however the
frontend's next writes race it, and a ``session/context`` read behind the write waits for it
(read-your-writes) without a frontend having to know ``session/idle``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import msgspec

from sidecar.engine import overflow as overflow_mod
from sidecar.engine import overhead, steer
from sidecar.engine.compactor import Outcome, Request
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort
from sidecar.engine.prepared import Preparer
from sidecar.engine.turns import Turns
from sidecar.errors import Busy
from sidecar.model.catalog import lookup, lookup_with_source
from sidecar.model.config import Config
from sidecar.model.ids import now_ms
from sidecar.model.messages import AssistantMessage, Message
from sidecar.model.rpc import OverheadSource, PruneResult, StatusEvent
from sidecar.model.session import Session, SessionLimits
from sidecar.model.tokens import ModelLimit
from sidecar.store import Done, Key

log = logging.getLogger("sidecar.engine")

CONTEXT_OVERFLOW = "ContextOverflowError"
MAX_STREAK = 2  # automatic compactions in a row without a turn that fits


class Face(Protocol):
    """What the automatic work needs of the ``Engine`` (its face)."""

    store: StorePort
    host: Host
    config: Callable[[], Config]
    overheads: overhead.Overheads
    turns: Turns
    preparer: Preparer

    def lock(self, session_id: str) -> asyncio.Lock: ...
    def limits(
        self, provider_id: str, model_id: str, cfg: Config | None = None
    ) -> ModelLimit | None: ...
    def spawn(self, session_id: str, coro: Coroutine[Any, Any, None]) -> None: ...
    def last_work(self, session_id: str) -> asyncio.Task[Any] | None: ...
    def overhead_of(self, session: Session, given: int | None) -> tuple[int, OverheadSource]: ...
    async def prune_locked(
        self, session_id: str, cfg: Config, *, cutoff: Key, ts: int
    ) -> PruneResult: ...
    async def run_compaction(
        self, req: Request, cfg: Config, turn: Key | None = None
    ) -> Outcome | None: ...


class Automatic:
    """Per session: the automatic compactions in a row, the last one's error, the cut of the
    last compaction made here and the newest time it stamped."""

    def __init__(self, face: Face) -> None:
        self.face = face
        self.store = face.store
        self.host = face.host
        self._streak: dict[str, int] = {}
        # Per session, the last compaction made here: (its cut, its marker). A new message
        # sorting between the two was written behind the boundary and is invisible.
        self._cuts: dict[str, tuple[Key, Key]] = {}
        self._failed: dict[str, str] = {}  # the last automatic compaction's error, per session
        # The newest time a compaction of ours stamped, per session (``next_time``).
        self._made_until: dict[str, int] = {}

    def forget(self, session_id: str) -> None:
        """The session's compactions were undone: no cut, no streak."""
        self._cuts.pop(session_id, None)
        self._streak.pop(session_id, None)

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
        self._behind_boundary(info.session_id, Key(info.time.created, info.id))
        if not isinstance(info, AssistantMessage):
            self.face.turns.end(info.session_id)  # the session's next user message
            return None
        self.face.turns.touch(info.session_id)
        if info.summary:
            return None
        overflowed = info.error is not None and info.error.name == CONTEXT_OVERFLOW
        if info.finish is None and not overflowed:
            return None
        committed: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        prev = self.face.last_work(info.session_id)
        turn = self.face.turns.of(info.session_id).ended
        work = self._after_turn(info, overflowed, cfg or self.face.config(), committed, prev, turn)
        self.face.spawn(info.session_id, work)

        def done(_result: Any, exc: BaseException | None) -> None:
            if exc is None:  # a finished step: its usage against the window served for it
                self.face.overheads.finished(info.session_id, info.id, info.tokens)
            if not committed.done():
                committed.set_result(exc is None)

        return done

    def _behind_boundary(self, sid: str, key: Key) -> None:
        """Report a message (its key) that sorts behind the compaction boundary made here."""
        cut = self._cuts.get(sid)
        if cut is None:
            return
        if cut[0] < key < cut[1]:
            self.host.log(
                f"message {key.id} of session {sid} sorts before the compaction "
                f"marker {cut[1].id} (time.created {key.created} < {cut[1].created}): it "
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
            async with self.face.lock(sid):
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
            limit = self.face.limits(info.provider_id, info.model_id, cfg)
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
                done = await self.auto_compact(
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
            await self.face.prune_locked(
                sid, cfg, cutoff=cutoff, ts=info.time.completed or info.time.created
            )
        if ccfg.prepare is not None:
            limit = self.face.limits(info.provider_id, info.model_id, cfg)
            await self.face.preparer.drop_stale(sid)
            if limit is not None:
                o = overflow_mod.check(info.tokens, limit, ccfg)
                self.face.preparer.maybe_prepare(info, cfg, o.count, o.usable)

    async def _remember_limits(self, session: Session, info: AssistantMessage, cfg: Config) -> None:
        """Store the limits this turn's decision used with the session (when they changed),
        so ``inspect``/``report`` show the window the session ran under."""
        limit, source = lookup_with_source(info.provider_id, info.model_id, cfg.models)
        if limit is None or not info.model_id:
            return
        learned, how = self.face.overhead_of(session, None)
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

    async def auto_compact(
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
        usable = overflow_mod.threshold(limit, cfg.compaction) if limit is not None else 0
        outcome = await self.face.run_compaction(
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
        await self.record(sid, outcome)
        if outcome.result.status != "continue" or limit is None:
            return outcome
        threshold = overflow_mod.threshold(limit, cfg.compaction)
        if outcome.after_tokens <= threshold:
            return outcome
        # One further attempt, then an error: never an endless loop.
        second = await self.face.run_compaction(
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
        await self.record(sid, second)
        if second.result.status == "continue" and second.after_tokens > threshold:
            self._error(
                sid,
                f"context is still {second.after_tokens} tokens after two compactions "
                f"(limit {threshold}); not retrying",
            )
        return second

    async def record(self, sid: str, outcome: Outcome) -> None:
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
        # Their keys only: the window between would bring the cut message's parts too.
        for key in await self.store.keys_between(sid, cut, marker):
            self._behind_boundary(sid, key)

    def next_time(self, session_id: str) -> int:
        """``time.created`` for a message whose writer left it out: now, but never before
        what a compaction of ours stamped (its clock runs from the session's latest message,
        which may be ahead of ours), so the frontend's next message sorts after it."""
        return max(now_ms(), self._made_until.get(session_id, 0) + 1)

    def _error(self, sid: str, text: str) -> None:
        """A ``session/status`` error event: how background problems reach the user."""
        event = StatusEvent(session_id=sid, status="error", error=text)
        self.host.publish(sid, event)
