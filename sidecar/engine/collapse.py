"""Collapse compaction's breakpoint (seed 003, DESIGN §5).

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
    info = prev.info
    return isinstance(info, AssistantMessage) and info.finish not in (None, "tool-calls", "unknown")


def _rank(msgs: Sequence[WithParts], i: int) -> int:
    """Lower is a better place to start the tail; 3 = not allowed."""
    m, prev = msgs[i], msgs[i - 1]
    if isinstance(m.info, AssistantMessage) and m.info.summary:
        return 3
    if _is_turn_start(m):
        return 0
    if _after_finished_step(prev):
        return 1
    if isinstance(prev.info, AssistantMessage) and prev.info.finish == "tool-calls":
        return 2  # the step that reads the results: allowed only when nothing better exists
    return 2


def split(window: Sequence[WithParts], extract_ratio: float, recent_ratio: float) -> Split:
    msgs = list(window)
    n = len(msgs)
    if n < 2:
        return Split(summarize=msgs, tail=[], reference=[])
    costs = [estimate_messages([m]) for m in msgs]
    total = sum(costs) or 1
    # target: first index where the tokens before it reach extract_ratio of the total
    target, acc = n, 0
    for i, c in enumerate(costs):
        if acc >= extract_ratio * total:
            target = i
            break
        acc += c
    target = max(1, min(target, n - 1))
    # search forward from target for the best boundary, then backward if none is good
    best: int | None = None
    for rank in (0, 1, 2):
        fwd = next((i for i in range(target, n) if _rank(msgs, i) == rank), None)
        back = next((i for i in range(target - 1, 0, -1) if _rank(msgs, i) == rank), None)
        if fwd is not None or back is not None:
            if fwd is None:
                best = back
            elif back is None:
                best = fwd
            else:
                best = fwd if fwd - target <= target - back else back
            break
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
