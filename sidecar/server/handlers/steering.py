"""``part/pin``, ``session/pins``, ``session/compactions``, ``session/uncompact``: steering
compaction (PROTOCOL.md "Steering compaction")."""

from __future__ import annotations

from sidecar.model.rpc import (
    CompactionsResult,
    PartPinParams,
    Pin,
    PinsResult,
    SessionRef,
    SessionUncompactParams,
    UncompactResult,
)
from sidecar.server.context import Context


async def pin(ctx: Context, p: PartPinParams) -> None:
    await ctx.engine.pin(p.session_id, p.message_id, p.part_id, p.pinned)
    return None


async def pins(ctx: Context, p: SessionRef) -> PinsResult:
    await ctx.store.require_session(p.session_id)
    found = await ctx.store.pins(p.session_id)
    return PinsResult(pins=[Pin(message_id=m, part_id=q) for m, q in found])


async def compactions(ctx: Context, p: SessionRef) -> CompactionsResult:
    return CompactionsResult(compactions=await ctx.engine.compactions(p.session_id))


async def uncompact(ctx: Context, p: SessionUncompactParams) -> UncompactResult:
    removed = await ctx.engine.uncompact(p.session_id, p.message_id, p.restore_pruned)
    return UncompactResult(removed=removed)
