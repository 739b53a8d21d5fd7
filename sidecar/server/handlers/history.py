"""``history/search|expand``: the whole stored history of a session, pruned outputs and the
messages behind summaries included (the window only ever drops them from view)."""

from __future__ import annotations

from sidecar.errors import InvalidParams, UnknownMessage, UnknownPart
from sidecar.model.messages import UserMessage
from sidecar.model.rpc import (
    HistoryExpandParams,
    HistoryExpandResult,
    HistoryHit,
    HistorySearchParams,
    HistorySearchResult,
)
from sidecar.server.context import Context
from sidecar.store.cache import Key
from sidecar.store.history import part_content

ALL = "*"


async def search(ctx: Context, p: HistorySearchParams) -> HistorySearchResult:
    store = ctx.store
    session_id = None if p.session_id == ALL else p.session_id
    if session_id is not None:
        await store.require_session(session_id)
    if not p.query.strip():
        raise InvalidParams("invalid params: $.query: must not be empty")
    before: Key | None = None
    if p.before is not None:
        found = await store.get_message(p.before)
        if found is None or (session_id is not None and found[0].session_id != session_id):
            raise UnknownMessage(p.before)
        before = Key(found[0].time.created, found[0].id)
    hits = await store.search_history(session_id, p.query, p.limit, before, p.kinds)
    return HistorySearchResult(
        hits=[
            HistoryHit(
                session_id=sid,
                message_id=mid,
                part_id=pid,
                role=role,
                tool=tool,
                time=created,
                snippet=snippet,
                score=score,
            )
            for sid, mid, pid, role, tool, created, snippet, score in hits
        ]
    )


async def expand(ctx: Context, p: HistoryExpandParams) -> HistoryExpandResult:
    store = ctx.store
    anywhere = p.session_id == ALL  # message ids are unique across sessions
    if not anywhere:
        await store.require_session(p.session_id)
    found = await store.get_message(p.message_id)
    if found is None or (not anywhere and found[0].session_id != p.session_id):
        raise UnknownMessage(p.message_id)
    info = found[0]
    rows = await store.part_rows(p.message_id)
    if p.part_id is not None:
        rows = [(pid, data) for pid, data in rows if pid == p.part_id]
        if not rows:
            raise UnknownPart(p.part_id)
        content = part_content(rows[0][1]) or ""
    else:
        pieces = []
        for pid, data in rows:
            text = part_content(data)
            if text is not None:
                pieces.append(f"[part {pid}]\n{text}")
        content = "\n\n".join(pieces)
    total = len(content)
    end = min(total, p.offset + p.max_chars)
    return HistoryExpandResult(
        message_id=p.message_id,
        part_id=p.part_id,
        role="user" if isinstance(info, UserMessage) else "assistant",
        content=content[p.offset : end],
        offset=p.offset,
        total=total,
        next_offset=end if end < total else None,
    )
