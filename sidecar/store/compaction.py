"""Compaction records: the boundary a window starts at, the summaries' texts, and the prune
marks set in place (``Store`` delegates here; a compaction's diagnostics and the marks undone
are steering data, ``steer.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import msgspec

from sidecar.store.cache import Key
from sidecar.store.rows import (
    Tables,
    cached_part,
    decode_stored,
    kind_of,
    remembered,
    rows_in,
)
from sidecar.store.statements import PARTS_BY_IDS

# ``mark_compacted`` reads back at most this many parts on the loop (``query_point``).
INLINE_READ_BACK = 16

# Joined to one of its finished summaries (not ``EXISTS``), whose id is then watched with
# the marker's and its compaction part's (``WindowCache.remember``).
_BOUNDARY = (
    "SELECT m.created, m.id, p.data, p.id, s.id "
    "FROM parts p JOIN messages m ON m.id = p.message_id "
    "JOIN messages s ON s.parent_id = m.id AND s.summary_ok = 1 AND s.session_id = m.session_id "
    "WHERE p.session_id = ? AND p.type = 'compaction' AND m.role = 'user'{before} "
    "ORDER BY m.created DESC, m.id DESC LIMIT 1"
)
_BEFORE = " AND (s.created, s.id) < (?, ?) AND (m.created, m.id) < (?, ?)"
_SUMMARIES = (
    "SELECT id FROM messages WHERE session_id = ? AND summary_ok = 1 "
    "ORDER BY created DESC, id DESC LIMIT ?"
)
_TEXTS = "SELECT data FROM parts WHERE message_id = ? AND type = 'text' ORDER BY id"


class Boundary(NamedTuple):
    """The latest compaction marker whose summary finished without error."""

    marker: Key
    tail_start_id: str | None


class _Tail(msgspec.Struct):
    tailStartID: str | None = None  # the stored JSON's names: the daemon's (collapse),
    tail_start_id: str | None = None  # OpenCode >= 1.14's


class _Text(msgspec.Struct):
    text: str = ""


_tail_decoder = msgspec.json.Decoder(_Tail)
_text_decoder = msgspec.json.Decoder(_Text)


def _tail_start(data: str) -> str | None:
    """A compaction part's ``tailStartID`` or ``tail_start_id`` (decoded here: the same on
    every backend)."""
    got = decode_stored(_tail_decoder, data)
    tail: str | None = got.tailStartID or got.tail_start_id
    return tail


def _text_of(data: str) -> str:
    text: str = decode_stored(_text_decoder, data).text
    return text


async def boundary(t: Tables, session_id: str, before: Key | None) -> Boundary | None:
    """The latest marker (before ``before``, if given) with a finished, error-free summary.
    Asked several times a turn (each window read, each check): ``remembered``, the rows it
    is made of (its marker, its summary, its compaction part) watched."""

    async def read() -> tuple[Boundary | None, tuple[str, ...]]:
        args: list[Any] = [session_id]
        if before is not None:
            sql = _BOUNDARY.format(before=_BEFORE)
            args += [before.created, before.id, before.created, before.id]
        else:
            sql = _BOUNDARY.format(before="")
        rows = await t.backend.query_point(sql, args)
        if not rows:
            return None, ()
        created, mid, data, pid, summary = rows[0]
        return Boundary(Key(created, mid), _tail_start(data)), (mid, pid, summary)

    return await remembered(t, session_id, ("boundary", before), read)


async def summary_texts(t: Tables, session_id: str, limit: int) -> list[str]:
    """Texts of the newest ``limit`` finished summaries, oldest first."""
    rows = await t.backend.query(_SUMMARIES, (session_id, limit))
    texts: list[str] = []
    for (mid,) in reversed(list(rows)):
        parts = await t.backend.query(_TEXTS, (mid,))
        texts.append("\n".join(text for (data,) in parts if (text := _text_of(data))))
    return texts


async def mark_compacted(t: Tables, part_ids: Sequence[str], ts: int) -> list[str]:
    """Set ``state.time.compacted`` in place (concurrent edits and unknown fields are kept)
    for completed tool outputs; returns the updated parts' JSON."""
    if not part_ids:
        return []
    db = t.backend
    await db.mark_compacted(part_ids, ts)
    # A turn's prune marks a part or two: read them back on the loop (a thread hop costs
    # more than the read); a large prune reads off the loop.
    read = db.query_point if len(part_ids) <= INLINE_READ_BACK else db.query
    got = await rows_in(read, PARTS_BY_IDS, part_ids)
    for pid, raw in got:
        part = cached_part(pid, raw)
        t.cache.part_written(part.session_id, part.message_id, part.id, raw, kind_of(part))
    return [raw for _, raw in got]
