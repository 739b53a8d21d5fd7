"""The reads unit (``engine/reads.py``): one call serves ``session/context`` with its
revision, and a delta ``since`` one served before."""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.store import Store

from .service.harness import Harness


async def test_context_serves_a_revision_and_a_delta_since_it(store: Store) -> None:
    h = Harness(store)
    s, _a = await h.first_turn(finish=None)
    first = await h.engine.context(s.id, "parts", h.cfg)
    assert first.revision is not None and first.delta is msgspec.UNSET  # no ``since``
    await h.user(s.id, "next")
    second = await h.engine.context(s.id, "parts", h.cfg, since=first.revision)
    assert second.delta is True and second.start is not None
    full = await h.engine.context(s.id, "parts", h.cfg)
    assembled = list(first.messages)[: second.start] + list(second.messages)
    assert assembled == list(full.messages)


async def test_a_window_unchanged_below_its_end_is_served_without_a_reader_read(
    store: Store,
) -> None:
    """Turn after turn, a frontend reads the window, appends a turn, ends it: every read
    behind ``session/context`` and the automatic work comes from the window cache, none from
    the reader's thread (issue 34, item 2). On SQLite nothing at all is read off the loop
    (the session's row and the like are point reads on it); on PostgreSQL, where every read is
    the server's, those point reads are all there is: no page of messages or parts."""
    h = Harness(store)
    s = await h.ended_turn(tool_output="line of output\n" * 500)
    first = await h.engine.context(s.id, "openai", h.cfg)  # the first read loads the window
    backend = store.backend
    read: list[str] = []
    query, stream = backend.query, backend.stream

    async def counted_query(sql: str, args: Any = ()) -> Any:
        read.append(sql)
        return await query(sql, args)

    def counted_stream(sql: str, args: Any) -> Any:
        read.append(sql)
        return stream(sql, args)

    backend.query = counted_query  # type: ignore[method-assign]
    backend.stream = counted_stream  # type: ignore[method-assign]
    try:
        for n in range(5):
            u = await h.user(s.id, f"turn {n}")
            a = await h.assistant(s.id, u.id, tool_output=f"output {n}\n" * 500)
            h.engine.message_stored(a)
            await h.settle()
            served = await h.engine.context(s.id, "openai", h.cfg)
            # each turn: the user's message, the tool call, its result (the text with it)
            assert len(served.messages) == len(first.messages) + 3 * (n + 1)
            assert served.messages[-3] == {"role": "user", "content": f"turn {n}"}
    finally:
        del backend.query, backend.stream
    pages = [sql for sql in read if "p.message_id = m.id" in sql or "FROM messages m WHERE" in sql]
    assert pages == []
    if backend.kind == "sqlite":
        assert read == [], sorted(set(read))
