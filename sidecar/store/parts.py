"""Parts: their rows written, read by id and removed (``Store`` delegates here); the prune
mark a re-sent output keeps (``prune_mark_of``)."""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from sidecar.model.buffers import Shared
from sidecar.model.parts import Part, ToolCompleted, ToolPart
from sidecar.store.backend import Done
from sidecar.store.rows import (
    PartKey,
    Tables,
    Write,
    decode_part,
    decode_stored,
    part_error,
    part_row,
    submit_then,
)
from sidecar.store.statements import PART_DATA, UPSERT_PART

_DELETE_PART = "DELETE FROM parts WHERE id = ? AND message_id = ? AND session_id = ?"
#: ``(part id, JSON)`` of a message's parts, in order (``part_rows``, ``steer``).
PART_ROWS = "SELECT id, data FROM part_json WHERE message_id = ? ORDER BY id"


def _part_op(t: Tables, part: Part | PartKey, raw: bytes | str | Shared) -> Write:
    if isinstance(raw, Shared):
        if raw.large:
            head = part_row(part, "")[:-1]
            statements = t.backend.large_part(head, raw)
            if statements is not None:
                # The cache would need a copy: the session's next read loads the row.
                return statements, lambda _: t.cache.invalidate(part.session_id)
        raw = raw.text()
    row = part_row(part, raw)
    return [(UPSERT_PART, [row])], functools.partial(_part_written, t, part, row)


def _part_written(t: Tables, part: Part | PartKey, row: tuple[Any, ...], counts: list[int]) -> None:
    if counts[0] > 0:
        t.cache.part_written(part.session_id, part.message_id, part.id, row[-1], row[3])
    else:  # merged with others: which rows applied is unknown
        t.cache.invalidate(part.session_id)


async def put_part(t: Tables, part: Part, raw: bytes | str) -> None:
    statements, written = _part_op(t, part, raw)
    written(await t.backend.submit(statements, on_integrity=part_error(part)))


def put_part_then(
    t: Tables, part: Part | PartKey, raw: bytes | str | Shared, then: Done[None]
) -> None:
    submit_then(t.backend, functools.partial(_part_op, t, part, raw), part_error(part), then)


async def get_part(t: Tables, part_id: str) -> tuple[Part, str] | None:
    if "\x00" in part_id:
        return None
    rows = await t.backend.query(PART_DATA, (part_id,))
    return (decode_part(rows[0][0]), rows[0][0]) if rows else None


async def remove_part(t: Tables, session_id: str, message_id: str, part_id: str) -> bool:
    counts = await t.backend.submit(
        [(_DELETE_PART, [(part_id, message_id, session_id)])], needs_counts=True
    )
    if counts[0]:
        t.cache.part_removed(session_id, message_id, part_id)
    return counts[0] > 0


async def part_rows(t: Tables, message_id: str) -> list[tuple[str, str]]:
    rows = await t.backend.query(PART_ROWS, (message_id,))
    return [(r[0], r[1]) for r in rows]


class _MarkTime(msgspec.Struct):
    compacted: int | None = None


class _MarkState(msgspec.Struct):
    status: str = ""
    output: str | None = None
    time: _MarkTime | None = None


class _Marked(msgspec.Struct):
    """What ``prune_mark_of`` reads of a stored part (the stored JSON's names)."""

    type: str = ""
    messageID: str = ""
    state: _MarkState | None = None


_mark_decoder = msgspec.json.Decoder(_Marked)


async def prune_mark_of(t: Tables, part: Part) -> int | None:
    """The stored part's ``state.time.compacted`` when it has one and the same output."""
    if not isinstance(part, ToolPart) or not isinstance(part.state, ToolCompleted):
        return None
    if "\x00" in part.id:
        return None
    rows = await t.backend.query_point(PART_DATA, (part.id,))
    if not rows:
        return None
    try:  # only the fields needed: a sixth of a whole part's decode
        old = decode_stored(_mark_decoder, rows[0][0])
    except (msgspec.DecodeError, msgspec.ValidationError):  # a row no write would make now
        return None
    state = old.state
    if (
        old.type == "tool"
        and old.messageID == part.message_id
        and state is not None
        and state.status == "completed"
        and state.time is not None
        and state.time.compacted
        and state.output == part.state.output
    ):
        return state.time.compacted
    return None
