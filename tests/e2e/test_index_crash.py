"""The history index after ``kill -9``: a write committed but not yet indexed is found by
search once the daemon is started again (the indexer catches up from the store's notes)."""

from __future__ import annotations

import signal

from sidecar_client import HistorySearchResult
from wire import put_message, put_part

from tests.store.index_checks import index_state

from .builders import text_part, user_message
from .conftest import Spawner

WORD = "zanzibarquokka"


async def test_a_write_killed_before_its_indexing_is_found_after_restart(
    spawner: Spawner,
) -> None:
    # The indexer waits an hour for quiet: the write commits, its indexing never comes.
    client = await spawner.configured({"history": {"indexDelayMs": 3_600_000}})
    session = await client.create_session(title="crash")
    user = await put_message(client, user_message(session.id, seq=0))
    part = await put_part(client, text_part(session.id, user["id"], f"the {WORD} was here"))
    held, noted = await index_state(spawner.db, WORD)
    assert (held, noted) == (0, 1)  # committed, noted, not in the index

    assert await client.kill() == -signal.SIGKILL

    again = await spawner()  # same database, default config
    found = await again.request(
        "history/search",
        {"sessionID": session.id, "query": WORD, "includeRecall": True},
        HistorySearchResult,
    )
    assert [hit.part_id for hit in found.hits] == [part["id"]]
    assert await index_state(spawner.db, WORD) == (1, 0)
