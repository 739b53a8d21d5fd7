"""compaction.prepare (issue 25): the summary is written in the background before the window
overflows, committed at the overflow when still valid, discarded (and counted) otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

from sidecar.engine.compactor import Request
from sidecar.engine.window import load_window
from sidecar.model.conversation import CONTINUE_TEXT
from sidecar.model.messages import AssistantMessage, UserMessage
from sidecar.model.parts import CompactionPart, TextPart
from sidecar.model.rpc import CompactedEvent, CompactingHookResult
from sidecar.model.session import Session
from sidecar.store import Key, Store
from sidecar.summarizers.base import SummaryError

from .harness import Harness, enc
from .test_auto import _Writer

USABLE = 168_000  # claude-sonnet-4-5: 200k - 32k
NEAR = 120_000  # >= 0.7 x usable, below the overflow
OVER = 180_000
PREPARE: dict[str, Any] = {"compaction": {"prepare": 0.7}}


def _compacted(h: Harness) -> list[CompactedEvent]:
    return h.host.methods("session/compacted")


async def _ended_turn(
    h: Harness, sid: str, text: str, input_tokens: int
) -> tuple[UserMessage, AssistantMessage]:
    """A turn whose end the frontend reported, with the work it started done."""
    u = await h.user(sid, text)
    a = await h.assistant(sid, u.id, input_tokens=input_tokens)
    h.engine.message_stored(a)
    await h.settle()
    return u, a


async def _near(h: Harness, sid: str) -> tuple[UserMessage, AssistantMessage]:
    """A turn that ends at >= prepare x usable: the preparation starts."""
    return await _ended_turn(h, sid, "Refactor the parser", NEAR)


async def _overflow(h: Harness, sid: str) -> tuple[UserMessage, AssistantMessage]:
    return await _ended_turn(h, sid, "Now the tests", OVER)


async def _prepared_session(store: Store) -> tuple[Harness, Session]:
    """A session near its window whose summary has been prepared in the background."""
    h = Harness(store, PREPARE)
    s = await h.session()
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is not None
    return h, s


async def test_default_prepares_nothing_and_keeps_the_event_shape(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is None
    await _overflow(h, s.id)
    (event,) = _compacted(h)
    assert event.prepared is not True and "prepared" not in enc(event).decode()
    assert "waitedMs" not in enc(event).decode()


async def test_prepared_summary_is_committed_at_the_overflow(store: Store) -> None:
    h = Harness(store, PREPARE)
    s = await h.session()
    u1, a1 = await _near(h, s.id)
    prepared = await h.engine.prepared(s.id)
    assert prepared is not None and prepared.cut == Key(a1.time.created, a1.id)
    # Invisible until committed: nothing stored, no event but the background progress.
    assert [m.info.id for m in await load_window(store, s)] == [u1.id, a1.id]
    assert _compacted(h) == []
    begins = [e["value"] for e in h.host.methods("$/progress") if e["value"]["kind"] == "begin"]
    assert [b["title"] for b in begins] == ["Compacting (background)"]
    u2, a2 = await _overflow(h, s.id)
    (event,) = _compacted(h)
    assert event.prepared is True and isinstance(event.waited_ms, int)
    window = await load_window(store, s)
    # marker, the prepared summary (up to the cut), the messages after it as they are, continue
    assert isinstance(window[0].info, UserMessage)
    part = window[0].parts[0]
    assert isinstance(part, CompactionPart) and part.tail_start_id == u2.id
    summary = window[1].info
    assert isinstance(summary, AssistantMessage) and summary.summary
    assert summary.id == event.message_id and summary.parent_id == window[0].info.id
    texts = [p.text for p in window[1].parts if isinstance(p, TextPart)]
    assert texts == [p.text for p in prepared.parts if isinstance(p, TextPart)]
    assert [m.info.id for m in window[2:4]] == [u2.id, a2.id]
    stored = {m.info.id: m for m in await store.window(s.id)}
    assert window[2] == stored[u2.id] and window[3] == stored[a2.id]
    last = window[-1].parts[0]
    assert isinstance(last, TextPart) and last.text == CONTINUE_TEXT and len(window) == 5
    assert h.engine.tally.prepared_discarded_tokens == 0
    assert h.engine.tally.summary_tokens == prepared.tokens


async def test_same_window_as_a_normal_compaction_at_the_cut(store: Store) -> None:
    """The prepared window equals, message for message, a normal compaction at that cut given
    the same summary text, followed by the later messages (the collapse-style tail)."""
    h = Harness(store, PREPARE)
    s = await h.session()
    await _near(h, s.id)
    prepared = await h.engine.prepared(s.id)
    assert prepared is not None
    text = next(p.text for p in prepared.parts if isinstance(p, TextPart))
    # The same history compacted normally (a fork up to the cut), by a writer that writes text.
    twin = await h.engine.writes.fork(s.id, None)
    normal = await h.engine.compactor.run(
        Request(session_id=twin.id, auto=True, overflow=True), h.cfg, _Writer(text)
    )
    assert normal.result.status == "continue"
    u2, a2 = await _overflow(h, s.id)
    mine = await load_window(store, s)
    theirs = await load_window(store, twin)

    def shape(w: list[Any]) -> list[tuple[str, list[str]]]:
        def name(p: Any) -> str:
            return str(p.text) if isinstance(p, TextPart) else type(p).__name__

        return [(type(m.info).__name__, [name(p) for p in m.parts]) for m in w]

    assert shape(mine[:2]) == shape(theirs[:2])  # marker, the same summary
    assert shape([mine[-1]]) == shape([theirs[-1]])  # continue
    assert [m.info.id for m in mine[2:-1]] == [u2.id, a2.id]


async def _discarded_by(h: Harness, sid: str) -> None:
    await _overflow(h, sid)
    (event,) = _compacted(h)
    assert event.prepared is False
    assert h.engine.tally.prepared_discarded_tokens > 0


async def test_part_updated_before_the_cut_discards(store: Store) -> None:
    h = Harness(store, PREPARE)
    s = await h.session()
    u1, _ = await _near(h, s.id)
    assert await h.engine.prepared(s.id) is not None
    (m,) = [m for m in await store.window(s.id) if m.info.id == u1.id]
    part = m.parts[0]
    assert isinstance(part, TextPart)
    changed = TextPart(id=part.id, session_id=s.id, message_id=u1.id, text="Refactor the lexer")
    await store.put_part(changed, enc(changed))
    await _discarded_by(h, s.id)


async def test_message_removed_before_the_cut_discards(store: Store) -> None:
    h = Harness(store, PREPARE)
    s = await h.session()
    u0 = await h.user(s.id, "an early question")
    a0 = await h.assistant(s.id, u0.id)
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is not None
    assert await store.remove_message(s.id, a0.id)
    await _discarded_by(h, s.id)


async def test_change_after_the_cut_keeps_it(store: Store) -> None:
    h, s = await _prepared_session(store)
    u2 = await h.user(s.id, "Now the tests")
    (m,) = [m for m in await store.window(s.id) if m.info.id == u2.id]
    edited = TextPart(id=m.parts[0].id, session_id=s.id, message_id=u2.id, text="Now the docs")
    await store.put_part(edited, enc(edited))  # after the cut: the prepared summary holds
    a2 = await h.assistant(s.id, u2.id, input_tokens=OVER)
    h.engine.message_stored(a2)
    await h.settle()
    assert _compacted(h)[0].prepared is True


async def test_revert_discards(store: Store) -> None:
    h = Harness(store, PREPARE)
    s = await h.session()
    await _near(h, s.id)
    u = await h.user(s.id, "one more")
    a = await h.assistant(s.id, u.id, input_tokens=NEAR)
    assert await h.engine.prepared(s.id) is not None
    await h.engine.revert(s.id, u.id, None)
    assert h.engine.tally.prepared_discarded_tokens > 0
    assert await h.engine.prepared(s.id) is None
    await h.engine.unrevert(s.id)
    h.engine.message_stored(a)  # the next turn end prepares a new one
    await h.settle()
    fresh = await h.engine.prepared(s.id)
    assert fresh is not None and fresh.cut == Key(a.time.created, a.id)
    await _overflow(h, s.id)
    assert _compacted(h)[0].prepared is True


async def test_manual_compaction_with_instructions_discards(store: Store) -> None:
    h, s = await _prepared_session(store)
    await h.engine.compact(Request(session_id=s.id, instructions="keep the file names"))
    (event,) = _compacted(h)
    assert event.prepared is False and h.engine.tally.prepared_discarded_tokens > 0
    assert await h.engine.prepared(s.id) is None


async def test_manual_compaction_uses_a_valid_prepared_summary(store: Store) -> None:
    h, s = await _prepared_session(store)
    await h.engine.compact(Request(session_id=s.id))
    (event,) = _compacted(h)
    assert event.prepared is True and event.auto is False


async def test_writer_change_discards(store: Store) -> None:
    h, s = await _prepared_session(store)
    h.cfg = type(h.cfg)(
        compaction=h.cfg.compaction,
        summarizer=type(h.cfg.summarizer)(max_input_tokens=50_000),
        models=h.cfg.models,
        server=h.cfg.server,
    )
    await _discarded_by(h, s.id)


async def test_prompt_change_discards(store: Store) -> None:
    h, s = await _prepared_session(store)
    h.host.hook_results = [CompactingHookResult(prompt="Summarize as a haiku")]
    await _discarded_by(h, s.id)


async def test_fork_prepares_its_own(store: Store) -> None:
    h, s = await _prepared_session(store)
    twin = await h.engine.writes.fork(s.id, None)
    assert await h.engine.prepared(twin.id) is None
    await _overflow(h, twin.id)
    (event,) = _compacted(h)
    assert event.session_id == twin.id and event.prepared is False
    await _overflow(h, s.id)
    assert _compacted(h)[1].session_id == s.id and _compacted(h)[1].prepared is True


async def test_frontend_keeps_writing_while_preparing(store: Store) -> None:
    h = Harness(store, {**PREPARE, "summarizer": {"provider": "openai", "model": "m"}})
    w = _Writer("the prepared summary")
    w.gate = asyncio.Event()
    h.engine.use_writer(h.cfg.summarizer, w)  # type: ignore[arg-type]
    s = await h.session()
    await _near(h, s.id)
    await w.started.wait()  # the writer is busy in the background
    # Turns, reads and prunes flow meanwhile: none waits for the writer.
    for _ in range(3):
        u = await h.user(s.id, "keep going")
        a = await h.assistant(s.id, u.id, input_tokens=NEAR + 1_000)
        h.engine.message_stored(a)
        await h.engine.context(s.id, "opencode")
    assert len(w.requests) == 1 and _compacted(h) == []
    # The overflow waits for that one summary and starts no second.
    u = await h.user(s.id, "and now?")
    a = await h.assistant(s.id, u.id, input_tokens=OVER)
    h.engine.message_stored(a)
    h.engine.end_turn(s.id)
    await asyncio.sleep(0)
    w.gate.set()
    await h.settle()
    assert len(w.requests) == 1
    (event,) = _compacted(h)
    assert event.prepared is True
    window = await load_window(store, s)
    assert sum(1 for m in window if isinstance(m.info, UserMessage)) == 4 + 2  # 4 turns + 2


async def test_writer_failure_while_preparing_compacts_normally(store: Store) -> None:
    h = Harness(
        store, {**PREPARE, "summarizer": {"provider": "openai", "model": "m", "fallback": None}}
    )
    w = _Writer("a summary", fail=SummaryError("provider down"))
    h.engine.use_writer(h.cfg.summarizer, w)  # type: ignore[arg-type]
    s = await h.session()
    await _near(h, s.id)
    assert await h.engine.prepared(s.id) is None
    assert any("preparing a summary" in line for line in h.host.logs)
    w.fail = None
    await _overflow(h, s.id)
    (event,) = _compacted(h)
    assert event.prepared is False and len(w.requests) == 2
    assert h.engine.tally.prepared_discarded_tokens == 0
