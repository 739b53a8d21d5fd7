"""compaction.prepare: a session's summary written in the background ahead of its overflow.

A turn end at ``prepare x usable`` tokens starts writing the summary the overflow would ask
for (``Compactor.prepare``); the overflow's compaction then commits it at once when it is
still valid (same settings, prompt and covered history: ``fingerprint``), else discards it
(counted) and compacts as usual. In memory only; no read or write waits on it. Anything that
changes the covered history without a message write drops it through the write door.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from sidecar.engine import overflow as overflow_mod
from sidecar.engine.compactor import Compactor, Outcome, Prepared, Request, fingerprint
from sidecar.engine.fit import limit_for_window
from sidecar.engine.ports import StorePort
from sidecar.engine.window import load_window
from sidecar.model.config import Config
from sidecar.model.messages import AssistantMessage
from sidecar.store import Key
from sidecar.summarizers.base import Summarizer, SummaryError

log = logging.getLogger("sidecar.engine")


@dataclass
class Tally:
    """What summaries cost here (``daemon/status``, the benches)."""

    summary_tokens: int = 0  # output tokens of every summary written here
    prepared_discarded_tokens: int = 0  # of those, prepared summaries never committed
    prepared_failed: int = 0  # preparations whose writer failed: dropped, never written offline


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


class Preparer:
    """Per session, the summary being written (or written) ahead of its overflow."""

    def __init__(
        self,
        store: StorePort,
        compactor: Compactor,
        writer: Callable[[Config], Summarizer],
        tally: Tally,
    ) -> None:
        self.store = store
        self.compactor = compactor
        self.writer = writer
        self.tally = tally
        self._prepared: dict[str, _Preparing] = {}

    async def prepared(self, session_id: str) -> Prepared | None:
        """The session's prepared summary, once written (None: none, or it failed). For tests
        and ``inspect``-style tools: nothing in the daemon waits on it except a compaction."""
        entry = self._prepared.get(session_id)
        if entry is None:
            return None
        with contextlib.suppress(Exception, asyncio.CancelledError):
            return await asyncio.shield(entry.task)
        return None

    def invalidate(self, session_id: str) -> None:
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
            self.tally.prepared_discarded_tokens += result.tokens

    def close(self) -> None:
        for sid in list(self._prepared):
            self.invalidate(sid)

    async def drop_stale(self, sid: str) -> None:
        """Drop the session's written summary when its covered history changed since."""
        entry = self._prepared.get(sid)
        if entry is not None and await self.stale(sid, entry):
            self.invalidate(sid)

    async def stale(self, sid: str, entry: _Preparing) -> bool:
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

    def maybe_prepare(self, info: AssistantMessage, cfg: Config, count: int, usable: int) -> None:
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
            self.invalidate(sid)
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
            self.tally.prepared_failed += 1
            return None
        except Exception:
            log.exception("preparing a summary failed for %s", req.session_id)
            self.tally.prepared_failed += 1
            return None
        if prepared is not None:
            self.tally.summary_tokens += prepared.tokens
        return prepared

    async def commit(self, req: Request, cfg: Config) -> Outcome | None:
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
            self.invalidate(sid)  # another writer or prompt: not this summary
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
            self.tally.prepared_discarded_tokens += prepared.tokens
        return outcome

    async def _budget(self, sid: str, cfg: Config) -> int:
        """The threshold a compaction's result must fit (0: unknown model)."""
        session = await self.store.require_session(sid)
        window = await load_window(self.store, session)
        limit = limit_for_window(window, cfg.models)
        return 0 if limit is None else overflow_mod.threshold(limit, cfg.compaction)
