"""``history/search|expand``: the whole stored history of a session, pruned outputs and the
messages behind summaries included (the window only ever drops them from view)."""

from __future__ import annotations

import unicodedata

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
from sidecar.store import Key, part_content, terms_of

ALL = "*"


async def search(ctx: Context, p: HistorySearchParams) -> HistorySearchResult:
    store = ctx.store
    limits = ctx.config.current.history
    check_query(p.query, limits.max_query_chars, limits.max_query_terms)
    session_id = None if p.session_id == ALL else p.session_id
    if session_id is not None:
        await store.require_session(session_id)
    before: Key | None = None
    if p.before is not None:
        found = await store.get_message(p.before)
        if found is None or (session_id is not None and found[0].session_id != session_id):
            raise UnknownMessage(p.before)
        before = Key(found[0].time.created, found[0].id)
    result = await store.search_history(
        session_id,
        p.query,
        p.limit,
        before,
        p.kinds,
        include_recall=p.include_recall,
        budget=limits.search_budget_ms / 1000,
    )
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
            for sid, mid, pid, role, tool, created, snippet, score in result.hits
        ],
        partial=result.partial,
    )


#: Control characters a query may hold: blanks (a pasted multi-line command), nothing else.
_BLANKS = frozenset("\t\n\r")


def check_query(query: str, max_chars: int, max_terms: int) -> None:
    """A query the index can answer within bounds, else -32602 naming what is wrong. Its
    syntax is never parsed (every term is matched literally), so only its size and its
    characters are checked."""
    if len(query) > max_chars:
        raise InvalidParams(
            f"invalid params: $.query: {len(query)} characters, over history.maxQueryChars "
            f"({max_chars})"
        )
    if not query.strip():
        raise InvalidParams("invalid params: $.query: must not be empty")
    for ch in query:
        if unicodedata.category(ch) == "Cc" and ch not in _BLANKS:
            raise InvalidParams(
                f"invalid params: $.query: holds the control character U+{ord(ch):04X}"
            )
    terms = len(terms_of(query))
    if terms > max_terms:
        raise InvalidParams(
            f"invalid params: $.query: {terms} terms, over history.maxQueryTerms ({max_terms})"
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
