"""Overflow detection (PROTOCOL.md): seed 000's ``isOverflow`` plus ``reserved`` and ``trigger``.

Measured on the token usage the provider reported for the last finished assistant message, so
it is exact where the provider is, and never runs the heuristic estimate.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.model.config import CompactionConfig
from sidecar.model.tokens import ModelLimit, Tokens


@dataclass(frozen=True)
class Overflow:
    """``overflow`` is the decision; ``count`` and ``usable`` are reported even when it is off."""

    overflow: bool
    count: int
    usable: int


def output_reserve(limit: ModelLimit, cfg: CompactionConfig) -> int:
    """The output a call keeps room for: the model's output limit capped at
    ``output_token_max`` (all of it when the model states none)."""
    return min(limit.output, cfg.output_token_max) or cfg.output_token_max


def usable(limit: ModelLimit, cfg: CompactionConfig) -> int:
    """The input a model takes before it overflows: the one definition every caller uses
    (``limit.input``, else ``context`` less the output reserve, less ``reserved``)."""
    return (limit.input or limit.context - output_reserve(limit, cfg)) - cfg.reserved


def trigger_point(room: int, cfg: CompactionConfig) -> int:
    """The turn's token count past which ``check`` compacts, for a usable input of ``room``:
    the fraction trigger, or ``triggerTokens`` when lower."""
    point = int(cfg.effective_trigger() * room)
    if cfg.trigger_tokens is not None:
        point = min(point, cfg.trigger_tokens - 1)
    return point


def check(tokens: Tokens, limit: ModelLimit, cfg: CompactionConfig) -> Overflow:
    """Is the context over budget after the call that used ``tokens``?

    ``count = input + cache.read + output`` (OpenCode's sum: cache.write is not counted).
    The output reserve is the model's output limit capped at ``output_token_max``; a model
    without an output limit (0) reserves the full ``output_token_max``. A separate input cap
    replaces ``context - output``. ``context == 0`` means "unknown/unlimited": never overflow.
    """
    count = tokens.input + tokens.cache.read + tokens.output
    room = usable(limit, cfg)
    if not cfg.auto:
        return Overflow(False, count, room)
    if reaches_trigger_tokens(count, cfg):
        return Overflow(True, count, room)
    if limit.context == 0:
        return Overflow(False, count, room)
    return Overflow(count > cfg.effective_trigger() * room, count, room)


def reaches_trigger_tokens(count: int, cfg: CompactionConfig) -> bool:
    """``compaction.triggerTokens``: compact once a turn's tokens reach it, whatever the
    model's window; with the fraction trigger, whichever is lower wins."""
    return cfg.trigger_tokens is not None and count >= cfg.trigger_tokens


def threshold(limit: ModelLimit, cfg: CompactionConfig) -> int:
    """What a compacted window must fit under: the trigger share of the usable input, and at
    most ``triggerTokens``."""
    point = int(cfg.effective_trigger() * usable(limit, cfg))
    if cfg.trigger_tokens is not None:
        point = min(point, cfg.trigger_tokens)
    return point
