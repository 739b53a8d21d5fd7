"""A small in-process harness for collapse tests: a real store, the compactor or the engine
service with a recording host, and a session writer that keeps the bytes it stored.

Times come from a monotonic clock at (or after) the wall clock, so messages written after a
compaction sort after its marker and summary, as a frontend's would.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from sidecar.engine import render
from sidecar.engine.compactor import Compactor, Outcome, Request
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
from sidecar.model import messages as mm
from sidecar.model import parts as mp
from sidecar.model.config import Config, build
from sidecar.model.conversation import compaction_part, is_marker, is_summary
from sidecar.model.ids import new_id, now_ms
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.store import Store
from sidecar.summarizers.base import Progress, SummaryRequest, SummaryResult
from sidecar.summarizers.extractive import ExtractiveSummarizer
from tests.engine.service.harness import RecordingHost

from .specs import StepSpec, ToolSpec, TurnSpec

enc = msgspec.json.encode
MODEL = mm.ModelRef(provider_id="test", model_id="collapse-model")
WRITE_TOOLS = ("edit", "write")


# -- host and writer ---------------------------------------------------------------------------


class RecordingWriter(ExtractiveSummarizer):
    """The extractive writer, remembering every request it was sent."""

    def __init__(self) -> None:
        self.requests: list[SummaryRequest] = []

    async def summarize(
        self, req: SummaryRequest, progress: Progress | None = None
    ) -> SummaryResult:
        self.requests.append(req)
        return await super().summarize(req, progress)


def config(method: str = "collapse", **compaction: Any) -> Config:
    """A config with ``compaction.method``; extra keys use their wire (camelCase) names."""
    return build([{"compaction": {"method": method, **compaction}}])


@contextlib.asynccontextmanager
async def fresh_store() -> AsyncIterator[Store]:
    """A store on a new file in a temporary directory (one per hypothesis example)."""
    with tempfile.TemporaryDirectory(prefix="collapse-") as tmp:
        store = await Store.open(Path(tmp) / "s.db", synchronous="OFF")
        try:
            yield store
        finally:
            await store.close()


# -- session specs -----------------------------------------------------------------------------


def filler(tag: str, n: int) -> str:
    """``n`` characters (at least the tag) that start with a unique, searchable tag."""
    words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor "
    body = (words * (n // len(words) + 1))[: max(0, n - len(tag) - 1)]
    return f"{tag} {body}".rstrip() if body else tag


def file_path(n: int) -> str:
    return f"src/pkg/module_{n:02d}.py"


# -- the writer --------------------------------------------------------------------------------


class Writer:
    """Writes sessions into ``store`` and remembers the exact bytes of every message and part."""

    def __init__(self, store: Store, host: RecordingHost | None = None) -> None:
        self.store = store
        self.host = host or RecordingHost()
        self.compactor = Compactor(store, self.host)
        self.raw: dict[str, bytes] = {}  # id -> bytes written (messages and parts)
        self.last = 0
        self.counter = 0
        self.modified: dict[str, set[str]] = {}  # message id -> files a completed tool wrote
        self.texts: dict[str, list[str]] = {}  # message id -> unique tags of its texts

    def tick(self) -> int:
        self.last = max(self.last + 1, now_ms())
        return self.last

    def tag(self, kind: str) -> str:
        self.counter += 1
        return f"<{kind}-{self.counter:05d}>"

    async def sync_clock(self, sid: str) -> None:
        """Move the clock past everything stored (compaction appends with its own clock)."""
        msgs = await self.store.window(sid)
        if msgs:
            self.last = max(self.last, max(m.info.time.created for m in msgs))

    async def session(self) -> Session:
        t = now_ms()
        s = Session(id=new_id("ses"), title="collapse", time=SessionTime(created=t, updated=t))
        await self.store.put_session(s)
        return s

    async def put(
        self, info: mm.UserMessage | mm.AssistantMessage, parts: Sequence[mp.Part]
    ) -> None:
        raw_m = enc(info)
        raw_p = [enc(p) for p in parts]
        self.raw[info.id] = raw_m
        for p, r in zip(parts, raw_p, strict=True):
            self.raw[p.id] = r
        await self.store.put_many([(info, raw_m)], list(zip(parts, raw_p, strict=True)))

    async def user(self, sid: str, size: int) -> mm.UserMessage:
        m = mm.UserMessage(
            id=new_id("msg"),
            session_id=sid,
            time=mm.MessageTime(created=self.tick()),
            model=MODEL,
            agent="build",
        )
        tag = self.tag("user")
        self.texts[m.id] = [tag]
        part = mp.TextPart(
            id=new_id("prt"), session_id=sid, message_id=m.id, text=filler(tag, size)
        )
        await self.put(m, [part])
        return m

    def _tool(self, sid: str, mid: str, spec: ToolSpec) -> mp.ToolPart:
        tag = self.tag("out")
        if spec.tool in ("edit", "write", "read"):
            args: dict[str, Any] = {"filePath": file_path(spec.file)}
            if spec.tool == "edit":
                args |= {"oldString": "a", "newString": "b"}
            elif spec.tool == "write":
                args["content"] = "x = 1\n"
        elif spec.tool == "bash":
            args = {"command": f"ls -la dir{spec.file}", "description": "list"}
        else:
            args = {"pattern": f"needle{spec.file}"}
        state: Any
        if spec.status == "completed":
            state = mp.ToolCompleted(
                input=args,
                output=filler(tag, spec.size),
                title=spec.tool,
                time=mp.ToolTime(start=1, end=2),
            )
            if spec.tool in WRITE_TOOLS:
                self.modified.setdefault(mid, set()).add(args["filePath"])
        elif spec.status == "error":
            state = mp.ToolError(
                input=args, error=filler(tag, spec.size), time=mp.ToolTime(start=1, end=2)
            )
        elif spec.status == "pending":
            state = mp.ToolPending(input=args)
        else:
            state = mp.ToolRunning(input=args, time=mp.ToolTime(start=1))
        self.texts.setdefault(mid, []).append(tag)
        return mp.ToolPart(
            id=new_id("prt"),
            session_id=sid,
            message_id=mid,
            call_id=f"call_{new_id('prt')}",
            tool=spec.tool,
            state=state,
        )

    async def step(
        self, sid: str, parent: str, spec: StepSpec, finish: str | None, input_tokens: int = 0
    ) -> mm.AssistantMessage:
        mid = new_id("msg")
        parts: list[mp.Part] = [mp.StepStartPart(id=new_id("prt"), session_id=sid, message_id=mid)]
        if spec.reasoning:
            tag = self.tag("think")
            self.texts.setdefault(mid, []).append(tag)
            parts.append(
                mp.ReasoningPart(
                    id=new_id("prt"), session_id=sid, message_id=mid, text=filler(tag, 80)
                )
            )
        if spec.text:
            tag = self.tag("say")
            self.texts.setdefault(mid, []).append(tag)
            parts.append(
                mp.TextPart(
                    id=new_id("prt"), session_id=sid, message_id=mid, text=filler(tag, spec.text)
                )
            )
        parts += [self._tool(sid, mid, t) for t in spec.tools]
        parts.append(
            mp.StepFinishPart(id=new_id("prt"), session_id=sid, message_id=mid, reason=finish or "")
        )
        error = None
        if spec.error is not None:
            error = mm.MessageError(name=spec.error, data={"message": "step failed"})
            finish = None
        t = self.tick()
        m = mm.AssistantMessage(
            id=mid,
            session_id=sid,
            parent_id=parent,
            time=mm.MessageTime(created=t, completed=t),
            provider_id=MODEL.provider_id,
            model_id=MODEL.model_id,
            mode="build",
            agent="build",
            finish=finish,
            error=error,
            tokens=Tokens(input=input_tokens, output=10, cache=CacheTokens()),
        )
        await self.put(m, parts)
        return m

    async def turn(self, sid: str, spec: TurnSpec) -> list[str]:
        """A user prompt and its assistant steps; returns the new message ids."""
        u = await self.user(sid, spec.user)
        ids = [u.id]
        for i, step in enumerate(spec.steps):
            last = i == len(spec.steps) - 1
            finish = "tool-calls" if step.tools and not last else "stop"
            a = await self.step(sid, u.id, step, finish)
            ids.append(a.id)
        return ids

    async def turns(self, sid: str, specs: Sequence[TurnSpec]) -> list[str]:
        await self.sync_clock(sid)
        out: list[str] = []
        for spec in specs:
            out += await self.turn(sid, spec)
        return out

    async def compact(
        self, sid: str, cfg: Config, *, auto: bool = False, writer: Any = None
    ) -> Outcome:
        outcome = await self.compactor.run(
            Request(session_id=sid, auto=auto), cfg, writer or ExtractiveSummarizer()
        )
        await self.sync_clock(sid)
        return outcome

    async def window(self, sid: str) -> list[mm.WithParts]:
        session = await self.store.require_session(sid)
        return await load_window(self.store, session)

    async def stored(self, sid: str) -> dict[str, bytes]:
        """Stored JSON of every message and part of the session, by id."""
        page, _ = await self.store.page_raw(sid, None, None)
        out: dict[str, bytes] = {}
        for m in page:
            info = msgspec.json.decode(m.info)
            out[info["id"]] = bytes(m.info)
            for p in m.parts:
                out[msgspec.json.decode(p)["id"]] = bytes(p)
        return out


# -- checks ------------------------------------------------------------------------------------


def size(window: Sequence[mm.WithParts]) -> int:
    return estimate_messages(window)


def check_openai(messages: list[dict[str, Any]]) -> None:
    """Every ``tool`` message answers a call of the assistant message right before the run of
    tool messages it belongs to; every call is answered exactly once, right after its call."""
    seen_calls: set[str] = set()
    i = 0
    while i < len(messages):
        msg = messages[i]
        assert msg["role"] != "tool", f"tool result without its call at {i}: {msg}"
        i += 1
        if msg["role"] != "assistant" or not msg.get("tool_calls"):
            continue
        calls = [c["id"] for c in msg["tool_calls"]]
        assert len(set(calls)) == len(calls), f"duplicate call ids in one step: {calls}"
        assert not seen_calls & set(calls), f"call id used twice: {seen_calls & set(calls)}"
        seen_calls |= set(calls)
        answered: list[str] = []
        while i < len(messages) and messages[i]["role"] == "tool":
            answered.append(messages[i]["tool_call_id"])
            i += 1
        assert sorted(answered) == sorted(calls), f"calls {calls} answered by {answered}"


def check_anthropic(messages: list[dict[str, Any]]) -> None:
    """Roles alternate, starting with the user; each ``tool_use`` is answered by exactly one
    ``tool_result`` in the next (user) message, and no result lacks its ``tool_use``."""
    assert messages, "empty context"
    assert messages[0]["role"] == "user", "the first message must be a user message"
    for a, b in itertools.pairwise(messages):
        assert a["role"] != b["role"], "roles must alternate"
    for i, msg in enumerate(messages):
        blocks = msg["content"]
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if msg["role"] == "assistant":
            assert not results
            if uses:
                assert i + 1 < len(messages), "tool_use at the very end has no result"
                nxt = [
                    b["tool_use_id"]
                    for b in messages[i + 1]["content"]
                    if b["type"] == "tool_result"
                ]
                assert sorted(nxt) == sorted(uses), f"uses {uses} answered by {nxt}"
        else:
            assert not uses
            if results:
                assert i > 0
                prev = [b["id"] for b in messages[i - 1]["content"] if b["type"] == "tool_use"]
                assert set(results) <= set(prev), f"results {results} without uses {prev}"
                assert len(set(results)) == len(results)
                # results come first in the user message
                kinds = [b["type"] for b in blocks]
                assert kinds[: len(results)] == ["tool_result"] * len(results)


def check_rendered(window: Sequence[mm.WithParts]) -> None:
    check_openai(render.to_openai(window))
    check_anthropic(render.to_anthropic(window))


def check_boundaries(window: Sequence[mm.WithParts], stored_ids: set[str]) -> None:
    """A compacted window starts with its marker and summary; a collapse marker points at a
    stored message that is in the window."""
    markers = [m for m in window if is_marker(m)]
    if not markers or not any(is_summary(m) and m.info.finish for m in window):
        return
    head = window[0]
    assert is_marker(head), "a compacted window starts with its marker"
    assert is_summary(window[1]) and isinstance(window[1].info, mm.AssistantMessage)
    assert window[1].info.parent_id == head.info.id
    part = compaction_part(head)
    assert part is not None
    if part.tail_start_id is not None:
        assert part.tail_start_id in stored_ids
        assert part.tail_start_id in {m.info.id for m in window}
