"""Issue 10 in the engine: automatic work on a snapshot in write order, and errors that say why."""

from __future__ import annotations

from sidecar.model.messages import MessageTime, UserMessage
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.model.tokens import Tokens
from sidecar.store import Store
from sidecar.summarizers.base import SummaryError, SummaryRequest, SummaryResult

from .harness import Harness

OVER = 180_000  # claude-sonnet-4-5: usable 168k


class _Writer:
    provider_id = "test"
    model_id = "test-1"
    wire_format = "parts"

    def __init__(self, text: str = "a summary", fail: Exception | None = None) -> None:
        self.text, self.fail = text, fail

    def input_limit(self) -> int | None:
        return None

    async def summarize(self, req: SummaryRequest, progress: object = None) -> SummaryResult:
        if self.fail is not None:
            raise self.fail
        return SummaryResult(self.text, Tokens(output=3), self.provider_id, self.model_id)

    async def aclose(self) -> None: ...


def _use(h: Harness, writer: _Writer) -> None:
    h.engine.use_writer(h.cfg.summarizer, writer)  # type: ignore[arg-type]


async def _pruned(store: Store, sid: str) -> list[str]:
    return sorted(
        p.id
        for m in await store.window(sid)
        for p in m.parts
        if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted) and p.state.time.compacted
    )


async def _history(h: Harness, sid: str, turns: int) -> None:
    for i in range(turns):
        u = await h.user(sid, f"read file {i}")
        a = await h.assistant(sid, u.id, tool_output=f"{i}" * 50_000, text="ok")
        h.engine.message_stored(a)
    await h.settle()


async def test_turn_end_prune_sees_the_session_as_of_its_turn(store: Store) -> None:
    """The next turn's writes landing before the prune runs change nothing it stores."""
    runs: list[list[str]] = []
    for racing in (False, True):
        h = Harness(store)
        s = await h.session()
        await _history(h, s.id, 6)
        u = await h.user(s.id, "one more")
        last = await h.assistant(s.id, u.id, tool_output="z" * 50_000, text="ok")
        committed = h.engine.will_store(last)
        assert committed is not None
        if racing:  # the frontend's next turn is stored first
            u2 = await h.user(s.id, "and the next")
            await h.assistant(s.id, u2.id, tool_output="w" * 50_000, finish=None)
        committed(None, None)
        await h.settle()
        pruned = await _pruned(store, s.id)
        assert pruned, "this history prunes"
        times = {
            p.state.time.compacted
            for m in await store.window(s.id)
            for p in m.parts
            if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
        } - {None}
        assert times == {last.time.created}  # marked on the session's timeline, not the clock
        runs.append([await _rank(store, s.id, pid) for pid in pruned])
    assert runs[0] == runs[1]


async def _rank(store: Store, sid: str, part_id: str) -> int:
    """A part's position among the session's tool parts (ids differ between the two runs)."""
    tools = [p.id for m in await store.window(sid) for p in m.parts if isinstance(p, ToolPart)]
    return tools.index(part_id)


async def test_failed_write_runs_no_automatic_work(store: Store) -> None:
    h = Harness(store)
    s = await h.session()
    u = await h.user(s.id, "go")
    a = await h.assistant(s.id, u.id, input_tokens=OVER)
    committed = h.engine.will_store(a)
    assert committed is not None
    committed(None, ConnectionError("not stored"))
    await h.engine.idle(s.id)
    assert h.host.methods("session/compacted") == []


async def test_overflow_compaction_cannot_help_says_so(store: Store) -> None:
    h = Harness(store)
    _use(h, _Writer(text="a long summary " * 2_000))  # no smaller than the tiny history
    s = await h.session()
    u = await h.user(s.id, "hi")
    a = await h.assistant(s.id, u.id, text="short answer", input_tokens=OVER)
    h.engine.message_stored(a)
    await h.settle()
    errors = [e.error for e in h.host.methods("session/status") if e.status == "error"]
    assert errors and "compaction cannot help" in errors[-1]
    assert "system prompt" in errors[-1]


async def test_loop_guard_blames_an_unreachable_summarizer_not_model_limits(
    store: Store,
) -> None:
    h = Harness(store, {"summarizer": {"fallback": None}})
    _use(h, _Writer(fail=SummaryError("connection refused by 127.0.0.1:9")))
    s = await h.session()
    for i in range(3):
        u = await h.user(s.id, f"turn {i}")
        a = await h.assistant(s.id, u.id, input_tokens=OVER)
        h.engine.message_stored(a)
        await h.settle()
    last = [e.error for e in h.host.methods("session/status") if e.status == "error"][-1]
    assert last is not None
    assert "the last compaction failed (connection refused" in last
    assert "check the summarizer" in last and "model limits" not in last


async def test_a_message_written_during_compaction_behind_its_marker_is_reported(
    store: Store,
) -> None:
    h = Harness(store)
    s = await h.session()
    u = await h.user(s.id, "go")
    a = await h.assistant(s.id, u.id, input_tokens=OVER)
    committed = h.engine.will_store(a)
    assert committed is not None
    # The frontend's next message, stamped in the same millisecond, lands before the work runs.
    late = UserMessage(id=a.id + "z", session_id=s.id, time=MessageTime(created=a.time.created))
    await h.put(late)
    committed(None, None)
    await h.settle()
    assert len(h.host.methods("session/compacted")) == 1
    assert [t for t in h.host.logs if late.id in t and "behind the compaction boundary" in t]
    # A message written later with an honest clock is not reported.
    h.host.logs.clear()
    u2 = await h.user(s.id, "next")
    h.engine.message_stored(u2)  # what the server calls for every message write
    assert h.host.logs == []
