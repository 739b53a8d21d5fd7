"""The history index's background batch: writes note their parts, this brings the index up
to date behind them.

A write commits without touching the index: its triggers note a rewritten or removed part
in ``history_dirty``, in the write's own transaction, so a note outlives a crash; on SQLite a
new part needs no note, being above the batch's mark (``schema.HISTORY_MARKED``). After a commit
the indexer waits until writes have been quiet for ``history.indexDelayMs`` (a part streamed
in many updates is indexed once, not once per commit), then indexes what is noted in batches
of ``BATCH_ROWS`` parts, each an op of its own that commits alone behind the writes queued
before it (``commit.Op.background``): ingest never waits inside an index transaction. A search
first runs the batches itself (``catch_up``), so it finds every write acknowledged before it;
a daemon that starts with notes left by a crash indexes them at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from sidecar.store.backend import Statement

log = logging.getLogger(__name__)

#: Parts indexed per batch: a batch is one transaction the next writes queue behind.
BATCH_ROWS = 64
#: Writes quiet this long (seconds) before a batch runs, unless configured.
DEFAULT_DELAY = 0.5

Submit = Callable[[list[Statement]], Awaitable[list[int]]]
Probe = Callable[[], Awaitable[bool]]
More = Callable[[Sequence[int]], bool]


def _never(counts: Sequence[int]) -> bool:
    return False


class Indexer:
    """``batch`` are the backend's statements over the first ``?`` noted parts; the last
    one's row count is how many it indexed: a full batch is followed by another, and one
    that was not when ``more`` says so from the counts (SQLite's: its mark moved).
    ``submit`` commits them as background work; ``settle`` returns once the ops queued
    before it have committed; ``noted`` asks (a read) whether any part is noted, so that a
    search with nothing to index writes nothing."""

    def __init__(
        self, submit: Submit, batch: Sequence[str], settle: Callable[[], Awaitable[object]],
        noted: Probe, more: More | None = None,
    ) -> None:  # fmt: skip
        self._submit = submit
        self._batch = list(batch)
        self._more = more or _never
        self._settle = settle
        self._noted = noted
        self._delay = DEFAULT_DELAY
        self._timer: asyncio.TimerHandle | None = None
        self._last = 0.0  # the loop's time of the last write
        self._running: asyncio.Future[None] | None = None
        self._again = False  # a write committed while a batch ran: look once more after it
        self._closed = False
        self.batches = 0  # observable: batches committed
        self.indexed = 0  # observable: parts indexed

    @property
    def delay(self) -> float:
        """Seconds of quiet after the last write before a batch runs."""
        return self._delay

    @delay.setter
    def delay(self, seconds: float) -> None:
        self._delay = seconds
        if self._timer is not None:  # armed for the old quiet period: due at the new one
            self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_at(self._last + seconds, self._due)

    @property
    def scheduled(self) -> bool:
        """A batch is due once writes have been quiet long enough."""
        return self._timer is not None

    def written(self) -> None:
        """A write committed: (re)start the quiet period. Every commit comes here: it notes
        the time, and the one timer armed looks at it when due (no timer per commit)."""
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(self.delay, self._due)

    def _due(self) -> None:
        loop = asyncio.get_running_loop()
        quiet_at = self._last + self.delay
        if loop.time() < quiet_at:  # written since the timer was armed: wait out the rest
            self._timer = loop.call_at(quiet_at, self._due)
            return
        self._timer = None
        if self._running is None or self._running.done():
            self._running = asyncio.ensure_future(self._run())
        else:  # the batch under way may have looked for notes before this write's
            self._again = True

    async def _run(self) -> None:
        again = True
        while again and not self._closed:
            self._again = False
            try:
                await self.catch_up()
            except Exception as exc:  # the notes stay: the next write, search or start retries
                log.warning("history index: batch failed (%s); retried later", type(exc).__name__)
                return
            again = self._again

    async def catch_up(self) -> None:
        """Index everything noted by the writes committed (or queued) before this call."""
        rows = [(BATCH_ROWS,)]
        if self._timer is not None:  # this does that batch's work; a later write arms it again
            self._timer.cancel()
            self._timer = None
        await self._settle()
        if not await self._noted():
            return
        while True:
            counts = await self._submit([(sql, rows) for sql in self._batch])
            self.batches += 1
            done = counts[-1] if counts else 0
            self.indexed += max(done, 0)
            if not counts or (done < BATCH_ROWS and not self._more(counts)):
                return

    async def close(self) -> None:
        """Stop scheduling; a batch under way finishes (what is left is indexed at the next
        start)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            with contextlib.suppress(Exception):
                await self._running
