"""A search's time budget (``history.searchBudgetMs``): a read on the reader is stopped at
its deadline and the search answers with what it had, ``partial``; on each backend."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store

ENDLESS = {
    "sqlite": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
    "WHERE x < 1000000000) SELECT count(*) FROM c",
    "postgresql": "SELECT pg_sleep(600)",
}


async def test_a_read_past_its_deadline_is_stopped(store: Store) -> None:
    db = store.backend
    assert await db.query_within(ENDLESS[db.kind], (), time.monotonic() + 0.05) is None
    # The reader is usable again at once, and a read within its deadline is whole.
    rows = await db.query_within("SELECT 1 + 1", (), time.monotonic() + 60)
    assert rows is not None and [tuple(r) for r in rows] == [(2,)]
    assert [tuple(r) for r in await db.query("SELECT 2 + 2")] == [(4,)]


async def test_a_search_out_of_time_is_partial(db: str | Path) -> None:
    store = await Store.open(db)
    try:
        await store.put_session(Session(id="ses_b", title="t", time=SessionTime(created=1)))
        infos, parts = [], []
        for i in range(3000):
            user = UserMessage(id=f"msg_{i:05d}", session_id="ses_b", time=MessageTime(created=i))
            infos.append((user, msgspec.json.encode(user)))
            part = TextPart(
                id=f"prt_{i:05d}",
                session_id="ses_b",
                message_id=user.id,
                text=f"zebra crossing number {i} " + "padding words " * 100,
            )
            parts.append((part, msgspec.json.encode(part)))
        await store.put_many(infos, parts)
        whole = await store.search_history("ses_b", "zebra crossing", 5, include_recall=True)
        assert not whole.partial and len(whole.hits) == 5
        for session in ("ses_b", None):
            cut = await store.search_history(session, "zebra crossing", 5, budget=1e-9)
            assert cut.partial and len(cut.hits) <= 5
    finally:
        await store.close()
