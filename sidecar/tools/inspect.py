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

from sidecar.engine.filter import filter_compacted
from sidecar.engine.overflow import check
from sidecar.engine.tokens import MESSAGE_OVERHEAD, estimate_messages, estimate_part
from sidecar.model.catalog import lookup
from sidecar.model.config import CompactionConfig
from sidecar.model.conversation import is_finished_summary, latest_model_turn, writer_name
from sidecar.model.inspect import (
    CompactionEvent,
    Inspection,
    PruneEvent,
    SessionSummary,
    TurnPoint,
)
from sidecar.model.messages import AssistantMessage, WithParts
from sidecar.model.parts import CompactionPart, Part, TextPart, ToolCompleted, ToolPart
from sidecar.model.rpc import Diagnostics
from sidecar.model.session import Session
from sidecar.model.tokens import ModelLimit, Tokens, estimate


def _compacted_at(part: Part) -> int | None:
    if isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted):
        return part.state.time.compacted
    return None


class _Costs:
    """Part costs at a moment: a pruned output costs in full before its prune."""

    def __init__(self) -> None:
        self._now: dict[int, int] = {}
        self._before: dict[int, int] = {}

    def part(self, part: Part, at: int | None) -> int:
        ts = _compacted_at(part)
        if ts is not None and at is not None and at < ts:
            hit = self._before.get(id(part))
            if hit is None:
                assert isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)
                time = msgspec.structs.replace(part.state.time, compacted=None)
                full = msgspec.structs.replace(
                    part, state=msgspec.structs.replace(part.state, time=time)
                )
                hit = self._before[id(part)] = estimate_part(full)
            return hit
        hit = self._now.get(id(part))
        if hit is None:
            hit = self._now[id(part)] = estimate_part(part)
        return hit

    def window(self, msgs: Sequence[WithParts], at: int | None) -> int:
        return sum(MESSAGE_OVERHEAD + sum(self.part(p, at) for p in m.parts) for m in msgs)


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


def inspect(
    session: Session,
    history: Sequence[WithParts],
    context: int | None = None,
    cfg: CompactionConfig | None = None,
    diagnostics: Mapping[str, Diagnostics] | None = None,
) -> Inspection:
    """Per-turn context sizes, compactions (before -> after), prunes and the latest summary.

    ``context`` overrides the model window; else the limits stored with the session (those
    the daemon's decisions used); else the model catalog for the session's model.
    ``diagnostics``: what the daemon stored per compaction, by summary message id.
    """
    costs = _Costs()
    cfg = cfg or CompactionConfig()
    turns: list[TurnPoint] = []
    compactions: list[CompactionEvent] = []
    index = {m.info.id: i for i, m in enumerate(history)}
    for i, m in enumerate(history):
        info = m.info
        if not isinstance(info, AssistantMessage):
            continue
        if info.summary:
            if not is_finished_summary(info) or info.parent_id not in index:
                continue
            k = index[info.parent_id]
            marker = history[k]
            part = next((p for p in marker.parts if isinstance(p, CompactionPart)), None)
            if part is None:
                continue
            at_marker = marker.info.time.created
            done = info.time.completed or info.time.created
            replaced = filter_compacted(history[:k])
            after = filter_compacted(history[: i + 1])
            # What the marker's tailStartID keeps after the summary was not replaced.
            kept = {r.info.id for r in after}
            compactions.append(
                CompactionEvent(
                    turn=sum(1 for t in turns if index[t.message_id] < k),
                    marker_id=marker.info.id,
                    summary_id=info.id,
                    auto=part.auto,
                    before=costs.window(replaced, at_marker),
                    after=costs.window(after, done),
                    time=done,
                    summary=summary_text(m),
                    writer=writer_name(info.provider_id, info.model_id),
                    replaced_ids=[r.info.id for r in replaced if r.info.id not in kept],
                    diagnostics=_plain((diagnostics or {}).get(info.id)),
                )
            )
            continue
        t = info.tokens
        reported = t.input + t.cache.read + t.output
        turns.append(
            TurnPoint(
                turn=len(turns) + 1,
                message_id=info.id,
                time=info.time.created,
                context_tokens=costs.window(filter_compacted(history[:i]), info.time.created),
                reported_tokens=reported or None,
            )
        )
    prunes = _prunes(history, turns)
    model = model_of(history)
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
    return Inspection(
        session=summarize(session, history),
        model="/".join(model) if model else None,
        window=window,
        usable=usable,
        limits_from=source,
        turns=turns,
        compactions=compactions,
        prunes=prunes,
        latest_summary=compactions[-1].summary if compactions else None,
    )


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
