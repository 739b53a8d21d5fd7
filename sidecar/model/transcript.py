"""The neutral transcript JSONL format of ``replay`` and ``import`` (header line, then messages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import msgspec


class TPart(msgspec.Struct, kw_only=True):
    type: Literal["text", "reasoning", "tool"]
    text: str = ""
    tool: str = ""
    callID: str = ""
    input: dict[str, Any] = msgspec.field(default_factory=dict)
    output: str = ""
    status: Literal["completed", "error"] = "completed"

    def completed_state(self, at: int) -> dict[str, Any]:
        """OpenCode's ``completed`` tool state for this tool part, run at ``at``."""
        return {
            "status": "completed",
            "input": self.input,
            "output": self.output,
            "title": self.tool,
            "time": {"start": at, "end": at},
        }


class TTokens(msgspec.Struct, kw_only=True):
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0


class TMessage(msgspec.Struct, kw_only=True):
    role: Literal["user", "assistant"]
    parts: list[TPart]
    tokens: TTokens | None = None
    model: str | None = None


class Transcript(msgspec.Struct, kw_only=True):
    session: str
    license: str
    source: str
    messages: list[TMessage]

    @property
    def model(self) -> str:
        return next((m.model for m in self.messages if m.model), None) or "replay-model"


_message = msgspec.json.Decoder(TMessage)


def load(path: Path) -> Transcript:
    """Parse a transcript; a bad line raises ``ValueError`` naming its line number."""
    return parse(path.read_bytes(), str(path))


def parse(data: bytes, name: str) -> Transcript:
    """A transcript from its bytes; a bad line raises ``ValueError`` naming ``name``, the
    line number and (for a wrong type) the field."""
    lines = [(n, ln) for n, ln in enumerate(data.split(b"\n"), start=1) if ln.strip()]
    if not lines:
        raise ValueError(f"{name}: empty transcript")
    n0, first = lines[0]
    try:
        head = msgspec.json.decode(first)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}:{n0}: header: {exc}") from None
    if not isinstance(head, dict):
        raise ValueError(f"{name}:{n0}: header: expected a JSON object")
    messages: list[TMessage] = []
    for n, line in lines[1:]:
        try:
            messages.append(_message.decode(line))
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError) as exc:
            raise ValueError(f"{name}:{n}: {exc}") from None
    return Transcript(
        session=str(head.get("session", Path(name).stem)),
        license=str(head.get("license", "")),
        source=str(head.get("source", "")),
        messages=messages,
    )
