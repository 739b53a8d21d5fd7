"""Concise builders for sessions of ``WithParts`` (ids and times ascend in build order)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from sidecar.model.messages import (
    AssistantMessage,
    MessageError,
    MessageTime,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import (
    CompactionPart,
    FilePart,
    Part,
    ReasoningPart,
    StepFinishPart,
    StepStartPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolPending,
    ToolRunning,
    ToolTime,
)

SID = "ses_test"  # parts get their message_id when they join a message


def chars(tokens: int) -> str:
    """A string whose estimate is exactly ``tokens`` (4 characters a token)."""
    return "x" * (4 * tokens)


def text(value: str, **kw: Any) -> TextPart:
    return TextPart(session_id=SID, message_id="", text=value, **kw)


def reasoning(value: str) -> ReasoningPart:
    return ReasoningPart(session_id=SID, message_id="", text=value)


def step() -> StepStartPart:
    return StepStartPart(session_id=SID, message_id="")


def finish() -> StepFinishPart:
    return StepFinishPart(session_id=SID, message_id="", reason="stop")


def file(mime: str, url: str = "https://example.com/f", filename: str | None = None) -> FilePart:
    return FilePart(session_id=SID, message_id="", mime=mime, url=url, filename=filename)


def compaction(auto: bool = True, tail: str | None = None) -> CompactionPart:
    return CompactionPart(session_id=SID, message_id="", auto=auto, tail_start_id=tail)


def subtask() -> SubtaskPart:
    return SubtaskPart(session_id=SID, message_id="", prompt="p", description="d", agent="general")


def tool(
    name: str = "bash",
    output: str = "ok",
    *,
    call: str | None = None,
    status: str = "completed",
    compacted: int | None = None,
    error: str = "boom",
    input: dict[str, Any] | None = None,
    attachments: list[FilePart] | None = None,
) -> ToolPart:
    args = {"cmd": "ls"} if input is None else input
    state: ToolCompleted | ToolError | ToolPending | ToolRunning
    if status == "completed":
        time = ToolTime(start=1, end=2, compacted=compacted)
        state = ToolCompleted(input=args, output=output, time=time, attachments=attachments)
    elif status == "error":
        state = ToolError(input=args, error=error)
    elif status == "pending":
        state = ToolPending(input=args)
    else:
        state = ToolRunning(input=args)
    return ToolPart(session_id=SID, message_id="", call_id=call or "", tool=name, state=state)


class Session:
    """Appends messages with ascending ``msg_NNNN``/``prt_NNNN`` ids and creation times."""

    def __init__(self) -> None:
        self.messages: list[WithParts] = []
        self._n = 0
        self._last_user = ""

    def _next(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n:04d}"

    def _attach(self, mid: str, parts: tuple[Part | str, ...]) -> list[Part]:
        out: list[Part] = []
        for p in parts:
            part = text(p) if isinstance(p, str) else p
            pid = self._next("prt")
            if isinstance(part, ToolPart) and not part.call_id:
                part = msgspec.structs.replace(part, call_id=f"call_{pid}")
            out.append(msgspec.structs.replace(part, id=pid, message_id=mid))
        return out

    def user(self, *parts: Part | str) -> WithParts:
        mid = self._next("msg")
        info = UserMessage(id=mid, session_id=SID, time=MessageTime(created=self._n))
        msg = WithParts(info=info, parts=self._attach(mid, parts))
        self._last_user = mid
        self.messages.append(msg)
        return msg

    def assistant(
        self,
        *parts: Part | str,
        parent: str | None = None,
        summary: bool | None = None,
        finish: str | None = "stop",
        error: str | None = None,
    ) -> WithParts:
        mid = self._next("msg")
        info = AssistantMessage(
            id=mid,
            session_id=SID,
            time=MessageTime(created=self._n),
            parent_id=self._last_user if parent is None else parent,
            provider_id="p",
            model_id="m",
            summary=summary,
            finish=finish,
            error=MessageError(name=error) if error else None,
        )
        msg = WithParts(info=info, parts=self._attach(mid, parts))
        self.messages.append(msg)
        return msg

    def turn(self, *parts: Part | str) -> WithParts:
        """A user prompt and the assistant reply made of ``parts``; returns the reply."""
        self.user("do it")
        return self.assistant(*parts)

    def compact(
        self, *, tail: str | None = None, finish: str | None = "stop", error: str | None = None
    ) -> tuple[WithParts, WithParts]:
        """A compaction marker and its summary reply."""
        marker = self.user(compaction(tail=tail))
        summary = self.assistant("summary of it all", summary=True, finish=finish, error=error)
        return marker, summary

    def newest_first(self) -> Iterator[WithParts]:
        return reversed(self.messages)


def ids(msgs: list[WithParts]) -> list[str]:
    return [m.info.id for m in msgs]
