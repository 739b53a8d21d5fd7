"""Large tool outputs stored compressed on SQLite (``parts.z``, since migration 8).

A tool call's part is most of a store's bytes (a file read, a command's output); as JSON it
compresses 2-4x. A tool part whose JSON is ``PACK_BYTES`` or more is stored as its JSON
deflated (the zlib format, level 1: the cheapest, most of the gain) in ``z``, and ``data`` holds a
light JSON of what SQL reads in place (its tool, status and times, its output's estimate).
Reads see the part's JSON byte for byte through the ``part_json`` view
(``sidecar_inflate(z)``, which never inflates past ``LARGE_BYTES``): the bytes served are the
bytes written. The history index reads its text the same way; a prune's walk reads the
estimate; a prune's mark is kept in the light JSON and set on the inflated JSON as it is
served (``json_set``, as on a plain row, so a marked part is served the same bytes whichever
way it was stored).

The row is rewritten for the writer in one place (``pack_rows``, run by ``commit._execute``):
nothing above the SQLite backend knows. A part of ``LARGE_BYTES`` or more keeps its own path
(written in place from the frame's buffers; compressing it would hold it whole again), and
one of that size given as text (an import's) is stored plain too.
PostgreSQL compresses such values itself (TOAST, ``pglz``), where its SQL can still read them.

Every connection that reads ``part_json`` or the history view, or writes ``parts`` (its
triggers read the view's text), needs the function: ``register``.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import msgspec

from sidecar.model.buffers import LARGE_BYTES
from sidecar.model.tokens import estimate
from sidecar.store.statements import SET_PART_DATA, UPSERT_PART, upsert_part

#: The deflate that writes and reads ``z``: ISA-L's (``isal``), which writes the same zlib
#: format as the stdlib's, about 3x faster at level 1 and a little smaller (a 60 KB tool
#: output: 138 us against 457), and inflates in about half the time; the stdlib's where
#: ISA-L's wheel is not installed. Either reads what the other wrote.
CODEC: ModuleType
try:
    from isal import isal_zlib as CODEC
except ImportError:  # pragma: no cover - a platform without ISA-L's wheel
    CODEC = zlib

#: A tool part's JSON of this many characters or more is stored deflated.
PACK_BYTES = 4096
#: Kept deflated only when that saves at least an eighth (random output does not compress).
_WORTH = 7 / 8

#: ``UPSERT_PART`` with ``z`` (row: id, message id, session id, type, data, z).
UPSERT_PACKED = upsert_part("?", z="?")
#: ``SET_PART_DATA`` with ``z`` (row: data, z, id).
SET_PACKED = "UPDATE parts SET data = ?, z = ? WHERE id = ?"


class _Tool(msgspec.Struct):
    """What the light JSON keeps of a tool part (``state`` decoded as it is)."""

    tool: Any = None
    state: dict[str, Any] = {}


_decode_tool = msgspec.json.Decoder(_Tool)


def packed(data: Any) -> tuple[str, bytes] | None:
    """``(light JSON, deflated JSON)`` of a tool part's JSON ``data``, or None where it is
    stored as it is (short, not a tool part's shape, or it would not shrink).

    The light JSON holds what SQL reads in place: the tool, the status, the times, and the
    output's token estimate (``outputTokens``), which a prune's walk reads instead of
    inflating the output every turn."""
    if not isinstance(data, str) or len(data) < PACK_BYTES:
        return None
    raw = data.encode()
    if len(raw) >= LARGE_BYTES:  # (what is inflated stays bounded: ``functions``)
        return None
    deflated = CODEC.compress(raw, 1)
    if len(deflated) > len(raw) * _WORTH:
        return None
    try:
        part = _decode_tool.decode(raw)
    except msgspec.DecodeError:  # not this shape: a row SQL reads as it is
        return None
    output = part.state.get("output")
    state: dict[str, Any] = {"status": part.state.get("status")}
    if "time" in part.state:  # (absent, a mark's ``json_set`` makes it, as in the JSON)
        state["time"] = part.state["time"]
    state["outputTokens"] = estimate(output) if isinstance(output, str) else None
    light = {"type": "tool", "tool": part.tool, "state": state}
    return _encoder.encode(light).decode(), deflated


_encoder = msgspec.json.Encoder()


def _upsert_row(row: Sequence[Any]) -> tuple[Any, ...]:
    both = packed(row[4]) if row[3] == "tool" else None
    return (*row, None) if both is None else (*row[:4], *both)


def _set_row(row: Sequence[Any]) -> tuple[Any, ...]:
    # Only a tool part's JSON is ever patched in Python (a prune's unmark).
    both = packed(row[0])
    return (row[0], None, row[1]) if both is None else (*both, row[1])


#: The statements the writer runs in another form on SQLite, and how each row is rewritten.
PACKED: dict[str, tuple[str, Callable[[Sequence[Any]], tuple[Any, ...]]]] = {
    UPSERT_PART: (UPSERT_PACKED, _upsert_row),
    SET_PART_DATA: (SET_PACKED, _set_row),
}


def pack_rows(sql: str, rows: Sequence[Sequence[Any]]) -> tuple[str, Sequence[Sequence[Any]]]:
    """The statement and rows the writer runs for ``sql`` (itself, unless it writes parts)."""
    packing = PACKED.get(sql)
    if packing is None:
        return sql, rows
    return packing[0], [packing[1](row) for row in rows]


def register(conn: sqlite3.Connection) -> None:
    """Give ``conn`` the SQL functions the schema's views and triggers call."""
    for name, func in functions().items():
        conn.create_function(name, 1, func, deterministic=True)


def functions() -> dict[str, Callable[..., Any]]:
    """The function (``sidecar_inflate``), each connection its own: it remembers its last
    result, since one row's text is read by several ``json_extract`` of the same
    expression."""
    last: list[Any] = [None, None]

    def inflate(z: bytes) -> str:
        if z != last[0]:
            # Never more than a part the daemon compresses: a damaged or hostile file's
            # row fails its read instead of being inflated whole.
            inflater = CODEC.decompressobj()
            raw = inflater.decompress(z, LARGE_BYTES)
            if inflater.unconsumed_tail or not inflater.eof:
                raise ValueError(f"a compressed part inflates past {LARGE_BYTES} bytes")
            last[0], last[1] = z, raw.decode()
        text: str = last[1]
        return text

    return {"sidecar_inflate": inflate}


def data_of(row: str, *, text: bool = False) -> str:
    """The ``data`` column of the ``parts`` row ``row`` as SQL (``text``: read as text, since
    a large part's is a BLOB, which SQLite 3.45 and later would read as JSONB)."""
    return f"CAST({row}.data AS TEXT)" if text else f"{row}.data"


def json_of(row: str, *, text: bool = False) -> str:
    """The JSON of the ``parts`` row ``row`` as SQL, a packed row's as it was deflated (its
    prune mark left out: what the history index reads)."""
    data = data_of(row, text=text)
    return f"CASE WHEN {row}.z IS NULL THEN {data} ELSE sidecar_inflate({row}.z) END"


def served_json(row: str) -> str:
    """The JSON of the ``parts`` row ``row`` as SQL, as it is served (``part_json``): a packed
    row's with the prune mark its light JSON holds (``$.mark``) set as ``MARK_COMPACTED`` sets
    a plain row's, so it is served the same bytes either way."""
    return (
        f"CASE WHEN {row}.z IS NULL THEN {row}.data "
        f"WHEN json_extract({row}.data, '$.mark') IS NULL THEN sidecar_inflate({row}.z) "
        f"ELSE json_set(sidecar_inflate({row}.z), '$.state.time.compacted', "
        f"json_extract({row}.data, '$.mark')) END"
    )


#: A prune's mark (``SqliteBackend.mark_compacted``): a plain row's JSON patched in SQL, so
#: concurrent edits and unknown fields are kept; a packed row's light JSON only (its
#: ``state.time.compacted`` for the light query, ``$.mark`` for ``served_json``), where
#: inflating, patching and deflating the whole output again cost a prune most of its time.
MARK_COMPACTED = (
    "UPDATE parts SET data = CASE WHEN z IS NULL "
    "THEN json_set(CAST(data AS TEXT), '$.state.time.compacted', ?1) "
    "ELSE json_set(data, '$.state.time.compacted', ?1, '$.mark', ?1) END "
    "WHERE id = ?2 AND type = 'tool' "
    "AND json_extract(CAST(data AS TEXT), '$.state.status') = 'completed'"
)
