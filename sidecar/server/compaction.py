"""``session/context|overflow|prune|compact|fork|revert|unrevert``: thin calls into the engine."""

from __future__ import annotations

from sidecar.engine import delta
from sidecar.engine.compactor import Request
from sidecar.errors import SidecarError
from sidecar.model.rpc import (
    CompactResult,
    ContextResult,
    OverflowResult,
    PruneResult,
    SessionCompactParams,
    SessionContextParams,
    SessionForkParams,
    SessionOverflowParams,
    SessionRef,
    SessionRevertParams,
)
from sidecar.model.session import Session
from sidecar.protocol.codes import ErrorCode
from sidecar.server.connection import Connection
from sidecar.server.routes import route


@route("session/context", SessionContextParams)
async def context(conn: Connection, p: SessionContextParams) -> ContextResult:
    engine = conn.engine
    result = await engine.context(
        p.session_id, p.format, conn.config.current, wait=p.wait, fit=p.fit
    )
    return delta.REVISIONS.serve(p.session_id, result, p.since)


@route("session/overflow", SessionOverflowParams)
async def overflow(conn: Connection, p: SessionOverflowParams) -> OverflowResult:
    engine = conn.engine
    if p.session_id is not None:
        return await engine.overflow_session(p.session_id, conn.config.current, wait=p.wait)
    if p.tokens is None or p.model is None:
        raise SidecarError(
            "invalid params: give `$.sessionID`, or both `$.tokens` and `$.model.limit`",
            ErrorCode.INVALID_PARAMS,
        )
    return await engine.overflow_of(p.tokens, p.model.limit, conn.config.current)


@route("session/idle", SessionRef)
async def idle(conn: Connection, p: SessionRef) -> None:
    """Extension: returns once automatic work started by earlier writes has finished."""
    await conn.store.require_session(p.session_id)
    await conn.engine.idle(p.session_id)
    return None


@route("session/prune", SessionRef, writes=True)
async def prune(conn: Connection, p: SessionRef) -> PruneResult:
    return await conn.engine.prune(p.session_id, conn.config.current)


@route("session/compact", SessionCompactParams, writes=True)
async def compact(conn: Connection, p: SessionCompactParams) -> CompactResult:
    conn.hub.subscribe(conn, p.session_id)
    return await conn.engine.compact(
        Request(
            session_id=p.session_id,
            auto=p.auto,
            model=p.model,
            instructions=p.instructions,
            progress_token=p.work_done_token,
        ),
        conn.config.current,
    )


@route("session/fork", SessionForkParams, writes=True)
async def fork(conn: Connection, p: SessionForkParams) -> Session:
    forked = await conn.engine.fork(p.session_id, p.message_id)
    conn.hub.subscribe(conn, forked.id)
    return forked


@route("session/revert", SessionRevertParams, writes=True)
async def revert(conn: Connection, p: SessionRevertParams) -> Session:
    return await conn.engine.revert(p.session_id, p.message_id, p.part_id)


@route("session/unrevert", SessionRef, writes=True)
async def unrevert(conn: Connection, p: SessionRef) -> Session:
    return await conn.engine.unrevert(p.session_id)
