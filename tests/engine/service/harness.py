"""An in-process engine over a real store, with a host that records what it was told."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from sidecar.engine.service import Engine
from sidecar.model.config import Config, build
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import AssistantMessage, MessageTime, ModelRef, UserMessage
from sidecar.model.parts import Part, TextPart, ToolCompleted, ToolPart, ToolTime
from sidecar.model.rpc import (
    CompactingHookResult,
    Event,
    SummarizerCompleteParams,
    SummarizerCompleteResult,
)
from sidecar.model.session import Session, SessionTime
from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.protocol.methods import notification_method
from sidecar.store import Store

enc = msgspec.json.encode
MODEL = ModelRef(provider_id="anthropic", model_id="claude-sonnet-4-5")  # 200k / 64k in catalog


@dataclass
class RecordingHost:
    events: list[tuple[str, str, Any]] = field(default_factory=list)
    logs: list[str] = field(default_factory=list)
    hook_results: list[CompactingHookResult] = field(default_factory=list)

    def publish(self, session_id: str, event: Event, skip: object | None = None) -> None:
        self.events.append((session_id, notification_method(event), event))

    def log(self, text: str) -> None:
        self.logs.append(text)

    async def compacting_hook(self, session_id: str) -> list[CompactingHookResult]:
        return list(self.hook_results)

    def progress(self, session_id: str, token: str | int, value: dict[str, Any]) -> None:
        self.events.append((session_id, "$/progress", {"token": token, "value": value}))

    async def client_complete(self, params: SummarizerCompleteParams) -> SummarizerCompleteResult:
        raise AssertionError("no client summarizer in these tests")

    def methods(self, name: str) -> list[Any]:
        return [p for _, m, p in self.events if m == name]


class Harness:
    def __init__(self, store: Store, overrides: dict[str, Any] | None = None) -> None:
        self.store = store
        self.host = RecordingHost()
        self.cfg: Config = build([overrides or {}])
        self.engine = Engine(store, self.host, lambda: self.cfg)
        self.clock = 0

    def tick(self) -> int:
        """A frontend's clock: a second between messages. What the daemon appends is stamped
        right after the session's latest message (1 ms apart), so it sorts before these."""
        self.clock = max(self.clock + 1_000, now_ms())
        return self.clock

    async def session(self) -> Session:
        s = Session(id=new_id("ses"), title="t", time=SessionTime(created=1, updated=1))
        await self.store.put_session(s)
        return s

    async def put(self, info: Any, *parts: Part) -> None:
        await self.store.put_message(info, enc(info))
        for p in parts:
            await self.store.put_part(p, enc(p))

    async def user(self, sid: str, text: str) -> UserMessage:
        m = UserMessage(
            id=new_id("msg"), session_id=sid, time=MessageTime(created=self.tick()), model=MODEL
        )
        await self.put(m, TextPart(id=new_id("prt"), session_id=sid, message_id=m.id, text=text))
        return m

    async def first_turn(self, **reply: Any) -> tuple[Session, AssistantMessage]:
        """A new session with one user turn ("go") and the assistant's reply to it."""
        s = await self.session()
        u = await self.user(s.id, "go")
        return s, await self.assistant(s.id, u.id, **reply)

    async def ended_turn(self, **reply: Any) -> Session:
        """``first_turn``, its end reported as the frontend does, and the work it started done."""
        s, a = await self.first_turn(**reply)
        self.engine.message_stored(a)
        await self.settle()
        return s

    async def assistant(
        self,
        sid: str,
        parent: str,
        *,
        text: str = "All done. " * 400,
        tool_output: str | None = None,
        tool: str = "bash",
        finish: str | None = "stop",
        input_tokens: int = 1_000,
        cache_read: int = 0,
        model: ModelRef = MODEL,
        error: Any = None,
    ) -> AssistantMessage:
        m = AssistantMessage(
            id=new_id("msg"),
            session_id=sid,
            parent_id=parent,
            time=MessageTime(created=self.tick()),
            provider_id=model.provider_id,
            model_id=model.model_id,
            finish=finish,
            error=error,
            tokens=Tokens(input=input_tokens, output=100, cache=CacheTokens(read=cache_read)),
        )
        parts: list[Part] = []
        if tool_output is not None:
            parts.append(
                ToolPart(
                    id=new_id("prt"),
                    session_id=sid,
                    message_id=m.id,
                    call_id=new_id("prt"),
                    tool=tool,
                    state=ToolCompleted(
                        input={"command": "cat big.txt"},
                        output=tool_output,
                        time=ToolTime(start=1, end=2),
                    ),
                )
            )
        parts.append(TextPart(id=new_id("prt"), session_id=sid, message_id=m.id, text=text))
        await self.put(m, *parts)
        return m

    async def settle(self) -> None:
        """End every turn (as a frontend's ``session/idle`` would), then wait until every
        background task the engine started has finished."""
        await self.engine.settle()
