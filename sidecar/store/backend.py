"""What ``Store`` needs from a database: the seam between the store's queries and an engine.

The store's feature modules write their SQL once, with ``?`` placeholders and only what
SQLite and PostgreSQL both understand; a backend runs it (PostgreSQL's rewrites the
placeholders), owns the group commit, and knows how to tell that *another* process changed
the database. The two backends are ``sqlite.SqliteBackend`` (embedded default) and
``postgres.PostgresBackend`` (many daemons on one database).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import msgspec

from sidecar.model.buffers import Shared
from sidecar.model.ids import now_ms

if TYPE_CHECKING:
    from sidecar.store.cache import WindowCache

Statement = tuple[str, Sequence[Sequence[Any]]]
# Maps an integrity violation of one op (a foreign key, a trigger) to its caller's error.
OnIntegrity = Callable[[Exception], Exception]
T = TypeVar("T")
#: The one completion callback of the ingest path, from the commit to the reply:
#: ``done(result, None)`` on success, ``done(None, exc)`` on failure, called exactly once.
#: The backend's commit (``Then``), ``Store.put_message_then``/``put_part_then``
#: (``Done[None]``), the engine's ``will_store``, an ingest handler's ``done`` and the
#: protocol's deferred reply all have this shape, so each step wraps the next as it is.
Done = Callable[[T, BaseException | None], None]
# Told the op's row counts (``-1``: unknown), or the error, right after its commit.
Then = Done[list[int]]
Row = Sequence[Any]
#: Told ``(session id, method, params JSON)`` of each event another daemon published.
EventSink = Callable[[str, str, bytes], None]


#: What ``part/updated`` params hold instead of a large part when they are relayed to the
#: other daemons on one database (``Hub.publish``): its id, by which each reads it back.
_PART_REF = b'{"partRef":'


def part_ref(part_id: str) -> bytes:
    return _PART_REF + msgspec.json.encode(part_id) + b"}"


def referenced_part(params: bytes) -> str | None:
    """The id a relayed ``part_ref`` names (``None``: the params are the event's own)."""
    if not params.startswith(_PART_REF):
        return None
    ident: str = msgspec.json.decode(params[len(_PART_REF) : -1], type=str)
    return ident


class Backend(Protocol):
    #: ``"sqlite"`` or ``"postgresql"``.
    kind: str
    #: What ``daemon/status`` shows as the database (no password).
    display: str
    #: Set by the server: can another write still join one submitted now?
    may_join: Callable[[], bool]
    #: Whether ``relay`` reaches other daemons' subscribers (PostgreSQL: yes).
    shares_events: bool
    #: Set by the server: where other daemons' events are delivered.
    on_event: EventSink | None

    @property
    def commits(self) -> int: ...

    async def query(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """All rows of a bounded read."""

    async def query_point(self, sql: str, args: Sequence[Any] = ()) -> list[Row]:
        """``query`` for a read of a few rows by an index (a session, a message's key, the
        boundary): SQLite runs it on the loop, where a thread hop would cost more."""

    async def query_within(
        self, sql: str, args: Sequence[Any], deadline: float
    ) -> list[Row] | None:
        """``query`` on a reader, stopped at ``deadline`` (``time.monotonic()``): ``None`` when
        it was (a search's time budget; nothing else waits on that reader meanwhile)."""

    def stream(self, sql: str, args: Sequence[Any]) -> AbstractAsyncContextManager[Chunks]:
        """Rows of a read in chunks, so a caller can stop before the rest is loaded."""

    async def submit(
        self,
        statements: list[Statement],
        on_integrity: OnIntegrity | None = None,
        needs_counts: bool = False,
    ) -> list[int]:
        """Commit one atomic op with the next group commit; return once it is durable. A
        failing op fails alone; with ``needs_counts`` each statement's exact row count."""

    def submit_then(
        self, statements: list[Statement], then: Then, on_integrity: OnIntegrity | None = None
    ) -> None:
        """``submit`` for callers without a task: ``then`` hears how it went."""

    def commit_queued(self) -> None:
        """Commit what is queued now rather than on the next loop iteration."""

    def large_part(self, row: tuple[Any, ...], pieces: Shared) -> list[Statement] | None:
        """The statements that store the part ``row`` (its columns but the JSON) with the JSON
        ``pieces`` written in place, or ``None`` where the backend cannot (then the JSON is
        bound as one value)."""

    #: The history index's batch statements (``indexer.Indexer``); empty: no indexer.
    history_batch: Sequence[str]
    #: Is anything for that batch to do (a read)?
    history_noted: str

    def history_more(self, counts: Sequence[int]) -> bool:
        """After a batch (its statements' ``counts``) that was not full, is another due? (A
        full one is always followed by another: ``indexer.Indexer``.)"""

    # Is ``fresh`` a check in memory (SQLite's ``data_version``), not a round trip? Only
    # then is a point read worth remembering (``WindowCache.recall``).
    cheap_fresh: bool
    #: Called after each commit that stored a write (set by the store: the indexer's cue).
    on_commit: Callable[[], None] | None

    async def submit_background(self, statements: list[Statement]) -> list[int]:
        """Commit background work in a transaction of its own, behind the ops queued
        before it; each statement's exact row count."""

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> None:
        """Set ``state.time.compacted = ts`` in the JSON of those completed tool parts."""

    def relay(self, session_id: str, method: str, params: bytes) -> None:
        """Send an event published here to the other daemons on this database."""

    async def now_ms(self) -> int:
        """The clock leases are measured by (the database's, where daemons share one)."""

    def watch(self, cache: WindowCache) -> None:
        """The cache to keep honest about other processes' writes (``fresh``)."""

    async def fresh(self, cache: WindowCache) -> None:
        """Before a cached read: drop what another process changed since the last one."""

    async def close(self) -> None: ...


class Chunks(Protocol):
    def __aiter__(self) -> AsyncIterator[list[Row]]: ...


class ReadOnlyStore(RuntimeError):
    """A write through a store opened ``readonly``: a bug in the caller, never a user's error."""


class ReadOnly:
    """The write half of ``Backend`` for a store opened ``readonly`` (the look-at commands):
    every write refuses, and nothing is cached across reads, since only other processes
    write. The database refuses writes too (``mode=ro``, a read-only PostgreSQL session);
    this makes a stray write fail before it reaches it, with a clear message."""

    shares_events = False
    commits = 0
    history_batch: Sequence[str] = ()  # nothing is written, so nothing to index
    history_noted = ""

    def history_more(self, counts: Sequence[int]) -> bool:
        return False

    cheap_fresh = False  # ``fresh`` forgets everything

    def large_part(self, row: tuple[Any, ...], pieces: Shared) -> list[Statement] | None:
        return None  # refused at the write itself

    def __init__(self, display: str) -> None:
        self.display = display
        self.on_event: EventSink | None = None
        self.on_commit: Callable[[], None] | None = None
        self.may_join: Callable[[], bool] = lambda: True

    def _refuse(self) -> ReadOnlyStore:
        return ReadOnlyStore(f"{self.display} is open read-only")

    async def submit_background(self, statements: list[Statement]) -> list[int]:
        raise self._refuse()

    async def submit(self, *args: Any, **kwargs: Any) -> list[int]:
        raise self._refuse()

    def submit_then(
        self, statements: list[Statement], then: Then, on_integrity: OnIntegrity | None = None
    ) -> None:
        then([], self._refuse())

    def commit_queued(self) -> None:
        """Nothing is ever queued."""

    async def mark_compacted(self, part_ids: Sequence[str], ts: int) -> None:
        raise self._refuse()

    def relay(self, session_id: str, method: str, params: bytes) -> None:
        """Nobody to relay to (``shares_events`` is false)."""

    async def now_ms(self) -> int:
        return now_ms()

    def watch(self, cache: WindowCache) -> None:
        """Nothing to set up: ``fresh`` drops the whole cache before every read."""

    async def fresh(self, cache: WindowCache) -> None:
        cache.clear()
