"""Turn-by-turn history of a session's context, computed with the engine's own functions.

Pure: it takes the stored history and returns numbers. Each turn's window is what
``filter_compacted`` gives for the messages before that model call, sized with
``estimate_part`` and ``MESSAGE_OVERHEAD`` as ``session/context`` does, so the last figure is
``session/context``'s ``estimatedTokens``. A pruned output counts in full for the turns
before its prune (``state.time.compacted``) and as the placeholder from then on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from sidecar.engine import breakdown
from sidecar.engine.filter import filter_compacted
from sidecar.engine.overflow import check
from sidecar.engine.tokens import MESSAGE_OVERHEAD, estimate_messages, estimate_part
from sidecar.model.catalog import lookup
from sidecar.model.config import CompactionConfig
from sidecar.model.conversation import (
    is_continue,
    is_finished_summary,
    latest_model_turn,
    writer_name,
)
from sidecar.model.inspect import (
    CompactionEvent,
    Inspection,
    PruneEvent,
    ReplacedMessage,
    SessionSummary,
    TurnPoint,
)
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import CompactionPart, Part, TextPart, ToolCompleted, ToolPart
from sidecar.model.rpc import Category, Diagnostics
from sidecar.model.session import Session
from sidecar.model.tokens import ModelLimit, Tokens, estimate
from sidecar.toolcalls import vocabulary as tools

#: How ``inspect --breakdown`` and ``report`` name the ``session/breakdown`` categories.
CATEGORY_LABELS = {
    "overhead": "frontend overhead (system prompt, tools)",
    "summary": "summary",
    "keptVerbatim": "kept verbatim (in the summary)",
    "userText": "user messages",
    "assistantText": "assistant text",
    "reasoning": "reasoning",
    "toolCalls": "tool calls",
    "toolOutputs": "tool outputs",
    "toolOutputsPruned": "pruned tool outputs (stubs)",
    "pinned": "pinned parts",
    "other": "message framing, other",
}


def _compacted_at(part: Part) -> int | None:
    if isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted):
        return part.state.time.compacted
    return None


class _Costs:
    """Part costs at a moment: a pruned output costs in full before its prune."""

    def __init__(self, pinned: frozenset[str] = frozenset()) -> None:
        self._unpruned: dict[int, Part] = {}
        self._cost: dict[int, int] = {}
        self._split: dict[int, list[tuple[Category, int]]] = {}
        self._pinned = pinned

    def _as_at(self, part: Part, at: int | None) -> Part:
        """``part`` as it was at ``at``: unpruned when its prune came later."""
        ts = _compacted_at(part)
        if ts is None or at is None or at >= ts:
            return part
        full = self._unpruned.get(id(part))
        if full is None:
            assert isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)
            time = msgspec.structs.replace(part.state.time, compacted=None)
            full = self._unpruned[id(part)] = msgspec.structs.replace(
                part, state=msgspec.structs.replace(part.state, time=time)
            )
        return full

    def part(self, part: Part, at: int | None) -> int:
        seen = self._as_at(part, at)
        hit = self._cost.get(id(seen))
        if hit is None:
            hit = self._cost[id(seen)] = estimate_part(seen)
        return hit

    def window(self, msgs: Sequence[WithParts], at: int | None) -> int:
        return sum(MESSAGE_OVERHEAD + sum(self.part(p, at) for p in m.parts) for m in msgs)

    def split(self, msgs: Sequence[WithParts], at: int | None) -> dict[str, int]:
        """``window``'s tokens by ``session/breakdown`` category (they add up to it)."""
        totals: dict[str, int] = dict.fromkeys(breakdown.CATEGORIES, 0)
        del totals["overhead"]
        for m in msgs:
            totals["other"] += MESSAGE_OVERHEAD
            for p in m.parts:
                seen = self._as_at(p, at)
                pieces = self._split.get(id(seen))
                if pieces is None:
                    pieces = self._split[id(seen)] = breakdown.part_split(m, seen, "opencode")
                if p.id in self._pinned:
                    totals["pinned"] += sum(t for _, t in pieces)
                    continue
                for cat, t in pieces:
                    totals[cat] += t
        return totals


def summary_text(msg: WithParts) -> str:
    return "\n".join(p.text for p in msg.parts if isinstance(p, TextPart) and p.text)


def model_of(history: Sequence[WithParts]) -> tuple[str, str] | None:
    """The (provider, model) of the newest non-summary assistant message."""
    info = latest_model_turn(history)
    return (info.provider_id, info.model_id) if info is not None else None


def summarize(session: Session, history: Sequence[WithParts]) -> SessionSummary:
    """The ``sessions`` line from the whole history: current window size, finished
    compactions, last activity (``readdb.overview`` gets the same without the history)."""
    last = max(
        [session.time.updated, *(m.info.time.completed or m.info.time.created for m in history)]
    )
    return SessionSummary(
        id=session.id,
        title=session.title,
        messages=len(history),
        estimated_tokens=estimate_messages(filter_compacted(history)),
        compactions=sum(1 for m in history if is_finished_summary(m.info)),
        last_activity=last,
    )


def _after(history: Sequence[WithParts], i: int) -> list[WithParts]:
    """The window right after the summary at ``i``: with its continue message (the synthetic
    user message an automatic compaction adds), as the daemon measures ``tokensAfter``."""
    end = i + 1
    if end < len(history) and is_continue(history[end]):
        end += 1
    return filter_compacted(history[:end])


def inspect(
    session: Session,
    history: Sequence[WithParts],
    context: int | None = None,
    cfg: CompactionConfig | None = None,
    diagnostics: Mapping[str, Diagnostics] | None = None,
    pinned: frozenset[str] = frozenset(),
) -> Inspection:
    """Per-turn context sizes, compactions (before -> after), prunes and the latest summary.

    ``context`` overrides the model window; else the limits stored with the session (those
    the daemon's decisions used); else the model catalog for the session's model.
    ``diagnostics``: what the daemon stored per compaction, by summary message id;
    ``pinned``: the session's pinned part ids (they count as ``pinned`` in the breakdowns).
    """
    costs = _Costs(pinned)
    cfg = cfg or CompactionConfig()
    turns: list[TurnPoint] = []
    compactions: list[CompactionEvent] = []
    index = {m.info.id: i for i, m in enumerate(history)}
    for i, m in enumerate(history):
        info = m.info
        if not isinstance(info, AssistantMessage):
            continue
        if info.summary:
            event = _compaction(history, i, index, turns, costs, diagnostics or {})
            if event is not None:
                compactions.append(event)
            continue
        t = info.tokens
        reported = t.input + t.cache.read + t.output
        split = costs.split(filter_compacted(history[:i]), info.time.created)
        turns.append(
            TurnPoint(
                turn=len(turns) + 1,
                message_id=info.id,
                time=info.time.created,
                context_tokens=sum(split.values()),
                reported_tokens=reported or None,
                categories=split,
            )
        )
    model = model_of(history)
    window, usable, limit, source = _limits(session, model, context, cfg)
    learned = session.limits.overhead if session.limits is not None else None
    current = breakdown.result(
        session.id,
        filter_compacted(history),
        pinned,
        limit,
        cfg,
        overhead=learned or 0,
        overhead_source="none" if learned is None else "learned",
    )
    if usable is not None and current.usable_input != usable:
        # The usable input the session's decisions used (stored), not a recomputed one.
        current = breakdown.with_usable(current, usable)
    return Inspection(
        session=summarize(session, history),
        model="/".join(model) if model else None,
        window=window,
        usable=usable,
        limits_from=source,
        turns=turns,
        compactions=compactions,
        prunes=_prunes(history, turns),
        latest_summary=compactions[-1].summary if compactions else None,
        breakdown=current,
    )


def _compaction(
    history: Sequence[WithParts],
    i: int,
    index: Mapping[str, int],
    turns: Sequence[TurnPoint],
    costs: _Costs,
    diagnostics: Mapping[str, Diagnostics],
) -> CompactionEvent | None:
    """The compaction whose summary is ``history[i]``; None for an unfinished summary or one
    whose marker is not in the history."""
    m = history[i]
    info = m.info
    assert isinstance(info, AssistantMessage)
    if not is_finished_summary(info) or info.parent_id not in index:
        return None
    k = index[info.parent_id]
    marker = history[k]
    part = next((p for p in marker.parts if isinstance(p, CompactionPart)), None)
    if part is None:
        return None
    at_marker = marker.info.time.created
    done = info.time.completed or info.time.created
    replaced = filter_compacted(history[:k])
    recorded = diagnostics.get(info.id)
    after_window = _after(history, i)
    before, after = (
        (recorded.tokens_before, recorded.tokens_after)
        if recorded is not None
        else (costs.window(replaced, at_marker), costs.window(after_window, done))
    )
    # What the marker's tailStartID keeps after the summary was not replaced.
    kept = {r.info.id for r in after_window}
    return CompactionEvent(
        turn=sum(1 for t in turns if index[t.message_id] < k),
        marker_id=marker.info.id,
        summary_id=info.id,
        auto=part.auto,
        before=before,
        after=after,
        time=done,
        summary=summary_text(m),
        writer=writer_name(info.provider_id, info.model_id),
        replaced_ids=[r.info.id for r in replaced if r.info.id not in kept],
        replaced=[_preview(r) for r in replaced if r.info.id not in kept],
        diagnostics=_plain(recorded),
    )


def _limits(
    session: Session, model: tuple[str, str] | None, context: int | None, cfg: CompactionConfig
) -> tuple[int | None, int | None, ModelLimit | None, str | None]:
    """(window, usable input, the limits the breakdown uses, where they came from)."""
    window: int | None = context
    usable: int | None = None
    limit: ModelLimit | None = None
    source: str | None = None
    if context is not None:
        limit = ModelLimit(context=context, output=0)
        source = "--context"
    elif session.limits is not None:
        # What the daemon's decisions used: the window the session really ran under.
        stored = session.limits
        window, usable, source = stored.context, stored.usable or None, "session"
    elif model is not None:
        limit = lookup(*model)
        window = limit.context if limit else None
        source = "catalog" if limit else None
    if limit is not None and limit.context and (context is None or limit.output):
        # With only ``--context`` the output reserve is unknown, so no usable line is drawn.
        usable = check(Tokens(), limit, cfg).usable
    if context is None and session.limits is not None:
        s = session.limits
        limit = ModelLimit(context=s.context, output=s.output, input=s.input)
    return window, usable, limit, source


PREVIEW_WORDS = 12


def _preview(msg: WithParts) -> ReplacedMessage:
    """A message as a person recognises it: its role and first words (a tool call: its tool
    and main argument), for the list of what a summary replaced."""
    words: list[str] = []
    for p in msg.parts:
        if isinstance(p, CompactionPart):
            words = ["(compaction", "marker)"]
        elif isinstance(p, TextPart) and p.text.strip():
            words = p.text.split()
        elif isinstance(p, ToolPart):
            arg = tools.main_argument(
                p.tool, p.state.input if isinstance(p.state.input, dict) else {}
            )
            words = [p.tool, *(arg or "").split()]
        if words:
            break
    text = " ".join(words[:PREVIEW_WORDS]) + (" …" if len(words) > PREVIEW_WORDS else "")
    info = msg.info
    role = (
        "summary"
        if is_finished_summary(info)
        else "user"
        if isinstance(info, UserMessage)
        else "assistant"
    )
    return ReplacedMessage(id=msg.info.id, role=role, words=text)


def _plain(d: Diagnostics | None) -> Diagnostics | None:
    """The diagnostics alone (a stored record also carries ids the inspection shows itself)."""
    if d is None:
        return None
    return Diagnostics(**{f: getattr(d, f) for f in Diagnostics.__struct_fields__})


def _prunes(history: Sequence[WithParts], turns: Sequence[TurnPoint]) -> list[PruneEvent]:
    by_time: dict[int, PruneEvent] = {}
    for m in history:
        for p in m.parts:
            ts = _compacted_at(p)
            if ts is None:
                continue
            assert isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted)
            event = by_time.get(ts)
            if event is None:
                event = by_time[ts] = PruneEvent(
                    turn=sum(1 for t in turns if t.time <= ts), time=ts
                )
            event.part_ids.append(p.id)
            event.tokens_saved += estimate(p.state.output)
    return [by_time[k] for k in sorted(by_time)]
