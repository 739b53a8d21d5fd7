"""The history index's background batch (``store.indexer``): a write commits without
touching the index, a search first indexes what committed before it, also under a burst of
writes, and an indexed part rewritten or removed leaves no stale entry."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import msgspec

from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import StepStartPart, TextPart
from sidecar.model.session import Session, SessionTime
from sidecar.store import Store
from sidecar.store.indexer import BATCH_ROWS, Indexer

from .index_checks import found, index_agrees, index_state


async def _held(db: str | Path, word: str) -> int:
    """How many parts the index itself holds with ``word`` (read from the database)."""
    return (await index_state(db, word))[0]


async def _session(store: Store) -> None:
    await store.put_session(Session(id="ses_i", title="t", time=SessionTime(created=1, updated=1)))
    for i in range(2):
        user = UserMessage(id=f"msg_{i}", session_id="ses_i", time=MessageTime(created=i + 1))
        await store.put_message(user, msgspec.json.encode(user))


def _text(pid: str, text: str, mid: str = "msg_0") -> tuple[TextPart, bytes]:
    raw = json.dumps(
        {"id": pid, "sessionID": "ses_i", "messageID": mid, "type": "text", "text": text}
    ).encode()
    return msgspec.json.decode(raw, type=TextPart), raw


async def _put(store: Store, pid: str, text: str) -> None:
    await store.put_part(*_text(pid, text))


async def _found(store: Store, word: str) -> list[str]:
    return await found(store, "ses_i", word)


async def test_a_write_commits_without_the_index_and_a_search_finds_it(
    store: Store, db: str | Path
) -> None:
    assert store.indexer is not None
    store.indexer.delay = 3600  # no batch of its own during the test
    await _session(store)
    await _put(store, "prt_a", "alpha wombatine")
    assert await _held(db, "wombatine") == 0  # committed, not indexed
    assert await _found(store, "wombatine") == ["prt_a"]  # the search indexed it first
    assert await _held(db, "wombatine") == 1


async def test_the_batch_runs_once_writes_are_quiet(store: Store, db: str | Path) -> None:
    assert store.indexer is not None
    store.indexer.delay = 0
    await _session(store)
    before = store.indexer.batches
    await _put(store, "prt_q", "quietude")

    async def batched() -> None:
        while store.indexer is not None and store.indexer.batches == before:
            await asyncio.sleep(0)  # a yield, not a wait: the batch is due at once

    await asyncio.wait_for(batched(), 30)
    await store.backend.submit([])  # behind whatever it queued
    assert await _held(db, "quietude") == 1


async def test_searches_read_their_writes_under_a_burst(store: Store, db: str | Path) -> None:
    """Bursts of writes queued at once, each followed at once by a search, while more writes
    are queued behind it: each search finds every part of the bursts before it (committed
    before it, or queued before it and so committed first), whatever is still in flight."""
    assert store.indexer is not None
    store.indexer.delay = 3600
    await _session(store)
    acked: list[str] = []
    for burst in range(4):
        ids = [f"prt_{burst}_{i:02d}" for i in range(20)]
        for pid in ids:
            part, raw = _text(pid, f"burstword item {pid}")
            store.put_part_then(part, raw, lambda _, exc, pid=pid: acked.append(pid))
        search = asyncio.ensure_future(_found(store, "burstword"))
        for pid in ids:  # the next burst's twins, queued behind the search
            part, raw = _text(pid + "_late", f"lateword item {pid}")
            store.put_part_then(part, raw, lambda _, exc: None)
        found = await search
        expected = {f"prt_{b}_{i:02d}" for b in range(burst + 1) for i in range(20)}
        assert set(found) == expected
        assert set(acked) >= expected  # each was acknowledged before the search answered
    await store.barrier()
    assert len(await _found(store, "lateword")) == 80


async def test_a_search_behind_more_parts_than_a_batch_holds_finds_them_all(
    store: Store, db: str | Path
) -> None:
    """More new parts than one batch takes (``BATCH_ROWS``), most of a kind the index does
    not hold (a step's start), the words last: the search's catch-up runs batches until none
    is left, not only while a batch indexed a full one."""
    assert store.indexer is not None
    store.indexer.delay = 3600
    await _session(store)
    for i in range(BATCH_ROWS + 6):
        raw = json.dumps(
            {"id": f"prt_s{i:03d}", "sessionID": "ses_i", "messageID": "msg_0",
             "type": "step-start"}
        ).encode()  # fmt: skip
        await store.put_part(msgspec.json.decode(raw, type=StepStartPart), raw)
    for i in range(3):
        await _put(store, f"prt_w{i}", "afterthesteps")
    assert await _found(store, "afterthesteps") == ["prt_w0", "prt_w1", "prt_w2"]
    assert (await index_state(db, "afterthesteps")) == (3, 0)
    index_agrees(db)


async def test_an_indexed_part_rewritten_or_removed_leaves_no_stale_entry(
    store: Store, db: str | Path
) -> None:
    assert store.indexer is not None
    store.indexer.delay = 3600
    await _session(store)
    await _put(store, "prt_r", "firstversion")
    await _put(store, "prt_d", "doomedword")
    assert await _found(store, "firstversion") == ["prt_r"]
    assert await _found(store, "doomedword") == ["prt_d"]
    await _put(store, "prt_r", "secondversion")  # an indexed part rewritten
    await _put(store, "prt_r", "thirdversion")  # and again before the next batch
    assert await store.remove_part("ses_i", "msg_0", "prt_d")
    assert await _found(store, "firstversion") == []
    assert await _found(store, "secondversion") == []
    assert await _found(store, "thirdversion") == ["prt_r"]
    assert await _found(store, "doomedword") == []
    assert await _held(db, "firstversion") == 0
    assert await _held(db, "doomedword") == 0
    index_agrees(db)


async def test_a_search_with_nothing_noted_writes_nothing(store: Store, db: str | Path) -> None:
    """Only an empty op behind the queued writes (no statement), then a read: no batch."""
    assert store.indexer is not None
    store.indexer.delay = 3600
    await _session(store)
    await _put(store, "prt_n", "nothingnoted")
    assert await _found(store, "nothingnoted") == ["prt_n"]  # indexed by this search
    batches = store.indexer.batches
    for _ in range(3):
        assert await _found(store, "nothingnoted") == ["prt_n"]
    assert store.indexer.batches == batches


async def test_the_indexer_goes_quiet(store: Store) -> None:
    """Its own work (a batch, the empty op a search waits behind) is no write to index after:
    once caught up, nothing is scheduled, so an idle daemon stays idle."""
    assert store.indexer is not None
    await _session(store)
    await _put(store, "prt_q", "goesquiet")
    assert store.indexer.scheduled  # the write's batch, after the quiet period
    assert await _found(store, "goesquiet") == ["prt_q"]
    await store.barrier()
    assert not store.indexer.scheduled


class _Notes:
    """The store an ``Indexer`` runs over, in memory: parts noted, and what its batches
    indexed (a batch takes every note)."""

    def __init__(self, *noted: str) -> None:
        self.notes = list(noted)
        self.indexed: list[str] = []

    async def submit(self, statements: Sequence[object]) -> list[int]:
        self.indexed.extend(self.notes)
        done = len(self.notes)
        self.notes.clear()
        return [done]

    async def settle(self) -> None:
        return None

    async def noted(self) -> bool:
        return bool(self.notes)

    async def indexed_soon(self) -> list[str]:
        """What was indexed once the loop has run what is due at once (yields, not waits)."""
        for _ in range(100):
            if self.indexed:
                break
            await asyncio.sleep(0)
        return self.indexed


async def test_a_write_committed_while_a_batch_looks_is_indexed_after_it() -> None:
    """A write that commits while a batch is under way (between its look for notes and its
    end) is indexed by a batch of its own once that one ends, not left for the next write:
    the batch it met had already looked, and found nothing."""
    store = _Notes()
    looking = asyncio.Event()
    go_on = asyncio.Event()

    async def slow_look() -> bool:
        found = await store.noted()
        looking.set()
        await go_on.wait()  # the look's read is slow: a write commits meanwhile
        return found

    indexer = Indexer(store.submit, ["batch"], store.settle, slow_look)
    indexer.delay = 0
    indexer.written()  # a first write (nothing noted by the time its batch looks)
    await looking.wait()
    store.notes.append("prt_late")  # a write commits while that batch looks...
    indexer.written()  # ...and tells the indexer so
    await asyncio.sleep(0)  # its timer is due at once
    go_on.set()
    assert await store.indexed_soon() == ["prt_late"]
    await indexer.close()


async def test_a_shorter_quiet_period_applies_to_the_batch_already_waiting() -> None:
    """``history.indexDelayMs`` lowered while a batch waits out the old one: the batch runs
    after the new one (one timer is armed for all writes, and re-armed when the delay
    changes), not an hour later."""
    store = _Notes("prt_waiting")
    indexer = Indexer(store.submit, ["batch"], store.settle, store.noted)
    indexer.delay = 3600
    for _ in range(3):
        indexer.written()  # three commits: one timer
    assert indexer.scheduled
    indexer.delay = 0
    assert await store.indexed_soon() == ["prt_waiting"]
    await indexer.close()
