"""What a compaction summarizes and keeps: its request, its plan, and the rules of both
methods (standard: the window as OpenCode sends it; collapse: older history summarized,
recent turns kept verbatim, earlier summaries merged), and the prepared summary's shape."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import msgspec

from sidecar.engine import ledger, open_turn, overflow, revert, steer
from sidecar.engine.collapse import split
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.engine.window import load_window
from sidecar.errors import InvalidParams
from sidecar.model.catalog import lookup
from sidecar.model.config import Config
from sidecar.model.conversation import (
    CONTINUE_TEXT,
    is_marker,
    is_summary,
    latest_model_turn,
)
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import (
    AssistantMessage,
    MessageTime,
    ModelRef,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import (
    CompactionPart,
    Part,
    StepFinishPart,
    TextPart,
    ToolCompleted,
    ToolPart,
)
from sidecar.model.rpc import (
    CompactedEvent,
    CompactionRecord,
    CompactResult,
    Diagnostics,
    OpenTurn,
)
from sidecar.model.session import Session
from sidecar.store import Key
from sidecar.summarizers.base import (
    DEFAULT_PROMPT,
    Summarizer,
    SummaryError,
)
from sidecar.summarizers.extractive import ExtractiveSummarizer

_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Request:
    session_id: str
    auto: bool = False
    model: ModelRef | None = None
    instructions: str | None = None
    overflow: bool = False
    progress_token: str | int | None = None
    # Automatic work: the message that caused it. The compaction sees the session only up to
    # it, so what the frontend writes meanwhile changes nothing it stores.
    cutoff: Key | None = None
    # An overflow's reported usage and the usable budget: when compaction cannot shrink the
    # history and the rest of the usage (system prompt, tools) alone is over budget, the error
    # says that compaction cannot help, rather than only that it did not.
    reported_tokens: int = 0
    usable: int = 0
    # ``session/compact {upTo}``: summarize up to and including this message, keep the rest.
    up_to: str | None = None
    # When the compaction began holding the session (loop time): ``waitedMs`` is measured
    # from it (compaction.prepare).
    started: float | None = None
    # Keep the session's open turn verbatim after the summary (``open_turn``): a read's
    # compaction always, a turn-end overflow's with ``compaction.keepOpenTurn``.
    keep_open_turn: bool = False
    # The frontend's fixed overhead (system prompt, tools) the kept turn must leave room for.
    overhead: int = 0


@dataclass
class Outcome:
    result: CompactResult
    before_tokens: int = 0
    after_tokens: int = 0
    cut: Key | None = None  # the newest message the compaction saw
    marker: Key | None = None  # its marker
    end: Key | None = None  # the newest message it added
    record: CompactionRecord | None = None  # its diagnostics (a finished compaction)
    prepared: bool = False  # a summary prepared in the background was committed


@dataclass(frozen=True)
class Prepared:
    """A summary written ahead of the overflow (``compaction.prepare``), kept in memory only:
    nothing of it is stored, published or visible until a compaction commits it."""

    session_id: str
    cut: Key  # the newest message it covers
    fingerprint: bytes  # of the window up to ``cut``: any change there invalidates it
    prompt: str
    summary: AssistantMessage  # finished, not stored
    parts: list[Part]  # its parts (step-start, text, step-finish)

    @property
    def tokens(self) -> int:
        """The summary tokens it cost (the writer's count, else an estimate of its text)."""
        text = "".join(p.text for p in self.parts if isinstance(p, TextPart))
        return self.summary.tokens.output or estimate(text)


def _key(m: WithParts) -> Key:
    return Key(m.info.time.created, m.info.id)


def _unpruned(part: Part) -> Part:
    """A part without its prune mark: pruning (the daemon's own, as usual) is not a change to
    what a prepared summary covers (its writer saw the fuller output)."""
    if isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted):
        if part.state.time.compacted is not None:
            time = msgspec.structs.replace(part.state.time, compacted=None)
            return msgspec.structs.replace(
                part, state=msgspec.structs.replace(part.state, time=time)
            )
    return part


def fingerprint(window: Sequence[WithParts], cut: Key) -> bytes:
    """A digest of the window up to ``cut`` (messages and parts as stored, prune marks aside)."""
    digest = hashlib.sha256()
    for m in window:
        if Key(m.info.time.created, m.info.id) > cut:
            continue
        digest.update(_encoder.encode(m.info))
        for p in m.parts:
            digest.update(_encoder.encode(_unpruned(p)))
    return digest.digest()


def _without_ledger(m: WithParts) -> WithParts:
    """An earlier summary as the writer sees it inline: its prose without the ledger block
    (the daemon rolls the ledger itself; a model must neither copy nor edit it)."""
    parts: list[Part] = [
        msgspec.structs.replace(p, text=steer.drop_block(ledger.drop_block(p.text)))
        if isinstance(p, TextPart)
        else p
        for p in m.parts
    ]
    return WithParts(info=m.info, parts=parts)


#: ``compaction.recallHint``: the line each summary ends with, so that the model knows what
#: the summary left out is not lost (the ``history_search`` tool of ``compaction-sidecar mcp``).
RECALL_HINT = (
    "The full earlier history of this session (every message, tool call and output, including "
    "what this summary leaves out) can be searched with the `history_search` tool and read in "
    "full with `history_expand`."
)


def _summary_text(m: WithParts) -> str:
    return "\n".join(p.text for p in m.parts if isinstance(p, TextPart) and p.text.strip())


SUMMARY_FLOOR = 256  # the smallest max_tokens the engine asks for: a summary needs some room


def summary_budget(window: Sequence[WithParts], cfg: Config) -> int:
    """The summary's ``max_tokens``: ``summaryMaxTokens``, capped by the session model's
    output limit (OpenCode: ``min(limit.output, 32000)``) and by ``usable // summaryShare``:
    on a small local model a 10k-token summary would leave no room and compact again at once."""
    budget = cfg.compaction.summary_max_tokens
    share = cfg.compaction.summary_share
    info = latest_model_turn(window)
    limit = lookup(info.provider_id, info.model_id, cfg.models) if info is not None else None
    if limit is not None:
        if limit.output > 0:
            budget = min(budget, max(SUMMARY_FLOOR, limit.output))
        usable = overflow.usable(limit, cfg.compaction)
        if usable > 0 and share > 0:
            budget = min(budget, max(SUMMARY_FLOOR, usable // share))
    return budget


def fallback_writer() -> Summarizer:
    """``summarizer.fallback`` ``"extractive"``: offline, so it cannot fail the way the
    configured writer did (no network, no quota, no time limit to miss)."""

    return ExtractiveSummarizer()


def _last_user(window: Sequence[WithParts]) -> UserMessage | None:
    for m in reversed(window):
        if isinstance(m.info, UserMessage) and not is_marker(m):
            return m.info
    return None


_dict_decoder = msgspec.json.Decoder(dict[str, Any])


def stored(obj: Any) -> bytes:
    """What the daemon stores for a message or part it makes, in the shape OpenCode's schema
    requires: fields our wire model omits at their defaults are written out (a manual marker's
    ``auto: false``, a summary's ``cost`` and ``tokens``), so readers that test
    ``auto === false`` or parse with OpenCode's zod schema accept it."""
    raw = _encoder.encode(obj)
    need: dict[str, Any] = {}
    if isinstance(obj, CompactionPart):
        need["auto"] = obj.auto
    elif isinstance(obj, AssistantMessage | StepFinishPart):
        need["cost"] = obj.cost
        need["tokens"] = msgspec.to_builtins(obj.tokens)
    if not need:
        return raw
    data = _dict_decoder.decode(raw)
    missing = {k: v for k, v in need.items() if k not in data}
    if not missing:
        return raw
    data.update(missing)
    return _encoder.encode(data)


class Clock:
    """Strictly increasing millisecond times from ``start``, on the session's own timeline.

    What the daemon adds is stamped right after the session's latest message, not with the
    daemon's wall clock: it sorts after everything the compaction saw and, whatever either
    clock says, before what the frontend writes next (PROTOCOL.md, "One timeline"); and the same
    writes give the same stored times."""

    def __init__(self, start: int) -> None:
        self._last = start - 1

    def __call__(self) -> int:
        self._last += 1
        return self._last


@dataclass
class Plan:
    """What one compaction works from (``Compactor._plan``)."""

    sid: str
    session: Session
    window: list[WithParts]
    history: list[WithParts]  # what the writer is sent (standard: the window as it is)
    tail: list[WithParts]  # kept verbatim after the summary (collapse)
    reference: list[WithParts]  # newest messages the writer may consult (collapse)
    previous: list[str]  # earlier summaries to merge (collapse)
    before: int  # estimated tokens of the window before
    standard: bool
    last_user: UserMessage | None
    model: ModelRef | None
    cut: Key | None  # the newest message the compaction saw
    clock: Clock
    # The open turn kept after the summary (``open_turn``): how, its first message, and the
    # first message kept of it (later than the first when the turn did not fit).
    open_turn: OpenTurn | None = None
    open_start: Key | None = None
    open_from: Key | None = None
    boundary: Key | None = None  # the session's compaction boundary when planned

    def user_message(self) -> UserMessage:
        """A user message the daemon adds (marker, continue): next on the session's clock,
        with the last user's agent and model."""
        return UserMessage(
            id=new_id("msg"),
            session_id=self.sid,
            time=MessageTime(created=self.clock()),
            agent=self.last_user.agent if self.last_user else None,
            model=self.model,
        )

    def marker(self, auto: bool, overflow: bool, tail: Sequence[WithParts]) -> WithParts:
        """The compaction marker: a user message with its compaction part, pointing back at
        the first message of ``tail`` when one is kept after the summary."""
        tail_start_id = tail[0].info.id if tail else None
        overflowed = True if overflow else None
        return self._with_part(
            CompactionPart, auto=auto, overflow=overflowed, tail_start_id=tail_start_id
        )

    def continue_message(self) -> WithParts:
        """The synthetic user message an automatic compaction ends with."""
        return self._with_part(TextPart, text=CONTINUE_TEXT, synthetic=True)

    def _with_part(self, kind: Callable[..., Part], **fields: Any) -> WithParts:
        """A new ``user_message`` holding one part of ``kind`` with ``fields``."""
        info = self.user_message()
        part = kind(id=new_id("prt"), session_id=self.sid, message_id=info.id, **fields)
        return WithParts(info=info, parts=[part])


class Refused(SummaryError):
    """A summary the compaction does not commit although it was written: it would not make
    the context smaller, or another compaction of the session committed while it was being
    written (another daemon's). Nothing of the compaction stays stored (``Compactor._refuse``);
    ``summary_tokens`` and ``writer`` describe the summary refused."""

    def __init__(self, message: str, *, summary_tokens: int = 0, writer: str = "") -> None:
        super().__init__(message)
        self.summary_tokens = summary_tokens
        self.writer = writer


def check_smaller(req: Request, before: int, after: int, summary: Sequence[Part]) -> None:
    """A summary that does not make the context smaller is refused, and says why."""
    if after < before:
        return
    text = "\n".join(p.text for p in summary if isinstance(p, TextPart))
    tokens = estimate(text)
    if req.usable > 0 and req.reported_tokens - before > req.usable:
        raise Refused(
            "context overflow that compaction cannot help: the provider counted "
            f"{req.reported_tokens} tokens but the history is only about {before}; the "
            f"rest (about {req.reported_tokens - before}: system prompt, tool definitions)"
            f" alone exceeds the usable {req.usable}. Shrink them or raise the model's "
            "limits; history kept",
            summary_tokens=tokens,
        )
    raise Refused(
        f"compaction would not make the context smaller ({before} -> {after} "
        "estimated tokens); history kept",
        summary_tokens=tokens,
    )


def diagnostics(record: CompactionRecord) -> dict[str, Any]:
    return {f: getattr(record, f) for f in Diagnostics.__struct_fields__}


def _split_at(window: list[WithParts], up_to: str) -> tuple[list[WithParts], list[WithParts]]:
    """``session/compact {upTo}``: the window up to and including ``up_to``, and the rest."""
    at = next((i for i, m in enumerate(window) if m.info.id == up_to), None)
    if at is None or is_marker(window[at]) or is_summary(window[at]):
        raise InvalidParams(
            f"invalid params: `$.upTo` {up_to!r} is not a message of the session's context "
            "window (a compaction's marker or summary cannot be the cut)"
        )
    return window[: at + 1], window[at + 1 :]


def _check_kept_fits(tail: list[WithParts], window: list[WithParts], cfg: Config) -> None:
    """What ``upTo`` keeps must fit the model on its own, or the summary cannot help."""
    info = latest_model_turn(window)
    limit = lookup(info.provider_id, info.model_id, cfg.models) if info is not None else None
    if info is None or limit is None or limit.context == 0:
        return
    room = overflow.usable(limit, cfg.compaction)
    kept = estimate_messages(tail)
    if kept > room:
        raise InvalidParams(
            f"invalid params: `$.upTo` keeps about {kept} tokens after the summary, which does "
            f"not fit the model {info.provider_id}/{info.model_id} (usable {room}): over by "
            f"{kept - room}; pick a later message"
        )


def prepared_cut(plan: Plan) -> Key | None:
    """The newest message a summary prepared from ``plan`` covers: the newest it saw, or,
    when the plan keeps an open turn, the newest before what it keeps (all of which must come
    after it: else None, nothing is prepared)."""
    if plan.open_turn is None or not plan.tail:
        return plan.cut
    kept = {m.info.id for m in plan.tail}
    covered = [_key(m) for m in plan.window if m.info.id not in kept]
    if not covered or min(_key(m) for m in plan.tail) < max(covered):
        return None
    return max(covered)


def open_turn_after(plan: Plan, cut: Key) -> OpenTurn | None:
    """How a prepared summary covering up to ``cut`` keeps the plan's open turn: ``kept``
    when the whole turn comes after the cut, ``cut`` when the turn did not fit anyway and the
    part the plan keeps does; None when there is none, or the summary covers what is kept."""
    if plan.open_turn is None or plan.open_start is None:
        return None
    if plan.open_start > cut:
        return "kept"
    if plan.open_turn == "cut" and (plan.open_from is None or plan.open_from > cut):
        return "cut"
    return None


class _Spans(NamedTuple):
    """What a compaction summarizes, keeps verbatim, references, merges and sends."""

    to_summarize: list[WithParts]
    tail: list[WithParts]
    reference: list[WithParts]
    previous: list[str]
    history: list[WithParts]


def _as_sent(msgs: list[WithParts]) -> list[WithParts]:
    """As OpenCode sends it: the window as it is, an earlier compaction inline ("What did we
    do so far?", its summary, "Continue ..."), no merge block."""
    return [_without_ledger(m) if is_summary(m) else m for m in msgs]


def _unsummarized(msgs: list[WithParts]) -> list[WithParts]:
    return [m for m in msgs if not is_marker(m) and not is_summary(m)]


async def _spans(
    store: StorePort,
    req: Request,
    cfg: Config,
    window: list[WithParts],
    keep_at: int,
    before: int,
) -> _Spans:
    """The split of ``window`` (everything from ``keep_at`` on is kept: the open turn)."""
    ccfg = cfg.compaction
    if req.up_to is not None:  # ``session/compact {upTo}``
        to_summarize, tail = _split_at(window, req.up_to)
        _check_kept_fits(tail, window, cfg)
        return _Spans(to_summarize, tail, [], [], _as_sent(to_summarize))
    if ccfg.method != "collapse":
        spans = _Spans(window[:keep_at], window[keep_at:], [], [], _as_sent(window[:keep_at]))
    else:
        # Collapse (seed 003): earlier summaries go to the writer as summaries to merge.
        parts = split(window, ccfg.extract_ratio, ccfg.recent_ratio)
        to_summarize, tail = parts.summarize, parts.tail
        if len(to_summarize) > keep_at:  # collapse's breakpoint fell inside the turn
            to_summarize, tail = window[:keep_at], window[keep_at:]
        previous = await previous_summaries(store, req.session_id, ccfg.previous_summaries)
        spans = _Spans(to_summarize, tail, parts.reference, previous, _unsummarized(to_summarize))
    if len(spans.tail) > len(window) - keep_at and (
        estimate_messages(spans.history) < ccfg.extract_ratio / 2 * before
    ):
        # The window is dominated by its newest messages (one huge tool output, say):
        # summarizing the little before them cannot free room, so summarize everything
        # (but the open turn).
        summarized = window[:keep_at]
        return _Spans(summarized, window[keep_at:], [], spans.previous, _unsummarized(summarized))
    return spans


async def make_plan(store: StorePort, host: Host, req: Request, cfg: Config) -> Plan:
    """What to summarize, what to keep verbatim (collapse), and how it is sent."""
    sid = req.session_id
    session = await store.require_session(sid)
    if session.revert is not None:
        session = await revert.cleanup(store, host, session)
    boundary = await store.boundary(sid)
    window = await load_window(store, session)
    if req.cutoff is not None:
        cutoff = req.cutoff
        window = [m for m in window if Key(m.info.time.created, m.info.id) <= cutoff]
    before = estimate_messages(window)
    # The open turn stays verbatim: everything from ``keep_at`` on is kept.
    open_at = open_turn.start(window) if req.keep_open_turn and req.up_to is None else None
    keep_at = len(window)
    if open_at is not None:
        keep_at = open_turn.kept_from(window, open_at, turn_budget(req, cfg, window))[0]
    _summarized, tail, reference, previous, history = await _spans(
        store, req, cfg, window, keep_at, before
    )
    how: OpenTurn | None = None
    if open_at is not None:
        how = "kept" if len(window) - len(tail) <= open_at else "cut"
    last_user = _last_user(window)
    # What compaction appends must sort after everything already in the session, even
    # when a frontend's clock runs ahead of ours.
    latest = max((m.info.time.created for m in window), default=None)
    return Plan(
        sid=sid,
        session=session,
        window=window,
        history=history,
        tail=tail,
        reference=reference,
        previous=previous,
        before=before,
        standard=cfg.compaction.method != "collapse",
        last_user=last_user,
        model=req.model or (last_user.model if last_user else None),
        cut=max((Key(m.info.time.created, m.info.id) for m in window), default=None),
        clock=Clock(now_ms() if latest is None else latest + 1),
        open_turn=how,
        open_start=_key(window[open_at]) if open_at is not None else None,
        open_from=_key(window[keep_at]) if keep_at < len(window) else None,
        boundary=boundary.marker if boundary is not None else None,
    )


def turn_budget(req: Request, cfg: Config, window: list[WithParts]) -> int | None:
    """The tokens a kept open turn may take: the compaction's budget less the frontend's
    overhead and the summary's room (None: no budget known, the whole turn is kept)."""
    if req.usable <= 0:
        return None
    summary = summary_budget(window, cfg)
    # The task (the first and latest requests, which an earlier summary in the window may
    # carry too) rides on top of the summary's budget, at most half of it and
    # ``taskBudget`` (``bounded.summarize``): the summary may take that much more.
    task = min(cfg.compaction.task_budget, summary // 2)
    return max(0, req.usable - req.overhead - summary - task)


async def prompt(host: Host, req: Request, cfg: Config) -> str:
    """Seed 000's prompt (or ``compaction.prompt``), or a hook's replacement, plus the
    hooks' context and the request's instructions."""
    hooks = await host.compacting_hook(req.session_id)
    default = cfg.compaction.prompt or DEFAULT_PROMPT
    prompt = next((h.prompt for h in hooks if h.prompt), None) or default
    extra = [c for h in hooks for c in h.context if c]
    if req.instructions:
        extra.append(req.instructions)
    if extra:
        prompt = prompt + "\n\n" + "\n\n".join(extra)
    return prompt


async def previous_summaries(store: StorePort, sid: str, n: int) -> list[str]:
    if n <= 0:
        return []
    texts = await store.summary_texts(sid, n)
    return [t for t in texts if t.strip()]


def mark_prepared(event: CompactedEvent, req: Request, cfg: Config, *, prepared: bool) -> None:
    """``prepared``/``waitedMs`` on the event, with compaction.prepare only (the default
    event keeps OpenCode's shape)."""
    if cfg.compaction.prepare is None:
        return
    event.prepared = prepared
    if req.started is not None:
        waited = asyncio.get_running_loop().time() - req.started
        event.waited_ms = max(0, round(waited * 1000))
    else:
        event.waited_ms = 0
