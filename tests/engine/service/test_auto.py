"""Automatic triggers and the compaction flow, through the engine service on a real store."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sidecar.engine import ledger
from sidecar.engine.compactor import Request
from sidecar.engine.tokens import estimate
from sidecar.engine.window import load_window
from sidecar.errors import Busy
from sidecar.model.conversation import CONTINUE_TEXT
from sidecar.model.messages import AssistantMessage, MessageError, ModelRef, UserMessage
from sidecar.model.parts import CompactionPart, TextPart
from sidecar.model.rpc import CompactingHookResult
from sidecar.store import Store
from sidecar.summarizers.base import DEFAULT_PROMPT, SummaryError, SummaryRequest, SummaryResult

from .harness import Harness

OVER = 180_000  # > 200k - min(64k, 32k) = 168k usable for claude-sonnet-4-5
ODD = ModelRef(provider_id="acme", model_id="mystery-1")  # in no catalog


async def _compactions(h: Harness) -> int:
    return len(h.host.methods("session/compacted"))


async def test_overflowing_turn_compacts_once_with_continue_message(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    u = await h.user(s.id, "Fix main.py please")
    a = await h.assistant(s.id, u.id, input_tokens=OVER)
    h.engine.message_stored(a)
    h.engine.message_stored(a)  # racing updates of the same message (OpenCode #27468)
    await h.settle()
    assert await _compactions(h) == 1
    compacted = h.host.methods("session/compacted")[0]
    assert compacted.auto is True
    window = await load_window(store, s)
    assert isinstance(window[0].info, UserMessage)
    assert any(isinstance(p, CompactionPart) and p.auto for p in window[0].parts)
    summary = window[1].info
    assert isinstance(summary, AssistantMessage) and summary.summary and summary.finish == "stop"
    assert summary.mode == "compaction" and summary.agent == "compaction"
    assert summary.parent_id == window[0].info.id
    last = window[-1]
    assert isinstance(last.parts[0], TextPart) and last.parts[0].text == CONTINUE_TEXT
    assert last.parts[0].synthetic is True
    statuses = [e.status for e in h.host.methods("session/status")]
    assert statuses == ["compacting", "idle"]


async def test_later_update_of_a_compacted_turn_does_not_compact_again(store: Store) -> None:
    h = Harness(store)
    _, a = await h.first_turn(input_tokens=OVER)
    h.engine.message_stored(a)
    await h.settle()
    h.engine.message_stored(a)
    await h.settle()
    assert await _compactions(h) == 1


async def test_exactly_usable_is_not_overflow(store: Store) -> None:
    h = Harness(store)
    await h.ended_turn(input_tokens=168_000 - 100)  # + 100 output = usable
    assert await _compactions(h) == 0


@pytest.mark.parametrize("overrides", [{"compaction": {"auto": False}}])
async def test_auto_false_never_compacts(store: Store, overrides: dict[str, Any]) -> None:
    h = Harness(store, overrides)
    await h.ended_turn(input_tokens=OVER)
    assert await _compactions(h) == 0


async def test_context_overflow_error_takes_the_compaction_path(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    u = await h.user(s.id, "go")
    err = MessageError(name="ContextOverflowError", data={"message": "prompt is too long"})
    a = await h.assistant(s.id, u.id, finish=None, input_tokens=10, error=err)
    h.engine.message_stored(a)
    await h.settle()
    assert await _compactions(h) == 1


async def test_context_overflow_error_with_auto_off_reports_error(store: Store) -> None:
    h = Harness(store, {"compaction": {"auto": False}})
    s = await h.session()
    u = await h.user(s.id, "go")
    err = MessageError(name="ContextOverflowError", data={"message": "prompt is too long"})
    a = await h.assistant(s.id, u.id, finish=None, error=err)
    h.engine.message_stored(a)
    await h.settle()
    assert await _compactions(h) == 0
    assert [e.status for e in h.host.methods("session/status")] == ["error"]


async def test_unknown_model_is_reported_once_and_not_compacted(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    for _ in range(2):
        u = await h.user(s.id, "go")
        a = await h.assistant(s.id, u.id, input_tokens=10_000_000, model=ODD)
        h.engine.message_stored(a)
        await h.settle()
    assert await _compactions(h) == 0
    assert len(h.host.logs) == 1 and "acme/mystery-1" in h.host.logs[0]


async def test_configured_model_limits_enable_compaction(store: Store) -> None:
    h = Harness(store, {"models": {"acme/mystery-1": {"context": 10_000, "output": 1_000}}})
    await h.ended_turn(input_tokens=9_500, model=ODD)
    assert await _compactions(h) == 1


async def test_default_window_covers_unknown_models(store: Store) -> None:
    """Issue 20 item 4: config ``models["*"]`` is the window of any model nobody knows."""
    h = Harness(store, {"models": {"*": {"context": 10_000, "output": 1_000}}})
    await h.ended_turn(input_tokens=9_500, model=ODD)
    assert await _compactions(h) == 1
    assert h.host.logs == []


async def test_the_limits_used_are_stored_with_the_session(store: Store) -> None:
    """Issue 20 item 4: the limits a decision used, stored on the session for inspect/report."""
    h = Harness(store, {"models": {"acme/mystery-1": {"context": 10_000, "output": 1_000}}})
    s = await h.ended_turn(input_tokens=500, model=ODD)
    stored = await store.require_session(s.id)
    assert stored.limits is not None
    assert stored.limits.model == "acme/mystery-1"
    assert (stored.limits.context, stored.limits.output) == (10_000, 1_000)
    assert stored.limits.usable == 9_000
    assert stored.limits.source == "config"


async def test_turn_end_prunes_old_tool_outputs(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    big = "x" * 100_000  # 25,000 tokens each
    for _ in range(4):
        u = await h.user(s.id, "more")
        await h.assistant(s.id, u.id, tool_output=big, finish="tool-calls")
    u = await h.user(s.id, "last")
    a = await h.assistant(s.id, u.id, finish="stop")
    h.engine.message_stored(a)
    await h.settle()
    pruned = h.host.methods("session/pruned")
    assert len(pruned) == 1
    # newest->oldest: turns 1 and 2 skipped; 25k (protected), 50k crosses 40k -> pruned, 75k, ...
    assert pruned[0].tokens_saved == 50_000 and len(pruned[0].part_ids) == 2


async def test_prune_disabled_by_config(store: Store) -> None:
    h = Harness(store, {"compaction": {"prune": False}})
    s = await h.session()
    for _ in range(4):
        u = await h.user(s.id, "more")
        await h.assistant(s.id, u.id, tool_output="x" * 100_000)
    u = await h.user(s.id, "last")
    a = await h.assistant(s.id, u.id)
    h.engine.message_stored(a)
    await h.settle()
    assert h.host.methods("session/pruned") == []


async def test_tool_calls_finish_does_not_prune(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    for _ in range(4):
        u = await h.user(s.id, "more")
        await h.assistant(s.id, u.id, tool_output="x" * 100_000)
    u = await h.user(s.id, "last")
    a = await h.assistant(s.id, u.id, finish="tool-calls")
    h.engine.message_stored(a)
    await h.settle()
    assert h.host.methods("session/pruned") == []


class _Writer:
    provider_id = "test"
    model_id = "test-1"
    wire_format = "parts"

    def __init__(self, text: str = "a summary", fail: Exception | None = None) -> None:
        self.text = text
        self.fail = fail
        self.requests: list[SummaryRequest] = []
        self.gate: asyncio.Event | None = None
        self.started = asyncio.Event()

    def input_limit(self) -> int | None:
        return None

    async def summarize(self, req: SummaryRequest, progress: Any = None) -> SummaryResult:
        from sidecar.model.tokens import Tokens

        self.requests.append(req)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return SummaryResult(self.text, Tokens(output=3), self.provider_id, self.model_id)

    async def aclose(self) -> None:
        return None


async def _manual(h: Harness, sid: str, writer: _Writer, **kw: Any) -> Any:
    return (await h.engine.compactor.run(Request(session_id=sid, **kw), h.cfg, writer)).result


NO_FALLBACK = {"summarizer": {"fallback": None}}


async def test_failed_summary_keeps_history_and_reports(store: Store) -> None:
    h = Harness(store, NO_FALLBACK)
    s, _ = await h.first_turn(text="x" * 4000)
    before = await load_window(store, s)
    result = await _manual(h, s.id, _Writer(fail=SummaryError("provider said 500")))
    assert result.status == "stop" and "500" in (result.error or "")
    after = await load_window(store, s)
    # The context is exactly as it was: the marker cuts nothing and is not shown.
    assert [m.info.id for m in after] == [m.info.id for m in before]
    # The failed summary is stored, carrying the error.
    stored = await store.window(s.id)
    failed = stored[-1].info
    assert isinstance(failed, AssistantMessage) and failed.summary
    assert failed.error is not None and failed.finish is None
    assert "500" in str(failed.error.data)
    assert h.host.methods("session/compacted") == []
    assert h.host.methods("session/status")[-1].status == "error"


async def test_empty_summary_is_a_failure(store: Store) -> None:
    from sidecar.summarizers.base import EmptySummaryError

    h = Harness(store, NO_FALLBACK)
    s, _ = await h.first_turn(text="x" * 4000)
    result = await _manual(h, s.id, _Writer(fail=EmptySummaryError()))
    assert result.status == "stop"
    assert await store.boundary(s.id) is None


async def test_failed_writer_falls_back_to_extractive(store: Store) -> None:
    """Issue 20 item 5: by default a writer's failure is logged and the summary is written
    offline, so the compaction still frees the window; the event says who wrote it."""
    h = Harness(store)
    s, _ = await h.first_turn(text="x" * 4000)
    result = await _manual(h, s.id, _Writer(fail=SummaryError("openai (http://h/v1): down")))
    assert result.status == "continue"
    [event] = h.host.methods("session/compacted")
    assert event.writer == "extractive"
    stored = await store.window(s.id)
    summary = next(
        m.info for m in stored if isinstance(m.info, AssistantMessage) and m.info.summary
    )
    assert summary.provider_id == "extractive" and summary.error is None
    assert any("http://h/v1" in line and "extractive" in line for line in h.host.logs)


async def test_time_budget_hands_over_to_the_fallback(store: Store) -> None:
    h = Harness(store, {"compaction": {"timeBudget": 0.05}})
    s, _ = await h.first_turn(text="x" * 4000)
    stuck = _Writer()
    stuck.gate = asyncio.Event()  # never set: the writer never answers
    result = await _manual(h, s.id, stuck)
    assert result.status == "continue"
    assert h.host.methods("session/compacted")[0].writer == "extractive"
    assert any("compaction.timeBudget" in line for line in h.host.logs)


async def test_summary_that_does_not_shrink_the_context_is_rejected(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(text="short")
    result = await _manual(h, s.id, _Writer(text="y" * 40_000))
    assert result.status == "stop" and "smaller" in (result.error or "")
    assert await store.boundary(s.id) is None


async def test_hook_context_is_appended_and_prompt_can_be_replaced(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(text="x" * 4000)
    h.host.hook_results = [CompactingHookResult(context=["Remember: tabs, not spaces"])]
    w = _Writer()
    await _manual(h, s.id, w)
    assert w.requests[0].prompt.startswith("Provide a detailed prompt for continuing")
    assert w.requests[0].prompt.endswith("Remember: tabs, not spaces")
    h.host.hook_results = [CompactingHookResult(context=["extra"], prompt="Summarize tersely.")]
    w2 = _Writer()
    u2 = await h.user(s.id, "again")
    await h.assistant(s.id, u2.id, text="z" * 4000)
    await _manual(h, s.id, w2)
    assert w2.requests[0].prompt == "Summarize tersely.\n\nextra"


async def test_cancelled_compaction_leaves_nothing_behind(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(text="x" * 4000)
    before = [m.info.id for m in await load_window(store, s)]
    w = _Writer()
    w.gate = asyncio.Event()
    task = asyncio.create_task(_manual(h, s.id, w))
    await w.started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [m.info.id for m in await load_window(store, s)] == before
    assert await store.count_messages(s.id) == len(before)


async def test_second_compact_while_busy_is_refused(store: Store) -> None:
    h = Harness(store)
    s, _ = await h.first_turn(text="x" * 4000)
    w = _Writer()
    w.gate = asyncio.Event()
    h.engine.use_writer(h.cfg.summarizer, w)  # type: ignore[arg-type]
    first = asyncio.create_task(h.engine.compact(Request(session_id=s.id)))
    await w.started.wait()
    with pytest.raises(Busy):
        await h.engine.compact(Request(session_id=s.id))
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first


async def _first_compaction(h: Harness, **reply: Any) -> SummaryRequest:
    """What the writer is sent to compact a session of one turn."""
    s, _ = await h.first_turn(**reply)
    w = _Writer()
    await _manual(h, s.id, w)
    return w.requests[0]


async def _second_compaction(h: Harness) -> SummaryRequest:
    """What the writer is sent for a session's second compaction (the first wrote
    "first summary")."""
    s, _ = await h.first_turn(text="x" * 4000)
    await _manual(h, s.id, _Writer(text="first summary"))
    u2 = await h.user(s.id, "next")
    await h.assistant(s.id, u2.id, text="w" * 4000)
    w = _Writer(text="second summary")
    await _manual(h, s.id, w)
    req = w.requests[0]
    return req


async def test_standard_sends_an_earlier_compaction_inline_as_opencode_does(
    store: Store,
) -> None:
    h = Harness(store)
    req = await _second_compaction(h)
    assert req.previous_summaries == []  # no merge block in standard mode
    first, second, last = req.history[0], req.history[1], req.history[-1]
    assert any(isinstance(p, CompactionPart) for p in first.parts)  # the earlier marker
    assert isinstance(second.info, AssistantMessage) and second.info.summary
    text = "".join(p.text for p in second.parts if isinstance(p, TextPart))
    assert text == "first summary"  # the earlier summary's ledger block is not sent
    assert any(isinstance(p, CompactionPart) for p in last.parts)  # the new one, then the prompt
    assert last.info.id != first.info.id
    assert req.prompt == DEFAULT_PROMPT and "\n" not in req.prompt


async def test_collapse_still_merges_previous_summaries(store: Store) -> None:
    h = Harness(store, {"compaction": {"method": "collapse"}})
    req = await _second_compaction(h)
    assert req.previous_summaries == ["first summary"]
    assert all(not (isinstance(m.info, AssistantMessage) and m.info.summary) for m in req.history)


def _task_tokens(block: str) -> int:
    found = ledger.parse(block)
    assert found is not None
    return ledger.task_tokens(found)


async def test_summary_budget_is_capped_by_the_model_window(store: Store) -> None:
    # 16k context, 4k output: usable 12k, so a summary may take 3,000 tokens, not 10,000.
    h = Harness(store, {"models": {"acme/small": {"context": 16_000, "output": 4_000}}})
    req = await _first_compaction(h, model=ModelRef(provider_id="acme", model_id="small"))
    # The writer gets the budget less what the artifact ledger appended after it takes; the
    # task (its first and latest requests, compaction.taskBudget) rides on top of the budget.
    ledger_tokens = estimate(req.ledger) - _task_tokens(req.ledger)
    assert ledger_tokens > 0
    assert req.max_tokens == 3_000 - ledger_tokens - 1
    big = Harness(store)  # claude-sonnet-4-5: usable 168k, so summaryMaxTokens (10k) rules
    req = await _first_compaction(big)
    assert req.max_tokens == 10_000 - (estimate(req.ledger) - _task_tokens(req.ledger)) - 1

    # OpenCode's figure, min(limit.output, 32000): summaryMaxTokens 32000, no share cap.
    oc = Harness(store, {"compaction": {"summaryMaxTokens": 32_000, "summaryShare": 0}})
    req = await _first_compaction(oc)
    # claude-sonnet-4-5's output limit is 64k
    assert req.max_tokens == 32_000 - (estimate(req.ledger) - _task_tokens(req.ledger)) - 1
    tiny = Harness(store, {"models": {"acme/tiny": {"context": 16_000, "output": 2_000}}})
    req = await _first_compaction(tiny, model=ModelRef(provider_id="acme", model_id="tiny"))
    # never above the model's output limit
    assert req.max_tokens == 2_000 - (estimate(req.ledger) - _task_tokens(req.ledger)) - 1


@pytest.mark.parametrize("hint", [False, True])
async def test_recall_hint_adds_one_line_to_the_summary_only_when_asked(
    store: Store, hint: bool
) -> None:
    from sidecar.engine.compactor import RECALL_HINT

    h = Harness(store, {"compaction": {"recallHint": True}} if hint else None)
    assert h.cfg.compaction.recall_hint is hint
    s = await h.session()
    u = await h.user(s.id, "Fix main.py please")
    a = await h.assistant(s.id, u.id, input_tokens=OVER)
    h.engine.message_stored(a)
    await h.settle()
    window = await load_window(store, s)
    [text] = [p for p in window[1].parts if isinstance(p, TextPart)]
    assert text.text.endswith(RECALL_HINT) is hint
    assert text.text.count("history_search") == (1 if hint else 0)
