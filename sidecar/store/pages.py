"""History pages: ``session/messages`` (``page_messages``) and the whole history as stored
(``page_raw``, what a fork copies). ``Store`` delegates here.

A page ends at its message limit, its part limit or the reply's byte budget, whichever comes
first; memory follows the page, not the history (rows stream and reading stops where the page
ends).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from sidecar.errors import TooLarge
from sidecar.model.rpc import StoredMessage
from sidecar.store.cache import Key, PageCursor
from sidecar.store.rows import Tables, rows_in, served
from sidecar.store.windows import parts_between

# A ``session/messages`` page holds at most this many messages and parts (PROTOCOL.md).
MAX_PAGE_MESSAGES = 10_000
MAX_PAGE_PARTS = 10_000

_PAGE_MESSAGES = (
    "SELECT m.id, m.created, length(m.data) FROM messages m WHERE {cond} "
    "ORDER BY m.created, m.id LIMIT ?"
)
_PAGE_PARTS = (
    "SELECT p.message_id, p.id, p.data FROM messages m JOIN part_json p "
    "ON p.message_id = m.id WHERE {cond} AND (m.created, m.id) <= (?, ?) "
    "AND (m.id != ? OR p.id > ?) ORDER BY m.created, m.id, p.id"
)
_PAGE_INFOS = "SELECT id, data FROM messages WHERE id IN ({ids})"
_RAW_MESSAGES = (
    "SELECT m.id, m.data, m.created FROM messages m WHERE {cond} ORDER BY m.created, m.id"
)


async def page_messages(
    t: Tables,
    max_bytes: int,
    session_id: str,
    limit: int | None,
    cursor: str | None,
    part_limit: int | None,
) -> tuple[list[StoredMessage], str | None]:
    """One page of the history, chronological, as stored (see ``Store.page_messages``)."""
    start = PageCursor.parse(cursor) if cursor else None
    max_msgs = min(limit or MAX_PAGE_MESSAGES, MAX_PAGE_MESSAGES)
    max_parts = min(part_limit or MAX_PAGE_PARTS, MAX_PAGE_PARTS)
    whole = limit is None and part_limit is None  # the client expects the whole history
    cond = "m.session_id = ?"
    args: list[Any] = [session_id]
    if start is not None:
        cond += " AND (m.created, m.id) " + (">=" if start.inside else ">") + " (?, ?)"
        args += [start.key.created, start.key.id]
    # The messages' ids and sizes first: their JSON is read once the page has ended, for
    # the messages on it (a page of 10,000 parts may hold a few hundred of 10,000 listed).
    sql = _PAGE_MESSAGES.format(cond=cond)
    msgs = list(await t.backend.query(sql, [*args, max_msgs + 1]))
    more_msgs = len(msgs) > max_msgs
    msgs = msgs[:max_msgs]
    if not msgs:
        return [], None
    if more_msgs and whole:
        raise _history_too_large(session_id, max_bytes)
    last = Key(msgs[-1][1], msgs[-1][0])
    resume = (start.key.id, start.after_part or "") if start and start.inside else ("", "")
    page = _Page(msgs, max_bytes, max_parts)
    parts_args = [*args, last.created, last.id, *resume]
    await _fill(t, page, _PAGE_PARTS.format(cond=cond), parts_args, len(msgs))
    nxt = page.cursor or (PageCursor(last) if more_msgs else None)
    if nxt is not None and whole:
        # No limit asked: the client expects the whole history, so a cut is an error
        # that says how to page, never a silently partial answer.
        raise _history_too_large(session_id, max_bytes)
    rows = await rows_in(t.backend.query, _PAGE_INFOS, page.message_ids)
    infos = {mid: data for mid, data in rows}
    return page.filled(infos), (nxt.encode() if nxt is not None else None)


async def _fill(t: Tables, page: _Page, sql: str, args: list[Any], listed: int) -> None:
    """Stream the page's parts into it until it ends; if none ends it, join the rest of the
    ``listed`` messages."""
    async with t.backend.stream(sql, args) as chunks:
        async for chunk in chunks:
            for mid, pid, data in chunk:
                if not page.add_part(mid, pid, data):
                    break
            if page.cursor is not None:
                break
    if page.cursor is None:
        page.join_until(listed)


async def page_raw(
    t: Tables, session_id: str, limit: int | None, cursor: str | None
) -> tuple[list[StoredMessage], str | None]:
    """Full history, chronological, as stored; ``limit=None`` returns everything."""
    cond = "m.session_id = ?"
    args: list[Any] = [session_id]
    if cursor:
        key = Key.parse(cursor)
        cond += " AND (m.created, m.id) > (?, ?)"
        args += [key.created, key.id]
    sql = _RAW_MESSAGES.format(cond=cond)
    if limit is not None:
        sql += " LIMIT ?"
    rows = list(await t.backend.query(sql, [*args, limit + 1] if limit else args))
    more = limit is not None and len(rows) > limit
    if limit is not None:
        rows = rows[:limit]
    if not rows:
        return [], None
    first, last = Key(rows[0][2], rows[0][0]), Key(rows[-1][2], rows[-1][0])
    parts = await parts_between(t, session_id, first, last)
    by_message: dict[str, list[msgspec.Raw]] = {}
    for mid, _, data in parts:
        by_message.setdefault(mid, []).append(msgspec.Raw(data))
    out = [
        StoredMessage(info=msgspec.Raw(data), parts=by_message.get(mid, []))
        for mid, data, _ in rows
    ]
    return out, (last.cursor() if more else None)


class _Page:
    """A ``session/messages`` page filled in history order until one of its limits.

    Each message joins before its parts. When the next message or part would pass the part
    limit or the byte budget, ``cursor`` says where the next page resumes: after the last
    message joined, or inside the message being read (after its last part here; ``""`` when
    none of its parts fit, so the next page starts with it again). Messages are counted by
    their stored size here and their JSON read once the page has ended (``filled``).
    """

    def __init__(self, msgs: list[Any], budget: int, max_parts: int) -> None:
        self._msgs = msgs  # (id, created, size) rows, in order
        self._budget = budget
        self._max_parts = max_parts
        self._parts = 0
        self._joined = 0  # messages of ``msgs`` on the page
        self._last_part = ""  # of the newest message on the page
        self.message_ids: list[str] = []
        self._parts_of: list[list[msgspec.Raw]] = []
        self.cursor: PageCursor | None = None

    def join_until(self, end: int) -> bool:
        """Join ``msgs[:end]``; False (the page ends before one that does not fit)."""
        while self._joined < end:
            mid, _, size = self._msgs[self._joined]
            if size > self._budget:
                if not self.message_ids:
                    raise _too_large(f"message {mid!r}", size)
                _, created, _ = prev = self._msgs[self._joined - 1]
                self.cursor = PageCursor(Key(created, prev[0]))
                return False
            self._budget -= size
            self.message_ids.append(mid)
            self._parts_of.append([])
            self._joined += 1
            self._last_part = ""
        return True

    def add_part(self, mid: str, pid: str, data: str) -> bool:
        end = self._joined
        while end == 0 or self._msgs[end - 1][0] != mid:
            end += 1
        if not self.join_until(end):
            return False
        if self._parts >= self._max_parts or len(data) > self._budget:
            if len(data) > self._budget and not self._parts and len(self.message_ids) == 1:
                raise _too_large(f"part {pid!r}", len(data))
            _, created, _ = self._msgs[end - 1]
            self.cursor = PageCursor(Key(created, mid), self._last_part)
            return False
        self._budget -= len(data)
        self._parts_of[-1].append(served(data))
        self._parts += 1
        self._last_part = pid
        return True

    def filled(self, infos: Mapping[str, str]) -> list[StoredMessage]:
        """The page's messages with their JSON (``infos`` by id). One removed since it was
        listed is left out, with its parts (they went with it)."""
        return [
            StoredMessage(info=served(infos[mid]), parts=parts)
            for mid, parts in zip(self.message_ids, self._parts_of, strict=True)
            if mid in infos
        ]


def _history_too_large(session_id: str, budget: int) -> TooLarge:
    return TooLarge(
        f"the history of session {session_id!r} does not fit one reply (at most "
        f"{MAX_PAGE_MESSAGES} messages, {MAX_PAGE_PARTS} parts and {budget} bytes, config "
        "server.maxReplyBytes): ask with `limit` and/or `partLimit` and page on with each "
        "reply's `nextCursor` as `cursor`"
    )


def _too_large(what: str, size: int) -> TooLarge:
    return TooLarge(
        f"{what} is {size} bytes, more than a reply may hold (config server.maxReplyBytes): "
        "it cannot be read over the wire"
    )
