"""Small text helpers shared by the summary writers (no I/O, no engine imports)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from sidecar.model import parts
from sidecar.model.conversation import CLEARED, INTERRUPTED
from sidecar.model.messages import AssistantMessage, WithParts
from sidecar.model.tokens import estimate

_WS = re.compile(r"\s+")
_BEARER = re.compile(r"(?i)\bbearer\s+[^\s\"',;]+")
_KEYLIKE = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_\-]{12,}")
REDACTED = "[REDACTED]"

_json = msgspec.json.Encoder()


estimate_tokens = estimate


def one_line(text: str) -> str:
    """Collapse every run of whitespace (newlines included) into one space."""
    return _WS.sub(" ", text).strip()


def trim(text: str, limit: int) -> str:
    """``text`` on one line, cut to at most ``limit`` characters with an ellipsis."""
    flat = one_line(text)
    if len(flat) <= limit:
        return flat
    return flat[: max(0, limit - 1)].rstrip() + "…"


def first_line(text: str, limit: int = 120) -> str:
    """The first non-blank line of ``text``, trimmed."""
    for line in text.splitlines():
        if line.strip():
            return trim(line, limit)
    return ""


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Remove secrets (exact values, ``Bearer …`` tokens, ``sk-…``-looking keys) from ``text``."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, REDACTED)
    text = _BEARER.sub("Bearer " + REDACTED, text)
    return _KEYLIKE.sub(REDACTED, text)


def to_json(value: Any) -> str:
    try:
        return _json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        return str(value)


# -- plain-text transcripts (used for "reference only" blocks) ----------------------------------

_PART_CAP = 2_000


def transcript(history: Sequence[WithParts], *, part_cap: int = _PART_CAP) -> str:
    """A readable plain-text rendering of typed messages, each part capped to ``part_cap``."""
    out: list[str] = []
    for msg in history:
        role = "assistant" if isinstance(msg.info, AssistantMessage) else "user"
        for part in msg.parts:
            line = _part_line(part, part_cap)
            if line:
                out.append(f"[{role}] {line}")
    return "\n".join(out)


def _cap(text: str, cap: int) -> str:
    text = text.strip()
    return text if len(text) <= cap else text[:cap] + f"… [{len(text) - cap} more chars]"


def _part_line(part: object, cap: int) -> str:
    if isinstance(part, parts.TextPart):
        return "" if part.ignored or not part.text.strip() else _cap(part.text, cap)
    if isinstance(part, parts.ReasoningPart):
        return ""
    if isinstance(part, parts.ToolPart):
        state = part.state
        head = f"tool {part.tool} {_cap(to_json(state.input), cap // 4)}"
        if isinstance(state, parts.ToolCompleted):
            if state.time.compacted:
                return f"{head} -> {CLEARED}"
            return head + " -> " + _cap(state.output, cap)
        if isinstance(state, parts.ToolError):
            return head + " -> error: " + _cap(state.error, cap)
        return f"{head} -> {INTERRUPTED}"
    if isinstance(part, parts.FilePart):
        return f"file {part.filename or part.mime}"
    if isinstance(part, parts.SubtaskPart):
        return f"subtask {part.description or part.prompt}".strip()
    return ""


def transcript_from_rendered(
    messages: Sequence[dict[str, Any]], *, part_cap: int = _PART_CAP
) -> str:
    """Plain text from messages already rendered in OpenAI or Anthropic shape."""
    out: list[str] = []
    for msg in messages:
        role = str(msg.get("role", "user"))
        content = msg.get("content")
        pieces: list[str] = []
        if isinstance(content, str):
            pieces.append(_cap(content, part_cap))
        elif isinstance(content, list):
            for block in content:
                if not isinstance(block, dict):
                    continue
                kind = block.get("type")
                if kind == "text" and isinstance(block.get("text"), str):
                    pieces.append(_cap(block["text"], part_cap))
                elif kind == "tool_use":
                    pieces.append(
                        f"tool {block.get('name')} {_cap(to_json(block.get('input')), 500)}"
                    )
                elif kind == "tool_result":
                    inner = block.get("content")
                    if isinstance(inner, list):
                        inner = " ".join(
                            str(b.get("text", "")) for b in inner if isinstance(b, dict)
                        )
                    pieces.append("tool result: " + _cap(str(inner or ""), part_cap))
        for call in msg.get("tool_calls") or ():
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            pieces.append(f"tool {fn.get('name')} {_cap(str(fn.get('arguments', '')), 500)}")
        for piece in pieces:
            if piece:
                out.append(f"[{role}] {piece}")
    return "\n".join(out)
