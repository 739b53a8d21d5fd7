"""The engine's memos (token estimates, renderings) reuse a result while its Structs live and
never keep them alive: how long decoded Structs live is the decode cache's call (bounded in
bytes), not a memo's (bounded only in entries, it would pin any amount of memory)."""

from __future__ import annotations

import gc
import weakref

import msgspec
import pytest

from sidecar.engine.memo import LiveMemo
from sidecar.engine.render import to_openai, to_parts
from sidecar.engine.tokens import estimate_messages
from sidecar.model.messages import WithParts
from sidecar.model.parts import Part
from sidecar.store import Store, rows

from .builders import Session, tool
from .service.harness import Harness


class Thing:
    pass


def test_an_entry_lasts_while_its_objects_live() -> None:
    memo: LiveMemo[str] = LiveMemo(limit=10)
    a, b = Thing(), Thing()
    memo.put((id(a), id(b)), (a, b), "ab")
    assert memo.get((id(a), id(b))) == "ab"
    del b
    gc.collect()
    assert len(memo) == 0


def test_a_memo_keeps_nothing_alive() -> None:
    memo: LiveMemo[str] = LiveMemo(limit=10)
    a = Thing()
    watch = weakref.ref(a)
    memo.put(id(a), (a,), "a")
    del a
    gc.collect()
    assert watch() is None
    assert len(memo) == 0


def test_a_replaced_entry_does_not_drop_its_successor() -> None:
    memo: LiveMemo[str] = LiveMemo(limit=10)
    a, b = Thing(), Thing()
    memo.put("k", (a,), "first")
    memo.put("k", (b,), "second")  # the first entry's watch on ``a`` goes with it
    del a
    gc.collect()
    assert memo.get("k") == "second"


def test_a_full_memo_starts_over() -> None:
    memo: LiveMemo[int] = LiveMemo(limit=2)
    things = [Thing() for _ in range(3)]
    for i, t in enumerate(things):
        memo.put(i, (t,), i)
    assert len(memo) == 1 and memo.get(2) == 2


def window() -> list[WithParts]:
    s = Session()
    s.user("read the file")
    s.assistant(tool("read", "x" * 10_000), "done")
    return s.messages


def raws_of(msgs: list[WithParts]) -> dict[str, str]:
    out = {m.info.id: msgspec.json.encode(m.info).decode() for m in msgs}
    out.update((p.id, msgspec.json.encode(p).decode()) for m in msgs for p in m.parts)
    return out


def test_estimates_and_renderings_are_reused_while_the_window_lives() -> None:
    msgs = window()
    raws = raws_of(msgs)
    assert estimate_messages(msgs) == estimate_messages(msgs)
    first, again = to_openai(msgs), to_openai(msgs)
    assert first == again and all(x is y for x, y in zip(first, again, strict=True))
    parts, parts_again = to_parts(msgs, raws), to_parts(msgs, raws)
    assert all(x is y for x, y in zip(parts, parts_again, strict=True))


def test_estimating_and_rendering_keep_no_part_alive() -> None:
    msgs = window()
    raws = raws_of(msgs)
    estimate_messages(msgs)
    to_openai(msgs)
    to_parts(msgs, raws)
    watched = [weakref.ref(p) for m in msgs for p in m.parts]
    watched += [weakref.ref(m.info) for m in msgs]
    del msgs, raws
    gc.collect()
    assert [w() for w in watched] == [None] * len(watched)


def test_a_new_part_at_a_freed_parts_address_gets_its_own_estimate() -> None:
    short = window()
    small = estimate_messages(short)
    big_text = "y" * 40_000
    for _ in range(200):  # until a new Struct lands where a freed one was
        ids = {id(p) for m in short for p in m.parts} | {id(m.info) for m in short}
        del short
        gc.collect()
        s = Session()
        s.user("read the file")
        s.assistant(tool("read", big_text), "done")
        short = s.messages
        if ids & ({id(p) for m in short for p in m.parts} | {id(m.info) for m in short}):
            break
    assert estimate_messages(short) > small + 5_000


async def test_windows_read_keep_no_more_parts_alive_than_the_decode_cache_holds(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Twelve sessions' windows read in turn (estimated and rendered, as ``session/context``
    does) with a decode cache of 256 KiB: the tool outputs of 100 KB decoded for them stay
    alive only as long as the decode cache (or the one window the cache keeps assembled)
    holds them, whatever the memos remember."""
    budget = 256 << 10
    monkeypatch.setattr(rows.cached_part, "_max_bytes", budget)
    h = Harness(store)
    watched: dict[str, weakref.ref[Part]] = {}
    for n in range(12):
        s = await h.ended_turn(tool_output=f"output {n:02d} " * 10_000)
        await h.engine.context(s.id, "openai", h.cfg)
        await h.engine.context(s.id, "parts", h.cfg)
        for pid, (data, part) in rows.cached_part._items.items():
            if len(data) > 100_000 and part.session_id == s.id:
                watched.setdefault(pid, weakref.ref(part))
    assert len(watched) == 12
    gc.collect()
    alive = [pid for pid, ref in watched.items() if ref() is not None]
    # What the decode cache holds (its budget in 100 KB outputs), and the window kept
    # assembled for the session read last.
    assert len(alive) <= budget // 100_000 + 1, alive
