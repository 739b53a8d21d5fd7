"""``session/breakdown``: what fills the window, split the way a person asks about it.

Every token of the window's estimate (``session/context``'s ``estimatedTokens``) lands in
exactly one category, so the categories add up to that estimate plus the frontend's overhead;
a pinned part counts as ``pinned`` whatever its kind (pins are what a person chose to keep). The
split reuses the engine's own per-part estimate, so it cannot disagree with the decisions.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Collection, Sequence
from typing import get_args

import msgspec

from sidecar.engine import overflow, render
from sidecar.engine.steer import block_of
from sidecar.engine.tokens import (
    MESSAGE_OVERHEAD,
    estimate,
    estimate_messages,
    estimate_part,
    estimate_value,
)
from sidecar.model.config import CompactionConfig
from sidecar.model.conversation import CLEARED
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import (
    CompactionPart,
    FilePart,
    Part,
    ReasoningPart,
    TextPart,
    ToolCompleted,
    ToolPart,
)
from sidecar.model.rpc import (
    BreakdownCategory,
    BreakdownItem,
    BreakdownResult,
    Category,
    OverheadSource,
)
from sidecar.model.tokens import ModelLimit

CATEGORIES: tuple[Category, ...] = get_args(Category)
LARGEST = 10


def part_split(msg: WithParts, part: Part, stub: render.Stub) -> list[tuple[Category, int]]:
    """``part``'s estimate split into categories (a tool part is its call and its output)."""
    summary = isinstance(msg.info, AssistantMessage) and bool(msg.info.summary)
    if isinstance(part, TextPart):
        if part.ignored:
            return []
        if summary:
            kept = block_of(part.text)
            kept_tokens = estimate(kept) if kept else 0
            total = estimate(part.text)
            return [("summary", total - kept_tokens), ("keptVerbatim", kept_tokens)]
        role: Category = "userText" if isinstance(msg.info, UserMessage) else "assistantText"
        return [(role, estimate(part.text))]
    if isinstance(part, ReasoningPart):
        return [("reasoning", estimate(part.text))]
    if isinstance(part, CompactionPart):
        return [("summary", estimate_part(part))]
    if isinstance(part, ToolPart):
        call = estimate_value(part.state.input)
        rest = estimate_part(part) - call
        state = part.state
        if isinstance(state, ToolCompleted) and state.time.compacted:
            # What the stub costs as sent: OpenCode's placeholder, or the informative line.
            sent = rest + (estimate(render.stub(part, stub)) - estimate(CLEARED))
            return [("toolCalls", call), ("toolOutputsPruned", sent)]
        return [("toolCalls", call), ("toolOutputs", rest)]
    if isinstance(part, FilePart) and isinstance(msg.info, UserMessage):
        return [("userText", estimate_part(part))]
    return [("other", estimate_part(part))]


def split(
    window: Sequence[WithParts],
    pinned: Collection[str],
    stub: render.Stub = "opencode",
) -> tuple[dict[Category, int], list[BreakdownItem]]:
    """The window's tokens per category (``overhead`` left at 0) and its largest parts."""
    totals: dict[Category, int] = dict.fromkeys(CATEGORIES, 0)
    items: list[tuple[int, int, BreakdownItem]] = []
    seq = 0
    for msg in window:
        totals["other"] += MESSAGE_OVERHEAD  # a message's framing (role, separators)
        for part in msg.parts:
            pieces = part_split(msg, part, stub)
            tokens = sum(t for _, t in pieces)
            if part.id in pinned:
                totals["pinned"] += tokens
                kind: str = "pinned"
            else:
                for cat, t in pieces:
                    totals[cat] += t
                kind = max(pieces, key=lambda p: p[1])[0] if pieces else "other"
            if tokens <= 0:
                continue
            item = BreakdownItem(
                message_id=msg.info.id,
                part_id=part.id,
                kind=kind,
                tool=part.tool if isinstance(part, ToolPart) else None,
                tokens=tokens,
            )
            seq += 1
            entry = (tokens, -seq, item)  # ties: the older part first
            if len(items) < LARGEST:
                heapq.heappush(items, entry)
            elif entry > items[0]:
                heapq.heapreplace(items, entry)
    largest = [e[2] for e in sorted(items, reverse=True)]
    return totals, largest


def categories(totals: dict[Category, int], usable: int | None) -> list[BreakdownCategory]:
    """Each category with its share of the usable input (None when the model is unknown)."""
    return [
        BreakdownCategory(
            name=name,
            tokens=tokens,
            share=round(tokens / usable, 4) if usable else None,
        )
        for name, tokens in totals.items()
    ]


def result(
    session_id: str,
    window: Sequence[WithParts],
    pinned: Collection[str],
    limit: ModelLimit | None,
    ccfg: CompactionConfig,
    *,
    overhead: int = 0,
    overhead_source: OverheadSource = "none",
) -> BreakdownResult:
    """The breakdown of ``window`` for a model of ``limit`` (None: unknown) under ``ccfg``."""
    stub = ccfg.pruned_stub
    totals, largest = split(window, pinned, stub)
    totals["overhead"] = overhead
    estimated = estimate_messages(window) + render.stub_extra(window, stub)
    total = estimated + overhead
    known = limit is not None and limit.context > 0
    usable = overflow.usable(limit, ccfg) if limit is not None and known else None
    out = BreakdownResult(
        session_id=session_id,
        estimated_tokens=estimated,
        overhead_tokens=overhead,
        overhead_source=overhead_source,
        categories=categories(totals, usable),
        total_tokens=total,
        model_limits_known=known,
        largest=largest,
    )
    if limit is not None and usable is not None:
        out.context = limit.context
        out.reserved_output = overflow.output_reserve(limit, ccfg)
        out.usable_input = usable
        out.free = max(0, usable - total)
        out.trigger = overflow.trigger_point(usable, ccfg)
        out.prepare_at = math.ceil(ccfg.prepare * usable) if ccfg.prepare is not None else None
    return out


def with_usable(b: BreakdownResult, usable: int) -> BreakdownResult:
    """``b`` measured against another usable input (what the session's decisions used)."""
    shares = {c.name: c.tokens for c in b.categories}
    return msgspec.structs.replace(
        b,
        categories=categories(shares, usable),
        usable_input=usable,
        free=max(0, usable - b.total_tokens),
    )
