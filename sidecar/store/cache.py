"""In-memory caches in front of the store's reads.

``WindowCache`` keeps, per session, the last window read from SQLite (the stored JSON of its
messages and parts) and applies every later committed write to it, so the window a frontend
asks for every turn is served without a query. Correctness rules:

* a write updates (or drops) the entry only after it committed, and only with what it really
  changed (row counts tell);
* a read stores its result only if no write to the session happened while it ran, and the
  cache was not cleared meanwhile (``version``), so a slow read can never overwrite newer
  state (another daemon's commit noticed by a read of another session clears the cache,
  whether or not this session had an entry yet);
* anything not tracked precisely (forks, revert cleanup, JSON patched in SQL) drops the
  session's entry, and the next read goes to SQLite; a compaction's appends are tracked
  (when every row applied), and an entry serves a later start (its new marker) by letting go
  of what is before it;
* a message new to an entry that starts at a compaction boundary may be one from before the
  window whose time moved it in, with parts the entry never saw: it is held *unverified*
  until the next read compares its part count with the store's (``windows._verify``), so the
  window after a compaction stays cached while the conversation goes on.

Beside the windows it remembers point reads asked several times a turn (a session's row,
its compaction boundary) until a write that can change them: ``memo_version``.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

import msgspec

from sidecar.errors import StoreDamaged

Row = tuple[str, str]
T = TypeVar("T")
PartRow = tuple[str, str, str]  # (message id, part id, JSON)
Version = tuple[int, int]  # (the cache's clears, the session's writes): ``WindowCache.version``


class Key(NamedTuple):
    """A message's position: ``(time.created, id)``."""

    created: int
    id: str

    def cursor(self) -> str:
        return f"{self.created}:{self.id}"

    @staticmethod
    def parse(cursor: str) -> Key:
        created, _, ident = cursor.partition(":")
        if not created.isdigit() or not ident or "\x00" in ident or int(created) > _MAX_CREATED:
            raise ValueError(f"malformed cursor {cursor!r}")
        return Key(int(created), ident)


_MAX_CREATED = 2**63 - 1  # SQLite's INTEGER


class PageCursor(NamedTuple):
    """Where a ``session/messages`` page resumes: at a message, after one of its parts (a
    message with more parts than a page holds continues on the next page)."""

    key: Key
    after_part: str | None = None

    def encode(self) -> str:
        """``created:id`` after a message; JSON ``[created, id, part]`` inside one (``""``: at
        its first part)."""
        if self.after_part is None:
            return self.key.cursor()
        # JSON, since ids are the clients' own strings and may hold any separator.
        return msgspec.json.encode([self.key.created, self.key.id, self.after_part]).decode()

    @staticmethod
    def parse(cursor: str) -> PageCursor:
        if not cursor.startswith("["):
            return PageCursor(Key.parse(cursor))
        try:
            created, mid, part = msgspec.json.decode(cursor, type=tuple[int, str, str])
        except msgspec.DecodeError:
            raise ValueError(f"malformed cursor {cursor!r}") from None
        if not 0 <= created <= _MAX_CREATED or not mid or "\x00" in mid + part:
            raise ValueError(f"malformed cursor {cursor!r}")
        return PageCursor(Key(created, mid), part)

    @property
    def inside(self) -> bool:
        return self.after_part is not None


#: At most this much stored JSON text is kept decoded (the Structs hold about as much again):
#: the windows being served fit many times over, and what a compaction or prune left behind
#: ages out instead of staying for the life of the daemon.
DECODED_BYTES = 8 << 20


class Decoded:
    """Decoded Structs keyed by row id, each kept with the stored JSON text it came from.

    Most of a window is unchanged from one turn to the next, and comparing the text with the
    one cached for its id (the same object when it comes from the window cache; else one
    ``memcmp``) is far cheaper than decoding it again, and than hashing a 60 KB text as a
    dict key. Checked against the text, it can never serve a stale object. Cached Structs are
    shared: callers must not mutate them (the engine builds changed copies with
    ``msgspec.structs.replace``). Least recently used first out, by the bytes of text held.
    """

    def __init__(self, decode: Callable[[str], Any], max_bytes: int = DECODED_BYTES) -> None:
        self._decode = decode
        self._max_bytes = max_bytes
        self._bytes = 0
        self._items: dict[str, tuple[str, Any]] = {}

    def __call__(self, key: str, data: str) -> Any:
        items = self._items
        found = items.pop(key, None)
        if found is not None:
            if found[0] is data or found[0] == data:
                items[key] = found  # now the most recently used
                return found[1]
            self._bytes -= len(found[0])
        try:
            decoded = self._decode(data)
        except StoreDamaged as exc:
            raise StoreDamaged(f"row {key!r}: {exc.what}") from None
        if len(data) <= self._max_bytes:
            items[key] = (data, decoded)
            self._bytes += len(data)
            while self._bytes > self._max_bytes:
                self._bytes -= len(items.pop(next(iter(items)))[0])
        return decoded

    @property
    def held_bytes(self) -> int:
        """The stored text held (for tests)."""
        return self._bytes


@dataclass
class _Entry:
    start: Key | None
    keys: list[Key] = field(default_factory=list)
    info: dict[str, str] = field(default_factory=dict)
    key_of: dict[str, Key] = field(default_factory=dict)
    parts: dict[str, dict[str, str]] = field(default_factory=dict)
    # Messages added since the read whose parts are not known to be all here (see above).
    unverified: set[str] = field(default_factory=set)
    # Each message as the store last assembled it (``WindowCache.assembled``), dropped with
    # every write to that message or its parts; kept for one session at a time.
    built: dict[str, Any] = field(default_factory=dict)

    def advance(self, start: Key) -> None:
        """Start at ``start``, a later key: the messages before it leave."""
        cut = bisect.bisect_left(self.keys, start)
        for key in self.keys[:cut]:
            mid = key.id
            del self.info[mid], self.key_of[mid], self.parts[mid]
            self.built.pop(mid, None)
            self.unverified.discard(mid)
        del self.keys[:cut]
        self.start = start

    def rows(self) -> tuple[list[Row], list[PartRow]]:
        msgs = [(k.id, self.info[k.id]) for k in self.keys]
        parts = [(k.id, pid, raw) for k in self.keys for pid, raw in self.parts[k.id].items()]
        return msgs, parts


#: What ``WindowCache.recall`` returns when it holds nothing valid.
MISS = object()
# Point reads remembered at most, and ids watched for them (all are let go past either).
_MAX_MEMOS = 4096
_MAX_BOUND_IDS = 3 * _MAX_MEMOS


def _covers(held: Key | None, start: Key | None) -> bool:
    """Does a window held from ``held`` hold the one from ``start`` (None: the beginning)?"""
    return held is None or (start is not None and held <= start)


class WindowCache:
    def __init__(self, max_sessions: int = 64) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._versions: dict[str, int] = {}
        self._clears = 0  # ``clear`` calls: a read begun before one must not be stored
        self._max = max_sessions
        self.hits = 0
        self.misses = 0
        self._built_for: str | None = None  # the session whose entry keeps ``built``
        # Per session, the writes that can change its compaction boundary and its row (see
        # ``memo_version``), the point reads remembered for them, and the compaction parts
        # and messages of the boundaries remembered (a rewrite of one, whatever it becomes,
        # counts).
        self._shapes: dict[str, int] = {}
        self._rows: dict[str, int] = {}
        self._memo: dict[tuple[str, Hashable], tuple[Version, Any]] = {}
        self._bound_ids: set[str] = set()

    def version(self, sid: str) -> Version:
        """What a read of ``sid`` notes before it reads and ``put``/``verify`` compare: the
        session's writes and the cache's clears so far."""
        return (self._clears, self._versions.get(sid, 0))

    def _hit(self, sid: str, start: Key | None) -> _Entry | None:
        """The session's entry if it holds the window starting at ``start`` (counted). An
        entry from an earlier start holds it too (every message from there on): it moves up
        to ``start`` and lets go of what is before it, as the window after a compaction starts
        at its marker and never again before it (a read from an earlier start goes to SQLite).
        """
        entry = self._entries.get(sid)
        if entry is None or not _covers(entry.start, start):
            self.misses += 1
            return None
        if entry.start != start:
            assert start is not None
            entry.advance(start)
        self._entries.move_to_end(sid)
        self.hits += 1
        return entry

    def has(self, sid: str) -> bool:
        """Is any window of the session held (a hint: not checked for freshness)?"""
        return sid in self._entries

    def holds(self, sid: str, start: Key | None) -> bool:
        """Would ``assembled`` serve the window from ``start`` (nothing counted)?"""
        entry = self._entries.get(sid)
        return entry is not None and _covers(entry.start, start)

    def assembled(
        self, sid: str, start: Key | None, build: Callable[[str, str, list[tuple[str, str]]], T]
    ) -> list[T] | None:
        """The window from ``start``, if held, each message made by ``build(id, JSON,
        [(part id, JSON), ...])`` only when it (or one of its parts) was written since it was
        last built: a window read every step re-assembles only its new messages."""
        entry = self._hit(sid, start)
        if entry is None:
            return None
        if self._built_for != sid:
            # One session's assembled window at a time: the decoded Structs weigh about what
            # their text does, and the decode cache bounds those (``DECODED_BYTES``).
            old = self._entries.get(self._built_for) if self._built_for is not None else None
            if old is not None:
                old.built.clear()
            self._built_for = sid
        built = entry.built
        out: list[T] = []
        for key in entry.keys:
            mid = key.id
            msg = built.get(mid)
            if msg is None:
                msg = built[mid] = build(mid, entry.info[mid], list(entry.parts[mid].items()))
            out.append(msg)
        return out

    def stored(self, sid: str) -> tuple[list[Row], list[PartRow]]:
        """The rows of the window ``assembled`` just gave (not counted again): the stored JSON
        beside the shared messages, for the ``parts`` format."""
        return self._entries[sid].rows()

    def newest_first(
        self, sid: str
    ) -> tuple[Key | None, Iterator[tuple[str, str, list[tuple[str, str]]]]] | None:
        """The cached window's start and its messages newest first, each ``(id, JSON,
        [(part id, JSON), ...])``, whatever its start; no counting. Read it before the next
        await: the entry changes with every committed write."""
        entry = self._entries.get(sid)
        if entry is None:
            return None
        rows = (
            (k.id, entry.info[k.id], list(entry.parts[k.id].items())) for k in reversed(entry.keys)
        )
        return entry.start, rows

    def unverified(self, sid: str) -> list[str]:
        """Messages of the session's entry to check before it is used (see the module)."""
        entry = self._entries.get(sid)
        return sorted(entry.unverified) if entry is not None and entry.unverified else []

    def verify(self, sid: str, version: Version, stored: dict[str, int]) -> None:
        """``stored``: the store's part count of each ``unverified`` message, read while the
        session was at ``version``. The entry's parts of such a message were all written
        after it was added, so they are a subset of the stored ones: equal counts mean the
        entry has them all. Otherwise (or after a write raced with the read) it is dropped."""
        entry = self._entries.get(sid)
        if entry is None:
            return
        if self.version(sid) != version:
            self.invalidate(sid)
            return
        for mid in entry.unverified:
            if mid in entry.parts and stored.get(mid, 0) != len(entry.parts[mid]):
                self.invalidate(sid)
                return
        entry.unverified.clear()

    def put(
        self,
        sid: str,
        start: Key | None,
        version: Version,
        msgs: list[tuple[Key, str]],
        parts: list[tuple[str, str, str]],
    ) -> None:
        """Remember a window read from SQLite (messages in order, then ``(message id, part id,
        JSON)`` in id order), unless a write to the session raced with the read."""
        if self.version(sid) != version:
            return
        entry = _Entry(start=start)
        for key, raw in msgs:
            entry.keys.append(key)
            entry.info[key.id] = raw
            entry.key_of[key.id] = key
            entry.parts[key.id] = {}
        for mid, pid, raw in parts:
            entry.parts[mid][pid] = raw
        self._entries[sid] = entry
        self._entries.move_to_end(sid)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    # -- point reads remembered (a session's row, its compaction boundary) ---------------

    def memo_version(self, sid: str, what: Hashable) -> Version:
        """What a point read of ``sid`` notes before it reads and ``remember`` compares: the
        cache's clears and the session's writes that can change what it read. The session's
        row (``what`` is ``"session"``): its own writes, and a message's, which raises its
        ``updated``. Its boundary (any other ``what``): a user message (a marker), a summary,
        a compaction part, a removal, or a rewrite of the marker, summary or compaction part
        a remembered boundary was made of. A part streamed into the conversation, or an
        assistant's message, changes neither."""
        counts = self._rows if what == "session" else self._shapes
        return (self._clears, counts.get(sid, 0))

    def recall(self, sid: str, what: Hashable) -> Any:
        """What ``remember`` kept for ``(sid, what)`` if no such write came since, else
        ``MISS``."""
        found = self._memo.get((sid, what))
        if found is None or found[0] != self.memo_version(sid, what):
            return MISS
        return found[1]

    def remember(
        self, sid: str, what: Hashable, version: Version, value: Any, made_of: Iterable[str] = ()
    ) -> None:
        """Keep a point read made at ``version`` (``made_of``: the ids of the rows a boundary
        was made of, whose every rewrite is then watched), unless a write came while it ran."""
        if version != self.memo_version(sid, what):
            return
        if len(self._memo) >= _MAX_MEMOS or len(self._bound_ids) >= _MAX_BOUND_IDS:
            # (the watched ids only ever grow, one boundary after another: both go together)
            self._memo.clear()
            self._bound_ids.clear()
        self._bound_ids.update(made_of)
        self._memo[(sid, what)] = (version, value)

    def _reshape(self, sid: str) -> None:
        self._shapes[sid] = self._shapes.get(sid, 0) + 1

    def session_written(self, sid: str) -> None:
        """A session's row was written (or deleted)."""
        self._rows[sid] = self._rows.get(sid, 0) + 1

    def _session_touched(self, sid: str, created: int) -> None:
        """A message's write raised the session's ``updated`` to ``created`` at least: a
        remembered row takes it (the row's version moves on, so a read under way when the
        message committed is not kept)."""
        found = self._memo.get((sid, "session"))
        valid = found is not None and found[0] == self.memo_version(sid, "session")
        self.session_written(sid)
        if found is None or not valid or found[1] is None:
            return
        session = found[1]
        if created > session.time.updated:
            time = msgspec.structs.replace(session.time, updated=created)
            session = msgspec.structs.replace(session, time=time)
        self._memo[(sid, "session")] = (self.memo_version(sid, "session"), session)

    # -- writes (called after commit) ------------------------------------------------------

    def _touch(self, sid: str) -> _Entry | None:
        self._versions[sid] = self._versions.get(sid, 0) + 1
        return self._entries.get(sid)

    def clear(self) -> None:
        """Another process changed the database: nothing cached can be trusted, nor any
        read under way."""
        self._clears += 1
        for sid in list(self._entries):
            self.invalidate(sid)

    def invalidate(self, sid: str) -> None:
        self._touch(sid)
        self._reshape(sid)
        self.session_written(sid)
        self._entries.pop(sid, None)

    def message_written(
        self, sid: str, key: Key, raw: str, *, moves: bool = True, touched: bool = False
    ) -> None:
        """``moves``: the message may move the session's boundary (a user message, a summary;
        see ``memo_version``); ``touched``: its write raised the session's ``updated``."""
        if moves or key.id in self._bound_ids:
            self._reshape(sid)
        if touched:
            self._session_touched(sid, key.created)
        entry = self._touch(sid)
        if entry is None:
            return
        old = entry.key_of.get(key.id)
        if old is not None and old != key:  # its time changed: it moves
            self.invalidate(sid)
            return
        if old is not None:
            entry.info[key.id] = raw
            entry.built.pop(key.id, None)
            return
        if entry.start is not None:
            if key < entry.start:
                return  # before the window: not part of it
            # Unknown here, but it may be a message from before the window that moved into
            # it (its time changed), with parts this entry never saw: checked before use.
            entry.unverified.add(key.id)
        bisect.insort(entry.keys, key)
        entry.info[key.id] = raw
        entry.key_of[key.id] = key
        entry.parts[key.id] = {}

    def part_written(self, sid: str, mid: str, pid: str, raw: str, kind: str | None = None) -> None:
        """``kind``: the part's type as written (None: unknown)."""
        if kind is None or kind == "compaction" or pid in self._bound_ids:
            self._reshape(sid)
        entry = self._touch(sid)
        if entry is None or mid not in entry.info:
            return
        entry.built.pop(mid, None)
        parts = entry.parts[mid]
        if pid in parts or not parts or pid > next(reversed(parts)):
            parts[pid] = raw  # replaced in place, or appended in id order
        else:
            parts[pid] = raw
            entry.parts[mid] = dict(sorted(parts.items()))

    def message_removed(self, sid: str, mid: str) -> None:
        self._reshape(sid)
        entry = self._touch(sid)
        if entry is None or mid not in entry.key_of:
            return
        entry.unverified.discard(mid)
        entry.built.pop(mid, None)
        entry.keys.remove(entry.key_of.pop(mid))
        del entry.info[mid]
        del entry.parts[mid]

    def part_removed(self, sid: str, mid: str, pid: str) -> None:
        self._reshape(sid)
        entry = self._touch(sid)
        if entry is not None and mid in entry.parts:
            entry.built.pop(mid, None)
            entry.parts[mid].pop(pid, None)
