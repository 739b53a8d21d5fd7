"""``message/update|remove`` and ``part/update|remove``: the ingest path.

Payloads arrive as raw JSON. They are validated against the typed model, but what is stored
(and echoed back) is the client's own JSON, so fields unknown to this version survive. Only
when the daemon must fill something in (a missing id or creation time) is it re-encoded.
"""

from __future__ import annotations

import asyncio
import functools
from asyncio import Future
from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from sidecar.model.buffers import Shared
from sidecar.model.ids import new_id
from sidecar.model.messages import Message
from sidecar.model.parts import Part
from sidecar.model.rpc import (
    MessageRemoveParams,
    MessageUpdateParams,
    PartRemoveParams,
    PartUpdateParams,
)
from sidecar.server.context import Context
from sidecar.store import Done, PartKey, may_keep_prune_mark, part_key

_message_decoder = msgspec.json.Decoder(Message)
_part_decoder = msgspec.json.Decoder(Part)
_dict_decoder = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()


def reroot(exc: msgspec.ValidationError, field: str) -> msgspec.ValidationError:
    """Make msgspec's path relative to the request params (``$.message.role``)."""
    text = str(exc)
    if "`$" in text:
        return msgspec.ValidationError(text.replace("`$", f"`$.{field}"))
    return msgspec.ValidationError(f"{text} - at `$.{field}`")


def _decode(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw, field: str) -> Any:
    """``raw`` decoded; a validation error names its path below the params' ``field``."""
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise reroot(exc, field) from None


def decode_message(raw: msgspec.Raw) -> Message:
    message: Message = _decode(_message_decoder, raw, "message")
    return message


def decode_part(raw: msgspec.Raw) -> Part:
    part: Part = _decode(_part_decoder, raw, "part")
    return part


def message_update(
    ctx: Context, p: MessageUpdateParams, done: Annotated[Done[Any], Message]
) -> Future[None] | None:
    """Deferred like ``part/update``, so a part pipelined behind its message queues behind it.

    Only an update of a known id that leaves out ``time.created`` must read first (the stored
    time is kept); it returns the task that will queue the write, which the connection's later
    requests wait for.
    """
    info = decode_message(p.message)
    raw = bytes(p.message)
    if info.id and not info.time.created:
        return asyncio.ensure_future(_update_keeping_created(ctx, info, raw, done))
    if not info.id or not info.time.created:
        data = _dict_decoder.decode(raw)
        if not info.id:
            info.id = data["id"] = new_id("msg")
        if not info.time.created:
            info.time.created = ctx.engine.next_time(info.session_id)
            data["time"] = {**(data.get("time") or {}), "created": info.time.created}
        raw = _encoder.encode(data)
    _store_message(ctx, info, raw, done)
    return None


async def _update_keeping_created(ctx: Context, info: Message, raw: bytes, done: Done[Any]) -> None:
    try:
        known = await ctx.store.message_key(info.id)
        data = _dict_decoder.decode(raw)
        info.time.created = known.created if known else ctx.engine.next_time(info.session_id)
        data["time"] = {**(data.get("time") or {}), "created": info.time.created}
        raw = _encoder.encode(data)
    except Exception as exc:
        done(None, exc)
        return
    await _answered(functools.partial(_store_message, ctx, info, raw), done)


async def _answered(queue: Callable[[Done[Any]], None], done: Done[Any]) -> None:
    """``queue(reply)`` queues a write read first; return once it is answered, so that the
    connection's later requests, held behind this task, follow it."""
    answered = asyncio.get_running_loop().create_future()

    def reply(result: Any, exc: BaseException | None) -> None:
        done(result, exc)
        answered.set_result(None)

    queue(reply)
    await answered


def _store_message(ctx: Context, info: Message, raw: bytes, done: Done[Any]) -> None:
    """Through the engine's write door: once committed the writer is subscribed to the
    session, everyone subscribed hears ``message/updated`` (the writer too, unless it
    declared ``echo`` false), then the reply; else only the error reply."""
    ctx.engine.writes.put_message(info, raw, ctx.config.current, done, ctx)


def part_update(
    ctx: Context, p: PartUpdateParams, done: Annotated[Done[Any], Part]
) -> Future[None] | None:
    """The hot path (streamed parts): answered from the store's commit callback, so a request
    costs no task, and the parts of one read share one commit.

    The part's JSON is never copied on the way but once, into the ``str`` of its row: the
    reply and every ``part/updated`` send the request's own bytes (``Shared``), with the id
    the daemon gave it spliced in front (``_with_id``), so a large part costs its frame and
    its row, not a copy per frame and per step.

    Only a completed tool output without ``time.compacted`` must read first: a pruned one
    written again with the same output keeps its mark (``Store.prune_mark_of``). It returns
    the task that will queue the write, which the connection's later requests wait for.
    """
    decoded = decode_part(p.part)
    view = memoryview(p.part)  # a slice of the frame: ``msgspec.Raw`` does not copy
    if decoded.id and may_keep_prune_mark(decoded):
        return asyncio.ensure_future(_update_keeping_mark(ctx, decoded, view, done))
    # Validated, then only its ids kept: the Struct (a copy of its text) is gone before the
    # row's ``str`` is made.
    part = part_key(decoded)
    del decoded
    if part.id:
        _store_part(ctx, part, Shared(view), done)
    else:
        part = part._replace(id=new_id("prt"))
        _store_part(ctx, part, _with_id(view, part.id), done)
    return None


async def _update_keeping_mark(ctx: Context, part: Part, view: memoryview, done: Done[Any]) -> None:
    try:
        await ctx.store.barrier()  # the writes queued before this one (its own earlier ones)
        mark = await ctx.store.prune_mark_of(part)
        stored = Shared(view)
        if mark:
            data = _dict_decoder.decode(view)
            state = data["state"]
            state["time"] = {**(state.get("time") or {}), "compacted": mark}
            stored = Shared(_encoder.encode(data))
    except Exception as exc:
        done(None, exc)
        return
    await _answered(functools.partial(_store_part, ctx, part_key(part), stored), done)


def _store_part(ctx: Context, part: PartKey, stored: Shared, done: Done[Any]) -> None:
    """Through the engine's write door (the turn is still being written: its clock is
    touched); once committed: subscribe, notify, reply. A ``Shared`` is encoded as the Raw it
    holds, in ``part/updated`` and in the reply; the row is written from its buffers, and a
    large part is relayed to other daemons by its id: never copied."""
    stored.part_id = part.id
    ctx.engine.writes.put_part(part, stored, stored, done, ctx)


class _Id(msgspec.Struct):
    """An object's ``id`` key, if it has one (its other keys skipped, not decoded)."""

    id: Any = msgspec.UNSET


_id_decoder = msgspec.json.Decoder(_Id)


def _with_id(view: memoryview, ident: str) -> Shared:
    """The object ``view`` with ``"id": ident``: spliced in front when it has no ``id`` key,
    the client's other bytes untouched; an ``id`` key it has (``""``, ``null``) is replaced
    in a re-encoding of the whole object."""
    if _id_decoder.decode(view).id is msgspec.UNSET:
        head = b'{"id":' + _encoder.encode(ident)
        rest = view[1:]
        return Shared(head + (b"," if bytes(rest[:64]).lstrip()[:1] != b"}" else b""), rest)
    data = _dict_decoder.decode(view)
    data["id"] = ident
    return Shared(_encoder.encode(data))


async def message_remove(ctx: Context, p: MessageRemoveParams) -> None:
    await ctx.engine.writes.remove_message(p.session_id, p.message_id)
    return None


async def part_remove(ctx: Context, p: PartRemoveParams) -> None:
    await ctx.engine.writes.remove_part(p.session_id, p.message_id, p.part_id)
    return None
