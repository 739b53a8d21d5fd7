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


_header = msgspec.json.Decoder(dict[str, Any])
_message = msgspec.json.Decoder(TMessage)


def load(path: Path) -> Transcript:
    """Parse a transcript; a bad line raises ``ValueError`` naming its line number."""
    lines = [ln for ln in path.read_bytes().splitlines() if ln.strip()]
    if not lines:
        raise ValueError(f"{path}: empty transcript")
    head = _header.decode(lines[0])
    messages: list[TMessage] = []
    for n, line in enumerate(lines[1:], start=2):
        try:
            messages.append(_message.decode(line))
        except msgspec.DecodeError as exc:
            raise ValueError(f"{path}:{n}: {exc}") from None
    return Transcript(
        session=str(head.get("session", path.stem)),
        license=str(head.get("license", "")),
        source=str(head.get("source", "")),
        messages=messages,
    )
