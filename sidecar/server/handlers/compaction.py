"""``session/context|breakdown|overflow|prune|compact|fork|revert|unrevert``: engine calls."""

from __future__ import annotations

from sidecar.engine.compactor import Request
from sidecar.errors import SidecarError
from sidecar.model.cpu import SPLIT
from sidecar.model.rpc import (
    BreakdownResult,
    CompactResult,
    ContextResult,
    OverflowResult,
    PruneResult,
    SessionBreakdownParams,
    SessionCompactParams,
    SessionContextParams,
    SessionForkParams,
    SessionOverflowParams,
    SessionRef,
    SessionRevertParams,
)
from sidecar.model.session import Session
from sidecar.protocol.codes import ErrorCode
from sidecar.server.context import Context


async def context(ctx: Context, p: SessionContextParams) -> ContextResult:
    return await ctx.engine.context(
        p.session_id,
        p.format,
        ctx.config.current,
        wait=p.wait,
        fit=p.fit,
        overhead_tokens=p.overhead_tokens,
        since=p.since,
        stream=True,  # the reply is only encoded
    )


async def breakdown(ctx: Context, p: SessionBreakdownParams) -> BreakdownResult:
    return await ctx.engine.breakdown(
        p.session_id, ctx.config.current, wait=p.wait, overhead=p.overhead_tokens
    )


async def overflow(ctx: Context, p: SessionOverflowParams) -> OverflowResult:
    engine = ctx.engine
    if p.session_id is not None:
        return await engine.overflow_session(p.session_id, ctx.config.current, wait=p.wait)
    if p.tokens is None or p.model is None:
        raise SidecarError(
            "invalid params: give `$.sessionID`, or both `$.tokens` and `$.model.limit`",
            ErrorCode.INVALID_PARAMS,
        )
    return await engine.overflow_of(p.tokens, p.model.limit, ctx.config.current)


async def idle(ctx: Context, p: SessionRef) -> None:
    """Extension: returns once automatic work started by earlier writes has finished."""
    await ctx.store.require_session(p.session_id)
    await ctx.engine.idle(p.session_id)
    SPLIT.report()  # ``serve --cpu-split``: a turn's work is done
    return None


async def prune(ctx: Context, p: SessionRef) -> PruneResult:
    return await ctx.engine.prune(p.session_id, ctx.config.current)


async def compact(ctx: Context, p: SessionCompactParams) -> CompactResult:
    ctx.subscribe(p.session_id)
    return await ctx.engine.compact(
        Request(
            session_id=p.session_id,
            auto=p.auto,
            model=p.model,
            instructions=p.instructions,
            progress_token=p.work_done_token,
            up_to=p.up_to,
        ),
        ctx.config.current,
    )


async def fork(ctx: Context, p: SessionForkParams) -> Session:
    forked = await ctx.engine.writes.fork(p.session_id, p.message_id)
    ctx.subscribe(forked.id)
    return forked


async def revert(ctx: Context, p: SessionRevertParams) -> Session:
    return await ctx.engine.revert(p.session_id, p.message_id, p.part_id)


async def unrevert(ctx: Context, p: SessionRef) -> Session:
    return await ctx.engine.unrevert(p.session_id)
