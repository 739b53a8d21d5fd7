"""Token counts and model limits, exactly as OpenCode reports and configures them."""

from __future__ import annotations

import msgspec

from sidecar.model.base import Base, Count, Dense

CHARS_PER_TOKEN = 4


def js_length(text: str) -> int:
    """``String.prototype.length``: UTF-16 code units (characters beyond the BMP count twice)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le")) // 2


def estimate(text: str | None) -> int:
    """OpenCode's ``Math.max(0, Math.round((text || "").length / 4))`` in exact integers.

    Prune decisions hinge on exact thresholds, so this must round half-up like JavaScript
    (not Python's half-to-even) and count length in UTF-16 code units like JavaScript.
    """
    if not text:
        return 0
    # floor(n/4 + 0.5) == (n + 2) // 4 for n >= 0, with no float rounding at any size.
    return (js_length(text) + CHARS_PER_TOKEN // 2) // CHARS_PER_TOKEN


class CacheTokens(Dense, kw_only=True):
    read: Count = 0
    write: Count = 0


class Tokens(Dense, kw_only=True):
    """Usage of one model call; ``cache`` counts are apart from ``input`` (Anthropic style)."""

    input: Count = 0
    output: Count = 0
    reasoning: Count = 0
    cache: CacheTokens = msgspec.field(default_factory=CacheTokens)


class ModelLimit(Base, kw_only=True):
    """A model's window. ``input`` is set only where the provider caps the prompt separately."""

    context: Count = 0
    output: Count = 0
    input: Count | None = None
