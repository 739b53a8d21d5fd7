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
from sidecar.server.connection import Connection
from sidecar.server.hub import ALL
from sidecar.server.routes import route


def _cursor_error(exc: ValueError) -> SidecarError:
    return SidecarError(f"invalid params: $.cursor: {exc}", ErrorCode.INVALID_PARAMS)


@route("session/create", SessionCreateParams, writes=True)
async def create(conn: Connection, p: SessionCreateParams) -> Session:
    store = conn.store
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
    await store.put_session(session)
    conn.hub.subscribe(conn, session.id)
    return session


@route("session/get", SessionRef)
async def get(conn: Connection, p: SessionRef) -> Session:
    return await conn.store.require_session(p.session_id)


@route("session/list", SessionListParams)
async def list_(conn: Connection, p: SessionListParams) -> SessionList:
    try:
        sessions, nxt = await conn.store.list_sessions(p.limit, p.cursor)
    except ValueError as exc:
        raise _cursor_error(exc) from None
    return SessionList(sessions=sessions, next_cursor=nxt)


@route("session/delete", SessionRef, writes=True)
async def delete(conn: Connection, p: SessionRef) -> None:
    if not await conn.store.delete_session(p.session_id):
        raise UnknownSession(p.session_id)
    return None


@route("session/messages", SessionMessagesParams)
async def messages(conn: Connection, p: SessionMessagesParams) -> MessagesPage:
    await conn.store.require_session(p.session_id)
    try:
        page, nxt = await conn.store.page_messages(p.session_id, p.limit, p.cursor, p.part_limit)
    except ValueError as exc:
        raise _cursor_error(exc) from None
    return MessagesPage(messages=page, next_cursor=nxt)


@route("session/subscribe", SessionRef, writes=True)
async def subscribe(conn: Connection, p: SessionRef) -> None:
    if p.session_id != ALL:
        await conn.store.require_session(p.session_id)
    conn.hub.subscribe(conn, p.session_id)
    return None


@route("session/unsubscribe", SessionRef, writes=True)
async def unsubscribe(conn: Connection, p: SessionRef) -> None:
    conn.hub.unsubscribe(conn, p.session_id)
    return None
