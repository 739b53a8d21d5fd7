"""Windows: a session's messages with their parts over a range of keys, served from the
window cache when it can be; the backwards walks a compaction and a prune read (``Store``
delegates here)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from typing import Any, NamedTuple

from sidecar.errors import TooLarge
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.store.backend import Chunks
from sidecar.store.cache import Key
from sidecar.store.rows import (
    Tables,
    assemble,
    assemble_one,
    cached_message,
    cached_part,
    rows_in,
    stored_json,
    uncached,
)

# Rows fetched per round trip when the store walks a session backwards.
PAGE = 128


class _Budget:
    """Bytes a read may still load before it is refused as too large to serve."""

    __slots__ = ("left", "limit", "session_id")

    def __init__(self, limit: int, session_id: str) -> None:
        self.left = self.limit = limit
        self.session_id = session_id

    @property
    def spent(self) -> int:
        return self.limit - self.left

    def spend(self, size: int) -> None:
        self.left -= size
        if self.left < 0:
            raise TooLarge(
                f"the context window of session {self.session_id!r} is over {self.limit} bytes "
                "(config server.maxReplyBytes): compact it (session/compact), or read its "
                "history a page at a time with session/messages {limit, partLimit, cursor}"
            )


class LightPart(NamedTuple):
    """A part as a prune sees it: ``tool`` only for a completed tool call (else None), and its
    ``output`` only when it is not ``compacted``."""

    id: str
    tool: str | None
    compacted: bool
    output: str | None
    #: The output's estimate, given in its place by a part stored deflated (``packed``).
    tokens: int | None = None


class LightMessage(NamedTuple):
    key: Key
    user: bool
    summary: bool  # an assistant message whose ``summary`` is true
    parts: list[LightPart]  # every part, in id order


def _truthy(value: Any) -> bool:
    """A JSON scalar as SQLite (numbers) or PostgreSQL (``->>`` text) returns it."""
    if isinstance(value, str):
        if value in ("true", "false"):
            return value == "true"
        return value not in ("", "null") and float(value) != 0
    return bool(value)


def _light_of(msg: WithParts) -> LightMessage:
    parts = [
        LightPart(
            p.id,
            p.tool if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) else None,
            bool(
                isinstance(p, ToolPart)
                and isinstance(p.state, ToolCompleted)
                and p.state.time.compacted
            ),
            p.state.output
            if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
            else None,
        )
        for p in msg.parts
    ]
    info = msg.info
    return LightMessage(
        Key(info.time.created, info.id),
        isinstance(info, UserMessage),
        isinstance(info, AssistantMessage) and bool(info.summary),
        parts,
    )


_MSG_LIGHT = (
    "SELECT m.id, m.created, m.role, {summary} FROM messages m WHERE {{cond}} "
    "ORDER BY m.created DESC, m.id DESC LIMIT ?"
)
_PART_LIGHT = (
    "SELECT p.message_id, p.id, {tool}, {compacted}, {output}, {tokens} "
    "FROM messages m JOIN parts p ON p.message_id = m.id "
    "WHERE m.session_id = ? AND (m.created, m.id) >= (?, ?) "
    "AND (m.created, m.id) <= (?, ?) ORDER BY p.message_id, p.id"
)


def _light_sql(get: Callable[[str, str], str], zero: str, packed: bool = False) -> tuple[str, str]:
    """The two light queries, given how the backend reads a JSON path (``get(column, path)``,
    the path dotted; ``zero``: 0 as it returns it). ``packed``: a part stored deflated
    (``packed``) gives its output's estimate from its light JSON instead of its output."""
    completed = f"p.type = 'tool' AND {get('p.data', 'state.status')} = 'completed'"
    compacted = get("p.data", "state.time.compacted")
    summary = get("m.data", "summary")
    measured = f"{completed} AND COALESCE({compacted}, {zero}) = {zero}"
    return (
        _MSG_LIGHT.format(summary=f"CASE WHEN m.role = 'assistant' THEN {summary} END"),
        _PART_LIGHT.format(
            tool=f"CASE WHEN {completed} THEN {get('p.data', 'tool')} END",
            compacted=f"CASE WHEN {completed} THEN {compacted} END",
            # Not compacted: null or 0 (``_truthy``); only then is the output needed.
            output=f"CASE WHEN {measured}{' AND p.z IS NULL' if packed else ''} "
            f"THEN {get('p.data', 'state.output')} END",
            tokens=f"CASE WHEN {measured} AND p.z IS NOT NULL "
            f"THEN {get('p.data', 'state.outputTokens')} END"
            if packed
            else "NULL",
        ),
    )


_LIGHT_SQL: dict[str, tuple[str, str]] = {
    # (``CAST``: a large part's JSON is a BLOB, which SQLite 3.45+ would read as JSONB.)
    "sqlite": _light_sql(
        lambda col, path: f"json_extract(CAST({col} AS TEXT), '$.{path}')",
        "0",
        packed=True,
    ),
    "postgresql": _light_sql(
        lambda col, path: f"({col}::jsonb #>> '{{{','.join(path.split('.'))}}}')", "'0'"
    ),
}


def _older_than(session_id: str, cursor: Key | None) -> tuple[str, list[Any]]:
    """The condition on messages ``m`` of a backwards walk: the session's, before ``cursor``."""
    if cursor is None:
        return "m.session_id = ?", [session_id]
    return "m.session_id = ? AND (m.created, m.id) < (?, ?)", [
        session_id,
        cursor.created,
        cursor.id,
    ]


_WINDOW = (
    "SELECT m.created, m.id, 0, '', m.data FROM messages m WHERE {cond} "
    "UNION ALL "
    "SELECT m.created, m.id, 1, p.id, p.data FROM messages m JOIN part_json p "
    "ON p.message_id = m.id WHERE {cond} ORDER BY 1, 2, 3, 4"
)
_PARTS_BETWEEN = (
    "SELECT p.message_id, p.id, p.data FROM messages m JOIN part_json p ON p.message_id = m.id "
    "WHERE m.session_id = ? AND (m.created, m.id) >= (?, ?) "
    "AND (m.created, m.id) <= (?, ?) ORDER BY p.message_id, p.id"
)
_NEWEST_FIRST = (
    "SELECT m.id, m.data, m.created FROM messages m WHERE {cond} "
    "ORDER BY m.created DESC, m.id DESC LIMIT ?"
)
_PART_COUNTS = (
    "SELECT message_id, count(*) FROM parts WHERE message_id IN ({ids}) GROUP BY message_id"
)


def _range(session_id: str, start: Key | None, end: Key | None) -> tuple[str, list[Any]]:
    """The condition on messages ``m`` of a window: the session's, ``start <= key < end``."""
    cond = "m.session_id = ?"
    args: list[Any] = [session_id]
    if start is not None:
        cond += " AND (m.created, m.id) >= (?, ?)"
        args += [start.created, start.id]
    if end is not None:
        cond += " AND (m.created, m.id) < (?, ?)"
        args += [end.created, end.id]
    return cond, args


async def window(
    t: Tables,
    max_bytes: int,
    session_id: str,
    start: Key | None,
    end: Key | None,
    raws: dict[str, str] | None,
) -> list[WithParts]:
    """Messages with ``start <= key < end`` and their parts, chronological; one query, at most
    ``max_bytes`` of JSON (``TooLarge``). See ``Store.window``."""
    cache = t.cache
    await fresh(t, session_id)
    # The cache's own shared messages, the same objects read after read until written (the
    # renderers remember each by its identity); with ``raws``, the rows' JSON beside them.
    if end is None and (found := cache.assembled(session_id, start, assemble_one)) is not None:
        if raws is not None:
            stored_json(*cache.stored(session_id), raws)
        return found
    version = cache.version(session_id)
    cond, args = _range(session_id, start, end)
    # One statement, so one snapshot: as two (messages, then their parts), a commit made
    # between them by another daemon on the database (a compaction's marker and summary)
    # gave parts of messages the first never saw, and a window no state ever had.
    # Each message's row (kind 0) comes before its parts (kind 1), in part id order.
    rows = await _fetch(
        t, _WINDOW.format(cond=cond), [*args, *args], _Budget(max_bytes, session_id), 4
    )
    return _assembled(t, session_id, start, end, version, rows, raws)


def _assembled(
    t: Tables,
    session_id: str,
    start: Key | None,
    end: Key | None,
    version: Any,
    rows: list[Any],
    raws: dict[str, str] | None,
) -> list[WithParts]:
    """The window ``_WINDOW``'s rows make, remembered by the cache when it runs to the end."""
    msg_rows = [(created, mid, data) for created, mid, kind, _, data in rows if kind == 0]
    parts = [(mid, pid, data) for _, mid, kind, pid, data in rows if kind == 1]
    found = assemble([(mid, data) for _, mid, data in msg_rows], parts, raws)
    if end is None:
        t.cache.put(
            session_id,
            start,
            version,
            [(Key(created, mid), data) for created, mid, data in msg_rows],
            parts,
        )
    return found


#: A window read cold whose stored JSON passes this is served as it is read (``Streamed``).
STREAM_OVER_BYTES = 4 << 20


async def stream_window(
    t: Tables, max_bytes: int, over: int, session_id: str, start: Key | None
) -> Streamed | None:
    """The window from ``start`` as a ``Streamed`` when the cache does not hold it and its
    stored JSON passes ``over`` bytes (the caller must ``aclose`` it); else None, the window
    then cached (unless a write raced with the read) for ``window`` to serve."""
    cache = t.cache
    await fresh(t, session_id)
    if cache.holds(session_id, start):
        return None
    version = cache.version(session_id)
    cond, args = _range(session_id, start, None)
    budget = _Budget(max_bytes, session_id)
    stack = AsyncExitStack()
    held = True  # until the stream is handed over
    try:
        chunks = await stack.enter_async_context(
            t.backend.stream(_WINDOW.format(cond=cond), [*args, *args])
        )
        rest = _spent(chunks, budget, 4)
        stack.push_async_callback(rest.aclose)
        rows: list[Any] = []
        async for chunk in rest:
            rows.extend(chunk)
            if budget.spent > over:
                held = False
                return Streamed(rows, rest, stack)
    finally:
        if held:
            await stack.aclose()
    _assembled(t, session_id, start, None, version, rows, None)
    return None


class Streamed:
    """A window's messages as its rows arrive, each decoded once (not through the decode
    cache) and let go with its rows once handed over: a window far larger than any model's
    (a session without limits, read cold) is never in memory whole, as JSON or as Structs."""

    def __init__(
        self, rows: list[Any], rest: AsyncGenerator[list[Any], None], stack: AsyncExitStack
    ) -> None:
        self._rows: list[Any] | None = rows
        self._messages: AsyncGenerator[tuple[WithParts, dict[str, str]], None] | None = None
        self._rest = rest  # the rows still to come, paid for from the read budget
        self._stack = stack

    def messages(self) -> AsyncGenerator[tuple[WithParts, dict[str, str]], None]:
        """Each message with its parts, chronological, and the stored JSON of those not read
        flattened (``assemble``'s ``raws``), by id. Once only; ``aclose`` ends it."""
        self._messages = self._each_message()
        return self._messages

    async def _each_message(self) -> AsyncGenerator[tuple[WithParts, dict[str, str]], None]:
        head: Any = None
        parts: list[tuple[str, str]] = []
        held, self._rows = self._rows or [], None
        held.reverse()
        chunk: list[Any] = held  # rows are popped as they are handed over, then let go
        while True:
            while chunk:
                row = chunk.pop()
                if row[2] == 0:
                    if head is not None:
                        yield uncached(head[1], head[4], parts)
                    head, parts = row, []
                else:
                    parts.append((row[3], row[4]))
            chunk = await anext(self._rest, [])
            if not chunk:
                break
            chunk.reverse()
        if head is not None:
            yield uncached(head[1], head[4], parts)

    async def aclose(self) -> None:
        self._rows = None
        if self._messages is not None:
            await self._messages.aclose()
        await self._stack.aclose()  # the rows' generator, then the statement


async def _fetch(t: Tables, sql: str, args: list[Any], budget: _Budget, data: int) -> list[Any]:
    """Rows in chunks, stopping as soon as their JSON (column ``data``) passes the read
    budget: a window too large to serve never sits in memory whole."""
    out: list[Any] = []
    async with t.backend.stream(sql, args) as chunks:
        async for chunk in _spent(chunks, budget, data):
            out.extend(chunk)
    return out


async def _spent(chunks: Chunks, budget: _Budget, data: int) -> AsyncGenerator[list[Any], None]:
    """``chunks``, each paid for from ``budget`` (its rows' JSON, column ``data``) before it
    is handed on."""
    async for chunk in chunks:
        budget.spend(sum(len(row[data]) for row in chunk))
        yield chunk


async def parts_between(t: Tables, session_id: str, first: Key, last: Key) -> Any:
    """``(message id, part id, JSON)`` of the parts of messages ``first <= key <= last``."""
    args = [session_id, first.created, first.id, last.created, last.id]
    return await t.backend.query(_PARTS_BETWEEN, args)


async def newest_first(
    t: Tables, session_id: str, end: Key | None, page: int
) -> AsyncIterator[list[WithParts]]:
    """Pages of messages walking backwards from ``end`` (exclusive); each page newest first."""
    cursor = end
    while True:
        cond, args = _older_than(session_id, cursor)
        sql = _NEWEST_FIRST.format(cond=cond)
        msgs = list(await t.backend.query(sql, [*args, page]))
        if not msgs:
            return
        oldest = Key(msgs[-1][2], msgs[-1][0])
        newest = Key(msgs[0][2], msgs[0][0])
        parts = await parts_between(t, session_id, oldest, newest)
        yield assemble([(r[0], r[1]) for r in msgs], parts)
        if len(msgs) < page:
            return
        cursor = oldest


def cached_newest_first(
    t: Tables, session_id: str
) -> tuple[Key | None, Iterator[WithParts]] | None:
    """The window the cache holds for a session, newest first, decoded as read (see
    ``Store.cached_newest_first``)."""
    cached = t.cache.newest_first(session_id)
    if cached is None:
        return None
    start, rows = cached
    msgs = (
        WithParts(
            info=cached_message(mid, data),
            parts=[cached_part(pid, raw) for pid, raw in parts],
        )
        for mid, data, parts in rows
    )
    return start, msgs


async def fresh(t: Tables, session_id: str) -> None:
    """Drop what the cache holds when another process wrote (see ``Backend.fresh``), and
    what it cannot vouch for of the session about to be read (``_verify``)."""
    await t.backend.fresh(t.cache)
    await _verify(t, session_id)


async def _verify(t: Tables, session_id: str) -> None:
    """Check the cached window's unverified messages (``WindowCache.verify``): one indexed
    count of their parts."""
    ids = t.cache.unverified(session_id)
    if not ids:
        return
    version = t.cache.version(session_id)
    rows = await rows_in(t.backend.query_point, _PART_COUNTS, ids)
    stored = {mid: int(n) for mid, n in rows}
    t.cache.verify(session_id, version, stored)


async def light_newest_first(
    t: Tables, session_id: str, end: Key | None, page: int
) -> AsyncIterator[list[LightMessage]]:
    """Pages of ``LightMessage`` walking backwards from ``end`` (exclusive), each newest
    first: what a prune decides on, computed in the database, so an output already pruned
    (or not a completed tool call's) never leaves it."""
    light: tuple[str, str] | None = _LIGHT_SQL.get(t.backend.kind)
    cursor = end
    while True:
        if light is None:  # a backend without the JSON functions: decode the rows
            async for decoded in newest_first(t, session_id, cursor, page):
                yield [_light_of(m) for m in decoded]
            return
        cond, args = _older_than(session_id, cursor)
        msgs = list(await t.backend.query(light[0].replace("{cond}", cond), [*args, page]))
        if not msgs:
            return
        oldest = Key(msgs[-1][1], msgs[-1][0])
        newest = Key(msgs[0][1], msgs[0][0])
        try:
            rows = await t.backend.query(
                light[1], [session_id, oldest.created, oldest.id, newest.created, newest.id]
            )
        except Exception:
            # A row the JSON functions refuse (nested too deep for them, written before
            # the door checked depth): decode the rows, as ``decode_stored`` makes safe.
            light = None
            continue
        yield _light_page(msgs, rows)
        if len(msgs) < page:
            return
        cursor = oldest


def _light_page(msgs: list[Any], rows: list[Any]) -> list[LightMessage]:
    """The light queries' rows as ``LightMessage``s, in the messages' order."""
    by_message: dict[str, list[LightPart]] = {}
    for mid, pid, tool, compacted, output, tokens in rows:
        light = LightPart(pid, tool, _truthy(compacted), output, tokens)
        by_message.setdefault(mid, []).append(light)
    return [
        LightMessage(Key(created, mid), role == "user", _truthy(summary), by_message.get(mid, []))
        for mid, created, role, summary in msgs
    ]
