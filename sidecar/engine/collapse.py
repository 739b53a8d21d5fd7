"""Collapse compaction's breakpoint (seed 003; PROTOCOL.md, "Engine rules").

The oldest ``extractRatio`` of the window's tokens is summarized; everything from the
breakpoint on stays verbatim; the newest ``recentRatio`` is also shown to the writer as
reference. The breakpoint lies on a message boundary and prefers, in order: a real user
message (the start of a turn), a message after a finished assistant step, then any assistant
message that is not the continuation of a ``tool-calls`` step — so a tool call is never kept
apart from the step that reads its result.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sidecar.engine.tokens import estimate_messages
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import CompactionPart, TextPart


@dataclass(frozen=True)
class Split:
    summarize: list[WithParts]
    tail: list[WithParts]
    reference: list[WithParts]


def _is_turn_start(m: WithParts) -> bool:
    if not isinstance(m.info, UserMessage):
        return False
    if any(isinstance(p, CompactionPart) for p in m.parts):
        return False
    texts = [p for p in m.parts if isinstance(p, TextPart)]
    return bool(texts) and not all(p.synthetic for p in texts)


def _after_finished_step(prev: WithParts) -> bool:
    """``prev`` is an agent step that ended (a summary is not a step of the agent's)."""
    info = prev.info
    return (
        isinstance(info, AssistantMessage)
        and not info.summary
        and info.finish not in (None, "tool-calls", "unknown")
    )


NEVER = 4
SLACK = 0.25  # how far (as a share of the window) a better boundary may move the cut


def _rank(msgs: Sequence[WithParts], i: int) -> int:
    """Lower is a better place to start the tail; ``NEVER`` is not allowed."""
    m, prev = msgs[i], msgs[i - 1]
    if isinstance(m.info, AssistantMessage) and m.info.summary:
        return NEVER
    if _is_turn_start(m):
        return 0
    if _after_finished_step(prev):
        return 1
    if isinstance(prev.info, AssistantMessage) and prev.info.finish == "tool-calls":
        return 3  # the step that reads the results: only when nothing better exists
    return 2


def split(window: Sequence[WithParts], extract_ratio: float, recent_ratio: float) -> Split:
    msgs = list(window)
    n = len(msgs)
    if n < 2:
        return Split(summarize=msgs, tail=[], reference=[])
    costs = [estimate_messages([m]) for m in msgs]
    total = sum(costs) or 1
    # ``before[i]``: tokens before boundary i (the tail would start at message i)
    before = [0] * (n + 1)
    for i, c in enumerate(costs):
        before[i + 1] = before[i] + c
    target = extract_ratio * total
    # Prefer the best kind of boundary among those close to the target (within SLACK of the
    # window's tokens); only when none is close, take the closest allowed boundary anywhere.
    candidates = [i for i in range(1, n) if _rank(msgs, i) < NEVER]
    near = [i for i in candidates if abs(before[i] - target) <= SLACK * total]
    best: int | None = None
    if near:
        best = min(near, key=lambda i: (_rank(msgs, i), abs(before[i] - target), i))
    elif candidates:
        best = min(candidates, key=lambda i: (abs(before[i] - target), _rank(msgs, i), i))
    if best is None:
        return Split(summarize=msgs, tail=[], reference=[])
    head, tail = msgs[:best], msgs[best:]
    ref: list[WithParts] = []
    budget, acc = recent_ratio * total, 0
    for m, c in zip(reversed(msgs), reversed(costs), strict=True):
        if acc >= budget:
            break
        ref.insert(0, m)
        acc += c
    return Split(summarize=head, tail=tail, reference=ref)
