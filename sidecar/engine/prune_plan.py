"""Pruning of old tool outputs (PROTOCOL.md; seeds 000 and 004, not the older variant of 001).

Nothing is deleted: a pruned output gets ``state.time.compacted`` and the renderer sends a short
placeholder instead. This module only decides *which* parts; the caller writes them.

The decision reads only a few facts per message (``Step``): its role, whether it is a
summary, and of each completed tool call its id, tool, compacted flag and output. ``Walk`` is
the one implementation of the rule; ``plan`` feeds it decoded messages, the store-side runner
(``prune_run``) feeds it the same facts read without loading pruned outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

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
    #: What pruning each of ``part_ids`` saves (its output's estimate), in the same order.
    saved: list[int] = field(default_factory=list, compare=False)


class ToolOutput(NamedTuple):
    """What the walk needs of one completed tool call. ``output`` may be None when
    ``compacted`` (the walk stops there and never measures it)."""

    id: str
    tool: str
    compacted: bool
    output: str | None
    #: The output's estimate where the store gave it instead of the output (``packed``).
    tokens: int | None = None


class Step(NamedTuple):
    """One message as the walk sees it; ``tools`` in stored (part id) order."""

    user: bool
    summary: bool
    tools: Sequence[ToolOutput]


def step_of(msg: WithParts) -> Step:
    """The facts of a decoded message."""
    tools = [
        ToolOutput(p.id, p.tool, bool(p.state.time.compacted), p.state.output)
        for p in msg.parts
        if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
    ]
    info = msg.info
    return Step(
        isinstance(info, UserMessage),
        isinstance(info, AssistantMessage) and bool(info.summary),
        tools,
    )


class Walk:
    """Messages fed newest to oldest; ``feed`` says whether the walk wants the next older one.

    It stops at a summary message or an already-compacted output, but only past the
    protected turns: a summary inside them is walked past, as OpenCode does. The output that
    crosses ``prune_protect`` is itself pruned.
    """

    def __init__(
        self, cfg: CompactionConfig, pinned: frozenset[str] | set[str] = frozenset()
    ) -> None:
        self._cfg = cfg
        self._protected = set(cfg.protected_tools)
        self._pinned = pinned
        self._total = 0
        self._turns = 0
        self.pruned = 0
        self.part_ids: list[str] = []
        self.saved: list[int] = []
        self.done = not cfg.prune

    def feed(self, step: Step) -> bool:
        if self.done:
            return False
        if step.user:
            self._turns += 1
        if self._turns < PROTECTED_TURNS:
            return True
        if step.summary:
            self.done = True
            return False
        for part in reversed(step.tools):
            if part.tool in self._protected or part.id in self._pinned:
                continue
            if part.compacted:
                self.done = True  # an earlier prune's boundary: everything older is done
                return False
            estimate = tokens.estimate(part.output) if part.tokens is None else part.tokens
            self._total += estimate
            if self._total > self._cfg.prune_protect:
                self.pruned += estimate
                self.part_ids.append(part.id)
                self.saved.append(estimate)
        return True

    def plan(self, parts: list[ToolPart] | None = None) -> PrunePlan:
        commit = self._cfg.prune and self.pruned > self._cfg.prune_minimum
        return PrunePlan(self.part_ids, self.pruned, commit, parts or [], self.saved)


def plan(
    newest_first: Iterable[WithParts],
    cfg: CompactionConfig,
    pinned: frozenset[str] = frozenset(),
) -> PrunePlan:
    """Walk messages newest to oldest and pick the tool outputs beyond the protected budget.

    ``newest_first`` is consumed lazily and abandoned as soon as the walk stops (a summary
    message or an already-compacted output past the protected turns). A ``pinned`` part
    (``part/pin``) is skipped like a protected tool: never pruned.
    """
    if not cfg.prune:
        return PrunePlan([], 0, False)
    walk = Walk(cfg, pinned)
    by_id: dict[str, ToolPart] = {}
    for msg in newest_first:
        by_id.update((p.id, p) for p in msg.parts if isinstance(p, ToolPart))
        if not walk.feed(step_of(msg)):
            break
    return walk.plan([by_id[i] for i in walk.part_ids])


def apply(part: ToolPart, ts: int) -> ToolPart:
    """A copy of a completed tool part marked compacted at ``ts`` (output kept, as OpenCode)."""
    state = part.state
    if not isinstance(state, ToolCompleted):
        raise ValueError(f"part {part.id!r} is not a completed tool call")
    time = msgspec.structs.replace(state.time, compacted=ts)
    return msgspec.structs.replace(part, state=msgspec.structs.replace(state, time=time))
