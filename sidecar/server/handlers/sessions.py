"""``session/create|get|list|delete|messages|subscribe|unsubscribe``."""

from __future__ import annotations

from sidecar.errors import Conflict, ErrorCode, SidecarError, UnknownSession
from sidecar.model.ids import new_id, now_ms
from sidecar.model.rpc import (
    MessagesPage,
    SessionCreateParams,
    SessionList,
    SessionListParams,
    SessionMessagesParams,
    SessionRef,
)
from sidecar.model.session import Session, SessionTime
from sidecar.server.context import Context
from sidecar.server.hub import ALL


def _cursor_error(exc: ValueError) -> SidecarError:
    return SidecarError(f"invalid params: $.cursor: {exc}", ErrorCode.INVALID_PARAMS)


async def create(ctx: Context, p: SessionCreateParams) -> Session:
    store = ctx.store
    if p.parent_id is not None:
        await store.require_session(p.parent_id)
    now = now_ms()
    session = Session(
        id=p.id or new_id("ses"),
        title=p.title if p.title is not None else "",
        parent_id=p.parent_id,
        directory=p.directory,
        time=SessionTime(created=now, updated=now),
    )
    if p.id is not None and await store.get_session(p.id) is not None:
        raise Conflict(f"session {p.id!r} already exists")
    await ctx.engine.writes.put_session(session)
    ctx.subscribe(session.id)
    return session


async def get(ctx: Context, p: SessionRef) -> Session:
    return await ctx.store.require_session(p.session_id)


async def list_(ctx: Context, p: SessionListParams) -> SessionList:
    try:
        sessions, nxt = await ctx.store.list_sessions(p.limit, p.cursor)
    except ValueError as exc:
        raise _cursor_error(exc) from None
    return SessionList(sessions=sessions, next_cursor=nxt)


async def delete(ctx: Context, p: SessionRef) -> None:
    if not await ctx.engine.writes.delete_session(p.session_id):
        raise UnknownSession(p.session_id)
    return None


async def messages(ctx: Context, p: SessionMessagesParams) -> MessagesPage:
    await ctx.store.require_session(p.session_id)
    try:
        page, nxt = await ctx.store.page_messages(p.session_id, p.limit, p.cursor, p.part_limit)
    except ValueError as exc:
        raise _cursor_error(exc) from None
    return MessagesPage(messages=page, next_cursor=nxt)


async def subscribe(ctx: Context, p: SessionRef) -> None:
    if p.session_id != ALL:
        await ctx.store.require_session(p.session_id)
    ctx.subscribe(p.session_id)
    return None


async def unsubscribe(ctx: Context, p: SessionRef) -> None:
    ctx.unsubscribe(p.session_id)
    return None
