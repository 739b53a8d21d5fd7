"""What a stored row is, both ways, for every feature module of the store.

A message or part row is the client's JSON as given plus the columns copied out of it
(``message_row``, ``part_row``); a read decodes it once, cached by id (``cached_part``,
``assemble``). ``Tables`` is what a feature module needs of the store; ``Store`` is one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import msgspec

from sidecar.errors import (
    Conflict,
    InvalidParams,
    StoreDamaged,
    UnknownMessage,
    UnknownSession,
)
from sidecar.model.conversation import is_finished_summary
from sidecar.model.jsonguard import flatten_deep
from sidecar.model.messages import AssistantMessage, Message, UserMessage, WithParts
from sidecar.model.parts import Part, ToolCompleted, ToolPart
from sidecar.store.backend import Backend, Done, OnIntegrity, Row, Statement
from sidecar.store.cache import MISS, Decoded, WindowCache

_message_decoder = msgspec.json.Decoder(Message)
_part_decoder = msgspec.json.Decoder(Part)
T = TypeVar("T")


class Tables(Protocol):
    """What a feature module needs of the store (``Store`` is one): the backend that runs
    its SQL, and the window cache its writes keep current."""

    @property
    def backend(self) -> Backend: ...

    @property
    def cache(self) -> WindowCache: ...


async def remembered(
    t: Tables,
    sid: str,
    what: Hashable,
    read: Callable[[], Awaitable[tuple[T, Iterable[str]]]],
) -> T:
    """A point read asked several times a turn (a session's row, its boundary): served from
    what the window cache remembers until a write that can change it (``memo_version``),
    where telling that costs less than the read (``Backend.cheap_fresh``). ``read`` gives
    the value and the ids of the rows it was made of, whose every rewrite is watched."""
    if not t.backend.cheap_fresh:
        return (await read())[0]
    await t.backend.fresh(t.cache)
    found = t.cache.recall(sid, what)
    if found is not MISS:
        return cast(T, found)
    version = t.cache.memo_version(sid, what)
    value, made_of = await read()
    t.cache.remember(sid, what, version, value, made_of)
    return value


# Rows nested deeper than any frame the daemon now accepts (``server.maxDepth`` is at most
# this) were written before the door checked depth. What the daemon stored itself is never
# checked again: a row is decoded as it is, and only one whose decoding recursed too deep (such
# an old row) is decoded again with its over-deep values as null.
STORED_MAX_DEPTH = 512

is_summary_ok = is_finished_summary  # the column the boundary query reads


def shallow_json(raw: str | bytes | msgspec.Raw) -> bytes:
    """An old over-deep row's JSON with values nested past ``STORED_MAX_DEPTH`` as null: what
    a read decodes once decoding the row as it is recursed too deep (``decode_stored``)."""
    data = raw.encode() if isinstance(raw, str) else bytes(raw)
    return flatten_deep(data, STORED_MAX_DEPTH)


def decode_stored(
    decoder: msgspec.json.Decoder[T],
    raw: str | bytes | msgspec.Raw,
    flattened: set[str] | None = None,
) -> T:
    """A stored row, decoded with no check first (the door checked what the daemon stored);
    only a row older than that check can recurse too deep, and is read flattened (its id
    added to ``flattened``, when given). A row that is not what the daemon stored (a damaged
    or altered file) is ``StoreDamaged``."""
    try:
        try:
            return decoder.decode(raw)
        except RecursionError:
            row = decoder.decode(shallow_json(raw))
            if flattened is not None:
                flattened.add(row.id)  # type: ignore[attr-defined]  # messages and parts have ids
            return row
    except msgspec.DecodeError as exc:  # ValidationError too: a row the door would refuse
        raise StoreDamaged(f"a stored row cannot be read ({exc})") from None


# Ids of the old over-deep rows met so far (``decode_stored`` flattened them): served from
# their decoded Structs, not as stored, so a client decodes them too. Only such rows land here.
_flattened: set[str] = set()


#: What SQLite says (as an ``OperationalError``) when a row is not what the daemon wrote, and
#: what the reply says of it (None: SQLite's own words): a compressed part that does not
#: inflate (``sidecar_inflate`` is the only function the daemon gives SQLite), JSON that does
#: not parse. A page that is not a database's is SQLite's ``SQLITE_CORRUPT``/``SQLITE_NOTADB``:
#: a plain ``DatabaseError``.
_DAMAGE: dict[str, str | None] = {
    "user-defined function raised exception": "a compressed part does not inflate",
    "malformed JSON": None,
}


def damage_of(exc: BaseException) -> StoreDamaged | None:
    """``exc`` as ``StoreDamaged`` when it says the store holds what the daemon did not write
    (None for anything else: a bug, a lock, a full disk)."""
    if isinstance(exc, StoreDamaged):
        return exc
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.IntegrityError):
        return None
    text = str(exc)
    if type(exc) is sqlite3.DatabaseError:  # not a subclass: a lock, a full disk, too big
        return StoreDamaged(f"SQLite: {text}")
    if isinstance(exc, sqlite3.OperationalError):
        for said, meaning in _DAMAGE.items():
            if said in text:
                return StoreDamaged(f"SQLite: {meaning or text}")
    return None


def served(raw: str) -> msgspec.Raw:
    """Stored JSON as the daemon serves it: as stored (the row's own str when it can be, no
    copy: an ASCII str's data is its UTF-8), never scanned again."""
    return msgspec.Raw(raw)


def decode_message(raw: str | bytes) -> Message:
    message: Message = decode_stored(_message_decoder, raw, _flattened)
    return message


def decode_part(raw: str | bytes) -> Part:
    part: Part = decode_stored(_part_decoder, raw, _flattened)
    return part


def may_keep_prune_mark(part: Part) -> bool:
    """A completed tool output written without ``state.time.compacted``: if the stored part
    was pruned and has the same output, the write keeps its mark (``Store.prune_mark_of``)."""
    return (
        isinstance(part, ToolPart)
        and isinstance(part.state, ToolCompleted)
        and not part.state.time.compacted
        and bool(part.id)
    )


def _text(raw: bytes | str) -> str:
    return raw if isinstance(raw, str) else raw.decode()


def _nul_in(what: str, ids: Mapping[str, str | None]) -> InvalidParams:
    """Ids are columns; PostgreSQL's text cannot hold U+0000 and no client means one. Checked
    by the store on the ingest path (a plain ``in``) rather than by a pattern on the Struct (a
    regex per id field costs more than the rest of the decode); this names the field."""
    field = next(k for k, v in ids.items() if v and "\x00" in v)
    return InvalidParams(
        f"invalid params: `$.{what}.{field}` holds the character U+0000, which an id may not"
    )


def message_row(info: Message, raw: bytes | str) -> tuple[Any, ...]:
    parent = info.parent_id if isinstance(info, AssistantMessage) else None
    if "\x00" in info.id or "\x00" in info.session_id or (parent and "\x00" in parent):
        raise _nul_in("message", {"id": info.id, "sessionID": info.session_id, "parentID": parent})
    return (
        info.id,
        info.session_id,
        info.time.created,
        "user" if isinstance(info, UserMessage) else "assistant",
        parent,
        1 if is_summary_ok(info) else 0,
        _text(raw),
    )


class PartKey(NamedTuple):
    """What the store needs of a part besides its JSON: a large part's decoded Struct (its
    text, its output) need not stay alive while its row is written (``part_key``)."""

    id: str
    message_id: str
    session_id: str
    tag: Any


def part_key(part: Part) -> PartKey:
    return PartKey(part.id, part.message_id, part.session_id, kind_of(part))


def kind_of(part: Part) -> str:
    """A part's ``type`` (its row's ``type`` column)."""
    return str(type(part).__struct_config__.tag)


def part_row(part: Part | PartKey, raw: bytes | str) -> tuple[Any, ...]:
    if "\x00" in part.id or "\x00" in part.session_id or "\x00" in part.message_id:
        ids = {"id": part.id, "sessionID": part.session_id, "messageID": part.message_id}
        raise _nul_in("part", ids)
    tag = part.tag if isinstance(part, PartKey) else kind_of(part)
    return (part.id, part.message_id, part.session_id, tag, _text(raw))


#: An op's statements, and what its commit's row counts are told to (the cache's update).
Write = tuple[list[Statement], Callable[[list[int]], None]]


def message_error(info: Message) -> Callable[[Exception], Exception]:
    """What a client sees when ``info``'s row breaks an integrity rule."""

    def mapped(exc: Exception) -> Exception:
        if "sidecar:message-session" in str(exc):
            return Conflict(f"message id {info.id!r} belongs to another session")
        return UnknownSession(info.session_id)

    return mapped


def part_error(part: Part | PartKey) -> Callable[[Exception], Exception]:
    """What a client sees when ``part``'s row breaks an integrity rule."""

    def mapped(exc: Exception) -> Exception:
        text = str(exc)
        if "sidecar:part-message" in text:
            return Conflict(f"part id {part.id!r} belongs to another message")
        if "sidecar:part-session" in text:
            return InvalidParams(
                f"invalid params: `$.part.sessionID` {part.session_id!r} is not the session "
                f"of message {part.message_id!r}"
            )
        return UnknownMessage(part.message_id)

    return mapped


def submit_then(
    db: Backend, op: Callable[[], Write], on_integrity: OnIntegrity, then: Done[None]
) -> None:
    """``submit_then`` of ``op()``: a row that cannot be stored (``InvalidParams``) fails at
    once; after a commit the row counts go to the op's own callback, then ``then``."""
    try:
        statements, written = op()
    except InvalidParams as exc:
        then(None, exc)
        return

    def committed(counts: list[int], exc: BaseException | None) -> None:
        if exc is None:
            written(counts)
        then(None, exc)

    db.submit_then(statements, committed, on_integrity)


cached_part = Decoded(decode_part)
cached_message = Decoded(decode_message)


def assemble_one(mid: str, data: str, parts: list[tuple[str, str]]) -> WithParts:
    """One cached message with its parts (``WindowCache.assembled``): shared, like the Structs
    it holds, so callers must not change it (they build changed copies)."""
    return WithParts(info=cached_message(mid, data), parts=[cached_part(p, d) for p, d in parts])


def assemble(msgs: Any, parts: Any, raws: dict[str, str] | None = None) -> list[WithParts]:
    """``(id, JSON)`` messages with their ``(message id, part id, JSON)`` parts, decoded (cached
    by id); ``raws``, when given, is filled with the stored JSON of each by id."""
    by_message: dict[str, list[Part]] = {}
    for mid, pid, data in parts:
        by_message.setdefault(mid, []).append(cached_part(pid, data))
    out = [
        WithParts(info=cached_message(mid, data), parts=by_message.get(mid, []))
        for mid, data in msgs
    ]
    if raws is not None:
        stored_json(msgs, parts, raws)
    return out


def stored_json(msgs: Any, parts: Any, raws: dict[str, str]) -> None:
    """``raws`` filled with the stored JSON of each row by id, but those read flattened (their
    decoded Structs are sent instead)."""
    for _mid, pid, data in parts:
        if pid not in _flattened:
            raws[pid] = data
    raws.update((mid, data) for mid, data in msgs if mid not in _flattened)


def uncached(mid: str, data: str, parts: list[tuple[str, str]]) -> tuple[WithParts, dict[str, str]]:
    """One message with its parts decoded outside the decode cache (a window too large to
    keep, ``windows.Streamed``), and the stored JSON of each row not read flattened, by id."""
    msg = WithParts(info=decode_message(data), parts=[decode_part(d) for _, d in parts])
    raws = {pid: d for pid, d in parts if pid not in _flattened}
    if mid not in _flattened:
        raws[mid] = data
    return msg, raws


def chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


async def rows_in(
    read: Callable[[str, Sequence[Any]], Awaitable[list[Row]]],
    sql: str,
    ids: Sequence[str],
    *first: Any,
) -> list[Row]:
    """The rows of ``sql`` for ``ids``, asked 500 at a time (a statement's bound values are
    limited): ``{ids}`` in ``sql`` becomes that many placeholders, after ``first``'s."""
    out: list[Row] = []
    for chunk in chunks(list(ids), 500):
        out.extend(await read(sql.format(ids=",".join("?" * len(chunk))), [*first, *chunk]))
    return out
