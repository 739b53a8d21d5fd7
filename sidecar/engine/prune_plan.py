"""Pruning of old tool outputs (PROTOCOL.md; seeds 000 and 004, not the older variant of 001).

Nothing is deleted: a pruned output gets ``state.time.compacted`` and the renderer sends a short
placeholder instead. This module only decides *which* parts; the caller writes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from sidecar.engine import tokens
from sidecar.model.config import CompactionConfig
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import ToolCompleted, ToolPart

PROTECTED_TURNS = 2
"""The newest two user turns (the one in progress and the last complete exchange) are active."""


@dataclass(frozen=True)
class PrunePlan:
    """Candidates newest first. Write them only when ``commit``: below ``prune_minimum`` the
    savings are not worth the churn, and the candidates are kept only for inspection."""

    part_ids: list[str]
    tokens_saved: int
    commit: bool
    parts: list[ToolPart] = field(default_factory=list)


def plan(
    newest_first: Iterable[WithParts],
    cfg: CompactionConfig,
    pinned: frozenset[str] = frozenset(),
) -> PrunePlan:
    """Walk messages newest to oldest and pick the tool outputs beyond the protected budget.

    ``newest_first`` is consumed lazily and abandoned as soon as the walk stops (a summary
    message or an already-compacted output), so a caller paging the store backwards reads
    no further than needed. The output that crosses ``prune_protect`` is itself pruned.
    A ``pinned`` part (``part/pin``) is skipped like a protected tool: never pruned.
    """
    if not cfg.prune:
        return PrunePlan([], 0, False)
    protected = set(cfg.protected_tools)
    total = 0
    pruned = 0
    candidates: list[ToolPart] = []
    turns = 0
    for msg in newest_first:
        if isinstance(msg.info, UserMessage):
            turns += 1
        if turns < PROTECTED_TURNS:
            continue
        if isinstance(msg.info, AssistantMessage) and msg.info.summary:
            break
        stop = False
        for part in reversed(msg.parts):
            if not isinstance(part, ToolPart) or not isinstance(part.state, ToolCompleted):
                continue
            if part.tool in protected or part.id in pinned:
                continue
            if part.state.time.compacted:
                stop = True  # an earlier prune's boundary: everything older is already done
                break
            estimate = tokens.estimate(part.state.output)
            total += estimate
            if total > cfg.prune_protect:
                pruned += estimate
                candidates.append(part)
        if stop:
            break
    return PrunePlan([p.id for p in candidates], pruned, pruned > cfg.prune_minimum, candidates)


def apply(part: ToolPart, ts: int) -> ToolPart:
    """A copy of a completed tool part marked compacted at ``ts`` (output kept, as OpenCode)."""
    state = part.state
    if not isinstance(state, ToolCompleted):
        raise ValueError(f"part {part.id!r} is not a completed tool call")
    time = msgspec.structs.replace(state.time, compacted=ts)
    return msgspec.structs.replace(part, state=msgspec.structs.replace(state, time=time))
