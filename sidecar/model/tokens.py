"""Token counts and model limits, exactly as OpenCode reports and configures them."""

from __future__ import annotations

import msgspec

from sidecar.model.base import Base, Dense


class CacheTokens(Dense, kw_only=True):
    read: int = 0
    write: int = 0


class Tokens(Dense, kw_only=True):
    """Usage of one model call; ``cache`` counts are apart from ``input`` (Anthropic style)."""

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache: CacheTokens = msgspec.field(default_factory=CacheTokens)


class ModelLimit(Base, kw_only=True):
    """A model's window. ``input`` is set only where the provider caps the prompt separately."""

    context: int = 0
    output: int = 0
    input: int | None = None
