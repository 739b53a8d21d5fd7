"""Builders for typed histories and small test doubles."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from sidecar.engine import bounded
from sidecar.model.config import SummarizerConfig
from sidecar.model.messages import AssistantMessage, MessageError, UserMessage, WithParts
from sidecar.model.parts import (
    Part,
    PatchPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
    ToolRunning,
    ToolTime,
)
from sidecar.model.tokens import Tokens
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    SummaryRequest,
    SummaryResult,
)

SID = "ses_test"
_ids = itertools.count(1)


def _next(prefix: str) -> str:
    return f"{prefix}_{next(_ids):06d}"


def text(value: str, **kw: Any) -> TextPart:
    return TextPart(session_id=SID, message_id="", text=value, **kw)


def tool(
    name: str,
    input: dict[str, Any],
    output: str = "",
    *,
    error: str | None = None,
    running: bool = False,
    metadata: dict[str, Any] | None = None,
    compacted: bool = False,
) -> ToolPart:
    state: Any
    if error is not None:
        state = ToolError(input=input, error=error)
    elif running:
        state = ToolRunning(input=input)
    else:
        state = ToolCompleted(
            input=input,
            output=output,
            metadata=metadata,
            time=ToolTime(start=1, end=2, compacted=3 if compacted else None),
        )
    return ToolPart(session_id=SID, message_id="", call_id=_next("call"), tool=name, state=state)


def bash(command: str, output: str = "", *, exit: int | None = None) -> ToolPart:
    """A completed ``bash`` call; ``exit``: the status its metadata reports."""
    return tool(
        "bash", {"command": command}, output, metadata=None if exit is None else {"exit": exit}
    )


def patch(*files: str) -> PatchPart:
    return PatchPart(session_id=SID, message_id="", hash="abc", files=list(files))


def _attach(mid: str, parts: tuple[Part, ...]) -> list[Part]:
    out = []
    for i, part in enumerate(parts):
        part.message_id = mid
        part.id = part.id or f"prt_{mid}_{i:03d}"
        out.append(part)
    return out


def user(*parts: Part | str, created: int = 0) -> WithParts:
    mid = _next("msg")
    items = tuple(text(p) if isinstance(p, str) else p for p in parts)
    info = UserMessage(id=mid, session_id=SID)
    info.time.created = created
    return WithParts(info=info, parts=_attach(mid, items))


def assistant(*parts: Part | str, error: MessageError | None = None) -> WithParts:
    mid = _next("msg")
    items = tuple(text(p) if isinstance(p, str) else p for p in parts)
    info = AssistantMessage(
        id=mid,
        session_id=SID,
        parent_id="",
        provider_id="test",
        model_id="test",
        tokens=Tokens(),
        finish="stop",
        error=error,
    )
    return WithParts(info=info, parts=_attach(mid, items))


class SleepRecorder:
    """Injected instead of asyncio.sleep: records the backoff delays, waits only a tick."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await asyncio.sleep(0)


def writer_config(provider: dict[str, Any], **fields: Any) -> SummarizerConfig:
    """A provider writer's config with the tests' short timeouts and three retries."""
    limits = {"timeout": 5.0, "deadline": 30.0, "max_retries": 3}
    return SummarizerConfig(**{**limits, **provider, **fields})


def offline_summary(history: list[WithParts], max_tokens: int = 4_000) -> str:
    """The offline writer's summary of ``history`` under OpenCode's prompts."""
    from sidecar.summarizers.extractive import summarize_extractive

    req = SummaryRequest(
        system=COMPACTION_SYSTEM,
        prompt=DEFAULT_PROMPT,
        history=history,
        rendered=[],
        max_tokens=max_tokens,
    )
    return summarize_extractive(req)


def summary_request(defaults: dict[str, Any], **fields: Any) -> SummaryRequest:
    """A request with OpenCode's compaction system prompt and default prompt."""
    prompts = {"system": COMPACTION_SYSTEM, "prompt": DEFAULT_PROMPT}
    return SummaryRequest(**{**prompts, **defaults, **fields})


async def summarize_bounded(
    writer: Any, history: list[WithParts], previous: list[str], **limits: Any
) -> SummaryResult:
    """``bounded.summarize`` with OpenCode's compaction prompts and no reference files."""
    return await bounded.summarize(
        writer,
        system=COMPACTION_SYSTEM,
        prompt=DEFAULT_PROMPT,
        history=history,
        reference=[],
        previous=previous,
        **limits,
    )
