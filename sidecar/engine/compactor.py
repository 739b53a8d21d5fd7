"""Summarization (seed 000's ``create`` + ``process``), standard and collapse.

Append-only: a compaction adds a marker user message (with a ``compaction`` part), a summary
assistant message answering it, and, when automatic, a synthetic "continue" user message.
Nothing already stored changes. The marker cuts history only once the summary has finished
without error, so every failure path leaves the context exactly as it was; a cancelled
compaction removes its own marker and summary, leaving nothing half-written, and so does a
refused one (its summary would not make the context smaller) or a lost one (another daemon's
compaction of the session committed meanwhile), which says why in ``session/compacted``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from sidecar.engine import bounded, ledger, open_turn, overflow, render, revert, steer, verify
from sidecar.engine.collapse import split
from sidecar.engine.filter import filter_compacted
from sidecar.engine.host import Host
from sidecar.engine.ports import StorePort, steering
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
    writer_name,
)
from sidecar.model.ids import new_id, now_ms
from sidecar.model.messages import (
    AssistantMessage,
    MessageError,
    MessageTime,
    ModelRef,
    UserMessage,
    WithParts,
)
from sidecar.model.parts import (
    CompactionPart,
    Part,
    StepFinishPart,
    StepStartPart,
    TextPart,
    ToolCompleted,
    ToolPart,
)
from sidecar.model.rpc import (
    CompactedEvent,
    CompactionRecord,
    CompactResult,
    Diagnostics,
    MessageRemovedEvent,
    MessageUpdatedEvent,
    OpenTurn,
    PartUpdatedEvent,
    SessionStatus,
    StatusEvent,
)
from sidecar.model.session import Session
from sidecar.store import Key
from sidecar.store import steer as steer_data
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    Summarizer,
    SummaryError,
    SummaryResult,
)
from sidecar.summarizers.extractive import ExtractiveSummarizer

_encoder = msgspec.json.Encoder()
log = logging.getLogger("sidecar.engine")


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


def _summary_budget(window: Sequence[WithParts], cfg: Config) -> int:
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


def _fallback_writer() -> Summarizer:
    """``summarizer.fallback`` ``"extractive"``: offline, so it cannot fail the way the
    configured writer did (no network, no quota, no time limit to miss)."""
    from sidecar.summarizers.extractive import ExtractiveSummarizer

    return ExtractiveSummarizer()


def _last_user(window: Sequence[WithParts]) -> UserMessage | None:
    for m in reversed(window):
        if isinstance(m.info, UserMessage) and not is_marker(m):
            return m.info
    return None


_dict_decoder = msgspec.json.Decoder(dict[str, Any])


def _stored(obj: Any) -> bytes:
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


class _Clock:
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
class _Plan:
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
    clock: _Clock
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


def _check_smaller(req: Request, before: int, after: int, summary: Sequence[Part]) -> None:
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


def _diagnostics(record: CompactionRecord) -> dict[str, Any]:
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


def _prepared_cut(plan: _Plan) -> Key | None:
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


def _open_turn_after(plan: _Plan, cut: Key) -> OpenTurn | None:
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


class Compactor:
    def __init__(self, store: StorePort, host: Host) -> None:
        self.store = store
        self.host = host

    async def _put(self, messages: list[Any], parts: list[Part]) -> None:
        encoded_m = [(m, _stored(m)) for m in messages]
        encoded_p = [(p, _stored(p)) for p in parts]
        await self.store.put_many(encoded_m, encoded_p)
        for m, raw in encoded_m:
            self.host.publish(m.session_id, MessageUpdatedEvent(message=msgspec.Raw(raw)))
        for p, raw in encoded_p:
            self.host.publish(p.session_id, PartUpdatedEvent(part=msgspec.Raw(raw)))

    def _status(self, sid: str, status: SessionStatus, error: str | None = None) -> None:
        self.host.publish(sid, StatusEvent(session_id=sid, status=status, error=error))

    async def run(self, req: Request, cfg: Config, writer: Summarizer) -> Outcome:
        """marker → hook → summary → (auto) continue. The marker cuts history only once its
        summary finished without error; a failure keeps the history and says why."""
        started = time.monotonic()
        plan = await self._plan(req, cfg)
        kept = await self._kept(req, cfg, plan)
        marker = await self._append_marker(req, plan)
        token = self._begin(req, plan, marker)
        summary: AssistantMessage | None = None
        try:
            prompt = await self._prompt(req, cfg)
            summary = await self._open_summary(plan, marker, writer)
            done, parts, after = await self._write_summary(
                req, cfg, plan, writer, prompt, marker, summary, token, kept
            )
            await self._check_not_lost(plan, done, parts)
            await self._put([done], parts)
        except asyncio.CancelledError:
            await self._discard(plan.sid, marker.info.id, summary)
            self.host.progress(plan.sid, token, {"kind": "end", "message": "cancelled"})
            self._status(plan.sid, "idle")
            raise
        except Refused as exc:
            return await self._refuse(req, cfg, plan, marker, summary, token, exc, started)
        except Exception as exc:
            return await self._fail(plan, summary, token, exc)
        end = Key(done.time.created, done.id)
        continue_id = None
        if req.auto:
            end = await self._append_continue(plan)
            continue_id = end.id
        record = await self._diagnose(
            req, plan, marker, done, parts, end, continue_id, started, cfg.compaction.pruned_stub
        )
        event = CompactedEvent(
            session_id=plan.sid,
            message_id=done.id,
            **_diagnostics(record),
        )
        self._mark_prepared(event, req, cfg, prepared=False)
        marker_key = Key(marker.info.time.created, marker.info.id)
        return self._finish(plan, token, event, parts, after, marker_key, end, record)

    def _finish(
        self,
        plan: _Plan,
        token: str | int,
        event: CompactedEvent,
        parts: Sequence[Part],
        after: int,
        marker: Key,
        end: Key,
        record: CompactionRecord,
        *,
        prepared: bool = False,
    ) -> Outcome:
        """A committed compaction: its event (with, under ``compaction.verifySummary``, why the
        first summary was rejected), the end of its progress, the session idle again, and
        what the caller is told."""
        verified = next((p.metadata for p in parts if isinstance(p, TextPart) and p.metadata), None)
        if verified is not None:
            rejected = verified.get("rejected")
            event.rejected = rejected if isinstance(rejected, str) else None
        self.host.publish(plan.sid, event)
        message = f"{plan.before} -> {after} tokens"
        self.host.progress(plan.sid, token, {"kind": "end", "message": message})
        self._status(plan.sid, "idle")
        return Outcome(
            CompactResult(status="continue", summary_message_id=event.message_id),
            plan.before,
            after,
            cut=plan.cut,
            marker=marker,
            end=end,
            record=record,
            prepared=prepared,
        )

    async def _kept(self, req: Request, cfg: Config, plan: _Plan) -> str:
        """The ``## Kept verbatim`` block (``compaction.keep``), bounded by ``maxTokens`` and
        by the ledger's share of the summary budget: empty unless something is kept."""
        keep = cfg.compaction.keep
        if not (keep.first_request or keep.todo_tools or keep.pinned) or keep.max_tokens <= 0:
            return ""
        share = int(_summary_budget(plan.window, cfg) * bounded.LEDGER_SHARE)
        budget = min(keep.max_tokens, share)
        return await steer.kept_block(self.store, plan.sid, keep, budget, req.cutoff)

    async def _diagnose(
        self,
        req: Request,
        plan: _Plan,
        marker: WithParts,
        done: AssistantMessage,
        parts: list[Part],
        end: Key,
        continue_id: str | None,
        started: float,
        stub: render.Stub,
        kept: Sequence[WithParts] | None = None,
        open_turn: OpenTurn | None = None,
    ) -> CompactionRecord:
        """Measure what the compaction did and store it beside the session; ``kept``: the
        messages it left as they are (default: the plan's tail; a prepared summary's: those
        after its cut), ``open_turn``: how it kept the open turn (default: the plan's)."""
        window = [
            m
            for m in await load_window(self.store, plan.session)
            if Key(m.info.time.created, m.info.id) <= end
        ]
        kept_msgs = plan.tail if kept is None else kept
        kept_ids = {m.info.id for m in kept_msgs}
        replaced = [m for m in plan.window if m.info.id not in kept_ids]
        # The window just before it, as ``session/context`` measured it: what the plan read,
        # and what a prepared summary keeps that was written after the plan.
        planned = {m.info.id for m in plan.window}
        before = [*plan.window, *(m for m in kept_msgs if m.info.id not in planned)]
        pruned = [
            p.id
            for m in replaced
            for p in m.parts
            if isinstance(p, ToolPart)
            and isinstance(p.state, ToolCompleted)
            and p.state.time.compacted is not None
        ]
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
        writer = writer_name(done.provider_id, done.model_id)
        record = CompactionRecord(
            message_id=done.id,
            time=done.time.created,
            marker_id=marker.info.id,
            continue_id=continue_id,
            replaced_ids=[m.info.id for m in replaced],
            pruned_part_ids=pruned,
            tokens_before=estimate_messages(before) + render.stub_extra(before, stub),
            tokens_after=estimate_messages(window) + render.stub_extra(window, stub),
            reported_tokens=req.reported_tokens if req.auto and req.reported_tokens else None,
            summary_tokens=estimate(text),
            messages_summarized=len(replaced),
            parts_pruned=len(pruned),
            writer=writer,
            duration_ms=int((time.monotonic() - started) * 1000),
            auto=req.auto,
        )
        how = plan.open_turn if kept is None else open_turn
        if how is not None:
            record.open_turn = how
        try:
            await steer_data.record_compaction(
                steering(self.store), plan.sid, done.id, done.time.created, _encoder.encode(record)
            )
        except Exception:  # the compaction itself is committed: it stands, unrecorded
            log.exception("could not record the diagnostics of compaction %s", done.id)
        return record

    @staticmethod
    def _mark_prepared(event: CompactedEvent, req: Request, cfg: Config, *, prepared: bool) -> None:
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

    async def prepare(self, req: Request, cfg: Config, writer: Summarizer) -> Prepared | None:
        """Write, without storing anything, the summary a compaction of the session as it is
        now (up to ``req.cutoff``) would write: same plan, hook, writer and ledger, but never
        the offline writer: a writer that fails (or whose summary is rejected) fails the
        preparation, which is logged and raised (the engine drops and counts it; the overflow
        then compacts as usual, with the writer and its fallback). Its progress is marked as
        background. None when there is nothing to prepare."""
        session = await self.store.require_session(req.session_id)
        if session.revert is not None:
            return None  # a compaction would first clean the revert up: not in the background
        plan = await self._plan(req, cfg)
        cut = _prepared_cut(plan)
        if cut is None:
            return None
        fp = fingerprint(plan.window, cut)
        appended = plan.marker(auto=True, overflow=True, tail=[])
        marker = appended.info
        if plan.standard:
            plan.history.append(appended)
        token = f"prepare-{marker.id}"
        self.host.progress(
            plan.sid,
            token,
            {
                "kind": "begin",
                "title": "Compacting (background)",
                "cancellable": False,
                "message": f"{len(plan.history)} messages",
                "percentage": 0,
            },
        )
        try:
            prompt = await self._prompt(req, cfg)
            kept = await self._kept(req, cfg, plan)
            summary = AssistantMessage(
                id=new_id("msg"),
                session_id=plan.sid,
                parent_id=marker.id,
                time=MessageTime(created=plan.clock()),
                provider_id=writer.provider_id,
                model_id=writer.model_id,
                mode="compaction",
                agent="compaction",
                path={"cwd": plan.session.directory or "", "root": plan.session.directory or ""},
                summary=True,
            )
            done, parts, after = await self._write_summary(
                req, cfg, plan, writer, prompt, appended, summary, token, kept, offline=False
            )
        except asyncio.CancelledError:
            self.host.progress(plan.sid, token, {"kind": "end", "message": "cancelled"})
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, SummaryError) else f"{type(exc).__name__}: {exc}"
            self.host.log(f"preparing a summary for session {plan.sid} failed: {message}")
            self.host.progress(plan.sid, token, {"kind": "end", "message": f"failed: {message}"})
            raise
        self.host.progress(
            plan.sid, token, {"kind": "end", "message": f"prepared: {plan.before} -> {after}"}
        )
        return Prepared(plan.sid, cut, fp, prompt, done, parts)

    async def commit_prepared(
        self, req: Request, cfg: Config, prepared: Prepared, budget: int
    ) -> Outcome | None:
        """Commit ``prepared`` as this compaction: marker (pointing back at the first message
        after the cut), the summary, the messages after the cut as they are, then (automatic)
        the continue message. None, storing nothing, when it is no longer valid (anything up to
        its cut changed) or what follows the cut does not fit in ``budget`` (0: no budget)."""
        started = time.monotonic()
        plan = await self._plan(req, cfg)
        if plan.cut is None or prepared.cut > plan.cut:
            return None
        if fingerprint(plan.window, prepared.cut) != prepared.fingerprint:
            return None
        if not any(Key(m.info.time.created, m.info.id) == prepared.cut for m in plan.window):
            return None
        after_cut = [m for m in plan.window if Key(m.info.time.created, m.info.id) > prepared.cut]
        how = _open_turn_after(plan, prepared.cut)
        if plan.open_turn is not None and how is None:
            return None  # it summarized the open turn this compaction keeps
        head = plan.marker(req.auto, bool(req.overflow), after_cut)
        marker, marker_part = head.info, head.parts[0]
        created = plan.clock()
        done = msgspec.structs.replace(
            prepared.summary,
            parent_id=marker.id,
            time=MessageTime(created=created, completed=plan.clock()),
        )
        text = [p for p in prepared.parts if isinstance(p, TextPart)]
        heads = [
            head,
            WithParts(info=done, parts=list(text)),
        ]
        window_after = filter_compacted([*after_cut, *heads])
        after = estimate_messages(window_after)
        if after >= plan.before or (budget > 0 and after > budget):
            return None
        token = req.progress_token if req.progress_token is not None else f"compact-{marker.id}"
        self._status(plan.sid, "compacting")
        self.host.progress(
            plan.sid,
            token,
            {"kind": "begin", "title": "Compacting", "cancellable": False, "percentage": 0},
        )
        messages: list[Any] = [marker, done]
        parts: list[Part] = [marker_part, *prepared.parts]
        end = Key(done.time.created, done.id)
        continue_id = None
        if req.auto:
            cont = plan.continue_message()
            continue_id = cont.info.id
            messages.append(cont.info)
            parts.extend(cont.parts)
            end = Key(cont.info.time.created, cont.info.id)
        await self._put(messages, parts)  # one transaction: all of it or nothing
        heads[1] = WithParts(info=done, parts=list(prepared.parts))
        record = await self._diagnose(
            req,
            plan,
            heads[0],
            done,
            list(prepared.parts),
            end,
            continue_id,
            started,
            cfg.compaction.pruned_stub,
            after_cut,
            how,
        )
        event = CompactedEvent(session_id=plan.sid, message_id=done.id, **_diagnostics(record))
        self._mark_prepared(event, req, cfg, prepared=True)
        marker_key = Key(marker.time.created, marker.id)
        return self._finish(plan, token, event, text, after, marker_key, end, record, prepared=True)

    async def _plan(self, req: Request, cfg: Config) -> _Plan:
        """What to summarize, what to keep verbatim (collapse), and how it is sent."""
        sid = req.session_id
        session = await self.store.require_session(sid)
        if session.revert is not None:
            session = await revert.cleanup(self.store, self.host, session)
        boundary = await self.store.boundary(sid)
        window = await load_window(self.store, session)
        if req.cutoff is not None:
            cutoff = req.cutoff
            window = [m for m in window if Key(m.info.time.created, m.info.id) <= cutoff]
        before = estimate_messages(window)
        ccfg = cfg.compaction
        standard = ccfg.method != "collapse"
        # The open turn stays verbatim: everything from ``keep_at`` on is kept.
        open_at = open_turn.start(window) if req.keep_open_turn and req.up_to is None else None
        keep_at = len(window)
        if open_at is not None:
            budget = self._turn_budget(req, cfg, window)
            keep_at = open_turn.kept_from(window, open_at, budget)[0]
        if not standard:
            parts = split(window, ccfg.extract_ratio, ccfg.recent_ratio)
            to_summarize, tail, reference = parts.summarize, parts.tail, parts.reference
            if len(to_summarize) > keep_at:  # collapse's breakpoint fell inside the turn
                to_summarize, tail = window[:keep_at], window[keep_at:]
        else:
            to_summarize, tail, reference = window[:keep_at], window[keep_at:], []
        if standard:
            # As OpenCode sends it: the window as it is, an earlier compaction inline
            # ("What did we do so far?", its summary, "Continue ..."), no merge block.
            previous: list[str] = []
            history = [_without_ledger(m) if is_summary(m) else m for m in to_summarize]
        else:
            # Collapse (seed 003): earlier summaries go to the writer as summaries to merge.
            previous = await self._previous_summaries(sid, ccfg.previous_summaries)
            history = [m for m in to_summarize if not is_marker(m) and not is_summary(m)]
        if req.up_to is not None:
            to_summarize, tail = _split_at(window, req.up_to)
            _check_kept_fits(tail, window, cfg)
            reference, previous = [], []
            history = [_without_ledger(m) if is_summary(m) else m for m in to_summarize]
        elif len(tail) > len(window) - keep_at and (
            estimate_messages(history) < ccfg.extract_ratio / 2 * before
        ):
            # The window is dominated by its newest messages (one huge tool output, say):
            # summarizing the little before them cannot free room, so summarize everything
            # (but the open turn).
            to_summarize, tail, reference = window[:keep_at], window[keep_at:], []
            history = [m for m in to_summarize if not is_marker(m) and not is_summary(m)]
        how: OpenTurn | None = None
        if open_at is not None:
            how = "kept" if len(window) - len(tail) <= open_at else "cut"
        last_user = _last_user(window)
        # What compaction appends must sort after everything already in the session, even
        # when a frontend's clock runs ahead of ours.
        latest = max((m.info.time.created for m in window), default=None)
        return _Plan(
            sid=sid,
            session=session,
            window=window,
            history=history,
            tail=tail,
            reference=reference,
            previous=previous,
            before=before,
            standard=standard,
            last_user=last_user,
            model=req.model or (last_user.model if last_user else None),
            cut=max((Key(m.info.time.created, m.info.id) for m in window), default=None),
            clock=_Clock(now_ms() if latest is None else latest + 1),
            open_turn=how,
            open_start=_key(window[open_at]) if open_at is not None else None,
            open_from=_key(window[keep_at]) if keep_at < len(window) else None,
            boundary=boundary.marker if boundary is not None else None,
        )

    @staticmethod
    def _turn_budget(req: Request, cfg: Config, window: list[WithParts]) -> int | None:
        """The tokens a kept open turn may take: the compaction's budget less the frontend's
        overhead and the summary's room (None: no budget known, the whole turn is kept)."""
        if req.usable <= 0:
            return None
        summary = _summary_budget(window, cfg)
        # The task (the first and latest requests, which an earlier summary in the window may
        # carry too) rides on top of the summary's budget, at most half of it and
        # ``taskBudget`` (``bounded.summarize``): the summary may take that much more.
        task = min(cfg.compaction.task_budget, summary // 2)
        return max(0, req.usable - req.overhead - summary - task)

    async def _append_marker(self, req: Request, plan: _Plan) -> WithParts:
        appended = plan.marker(req.auto, bool(req.overflow), plan.tail)
        await self._put([appended.info], appended.parts)
        if plan.standard:
            # The new marker is sent too, as user "What did we do so far?" before the prompt.
            plan.history.append(appended)
        return appended

    def _begin(self, req: Request, plan: _Plan, marker: WithParts) -> str | int:
        """``session/status`` compacting and the progress ``begin``; returns the token."""
        self._status(plan.sid, "compacting")
        token = req.progress_token
        if token is None:
            token = f"compact-{marker.info.id}"
        self.host.progress(
            plan.sid,
            token,
            {
                "kind": "begin",
                "title": "Compacting",
                "cancellable": True,
                "message": f"{len(plan.history)} messages",
                "percentage": 0,
            },
        )
        return token

    async def _prompt(self, req: Request, cfg: Config) -> str:
        """Seed 000's prompt (or ``compaction.prompt``), or a hook's replacement, plus the
        hooks' context and the request's instructions."""
        hooks = await self.host.compacting_hook(req.session_id)
        default = cfg.compaction.prompt or DEFAULT_PROMPT
        prompt = next((h.prompt for h in hooks if h.prompt), None) or default
        extra = [c for h in hooks for c in h.context if c]
        if req.instructions:
            extra.append(req.instructions)
        if extra:
            prompt = prompt + "\n\n" + "\n\n".join(extra)
        return prompt

    async def _open_summary(
        self, plan: _Plan, marker: WithParts, writer: Summarizer
    ) -> AssistantMessage:
        """The summary message, stored unfinished while the writer works."""
        directory = plan.session.directory or ""
        summary = AssistantMessage(
            id=new_id("msg"),
            session_id=plan.sid,
            parent_id=marker.info.id,
            time=MessageTime(created=plan.clock()),
            provider_id=writer.provider_id,
            model_id=writer.model_id,
            mode="compaction",
            agent="compaction",
            path={"cwd": directory, "root": directory},
            summary=True,
        )
        await self._put([summary], [])
        return summary

    async def _write_summary(
        self,
        req: Request,
        cfg: Config,
        plan: _Plan,
        writer: Summarizer,
        prompt: str,
        marker: WithParts,
        summary: AssistantMessage,
        token: str | int,
        kept: str = "",
        *,
        offline: bool = True,
    ) -> tuple[AssistantMessage, list[Part], int]:
        """Run the writer; the finished summary, its parts, and the window's size after it.
        Raises ``SummaryError`` when the result would not make the context smaller.
        ``offline``: whether the offline writer may stand in for a failed or rejected one
        (not for a summary prepared in the background: the overflow's compaction will try the
        configured writer again, and fall back then)."""
        sid = plan.sid

        def report(message: str, pct: int | None) -> None:
            value: dict[str, Any] = {"kind": "report", "message": message}
            if pct is not None:
                value["percentage"] = pct
            self.host.progress(sid, token, value)

        budget = _summary_budget(plan.window, cfg)
        prior = ledger.latest(plan.previous or await self._previous_summaries(sid, 1))

        async def write(by: Summarizer, note: str) -> SummaryResult:
            limit = cfg.summarizer.max_input_tokens or by.input_limit()
            return await bounded.summarize(
                by,
                system=cfg.compaction.system or COMPACTION_SYSTEM,
                structured=cfg.compaction.system is None,
                kept=kept,
                prompt=prompt + note,
                history=plan.history,
                reference=plan.reference,
                previous=plan.previous,
                max_tokens=budget,
                max_input_tokens=limit,
                progress=report,
                prior=prior,
                stub=cfg.compaction.pruned_stub,
                task_budget=cfg.compaction.task_budget,
            )

        fallback = cfg.summarizer.fallback if writer.provider_id != "extractive" else None
        if not offline:
            fallback = None
        time_budget = asyncio.timeout(cfg.compaction.time_budget)
        try:
            async with time_budget:
                result = await write(writer, "")
        except (SummaryError, TimeoutError) as exc:
            if isinstance(exc, TimeoutError) and not time_budget.expired():
                raise
            failure = str(exc) if isinstance(exc, SummaryError) else ""
            if isinstance(exc, TimeoutError):
                failure = (
                    f"{writer_name(writer.provider_id, writer.model_id)}: no summary within "
                    f"compaction.timeBudget ({cfg.compaction.time_budget:g}s)"
                )
            if fallback is None:
                if isinstance(exc, SummaryError):
                    raise
                raise SummaryError(failure) from None
            self.host.log(f"summary writer failed: {failure}; written by the {fallback} fallback")
            report(f"writer failed; {fallback} fallback", None)
            writer = _fallback_writer()
            result = await write(writer, "")
        verified: tuple[str, str | None] | None = None  # (writer, why the first was rejected)
        if cfg.compaction.verify_summary:
            result, verified = await self._verified(
                plan, budget, prior, result, writer, write, offline=offline
            )
        # OpenCode's summary parts: step-start, the text, step-finish (with the usage).
        step_start = StepStartPart(id=new_id("prt"), session_id=sid, message_id=summary.id)
        text = result.text
        if cfg.compaction.recall_hint and not text.rstrip().endswith(RECALL_HINT):
            text = text.rstrip() + "\n\n" + RECALL_HINT
        text_part = TextPart(
            id=new_id("prt"),
            session_id=sid,
            message_id=summary.id,
            text=text,
            metadata=None if verified is None else {"writer": verified[0], "rejected": verified[1]},
        )
        step_finish = StepFinishPart(
            id=new_id("prt"),
            session_id=sid,
            message_id=summary.id,
            reason="stop",
            tokens=result.tokens,
        )
        done = msgspec.structs.replace(
            summary,
            finish="stop",
            tokens=result.tokens,
            time=MessageTime(created=summary.time.created, completed=plan.clock()),
            provider_id=result.provider_id,
            model_id=result.model_id,
        )
        after_window = [marker, WithParts(info=done, parts=[text_part]), *plan.tail]
        after = estimate_messages(filter_compacted(after_window))
        try:
            _check_smaller(req, plan.before, after, [text_part])
        except Refused as exc:
            exc.writer = writer_name(done.provider_id, done.model_id)
            raise
        return done, [step_start, text_part, step_finish], after

    async def _verified(
        self,
        plan: _Plan,
        budget: int,
        prior: ledger.Ledger,
        result: SummaryResult,
        writer: Summarizer,
        write: Callable[[Summarizer, str], Awaitable[SummaryResult]],
        *,
        offline: bool = True,
    ) -> tuple[SummaryResult, tuple[str, str | None]]:
        """``compaction.verifySummary``: a summary longer than what it replaces, over its
        budget, or naming nothing of the session's first request is rejected; the writer gets
        one retry told what was wrong, then the offline writer writes it. The offline writer is
        not second-guessed: it is deterministic (a retry would repeat it) and it is the fallback.
        Returns the result and (who wrote it, why the first was rejected)."""
        if writer.provider_id == ExtractiveSummarizer.provider_id:
            return result, (writer_name(result.provider_id, result.model_id), None)
        replaced = estimate_messages(plan.history) + sum(estimate(p) for p in plan.previous)
        # The session's first request: the ledger carries it verbatim (bounded) across cycles.
        led = ledger.parse(result.text)
        request = (led.first_request if led is not None else "") or prior.first_request

        def check(r: SummaryResult) -> str | None:
            found = ledger.parse(r.text)  # the task rides on top of the summary's budget
            extra = ledger.task_tokens(found) if found is not None else 0
            return verify.problem(
                r.text, budget=budget + extra, replaced=replaced, first_request=request
            )

        first = check(result)
        if first is None:
            return result, (writer_name(result.provider_id, result.model_id), None)
        try:
            retry = await write(writer, verify.note(first, budget))
            second = check(retry)
        except SummaryError as exc:
            second = f"failed: {exc}"
        else:
            if second is None:
                return retry, (writer_name(retry.provider_id, retry.model_id), first)
        why = f"{first}; the retry too: {second}"
        if not offline:
            raise SummaryError(f"summary rejected: {why}")
        written = await write(ExtractiveSummarizer(), "")
        return written, (writer_name(written.provider_id, written.model_id), why)

    async def _fail(
        self, plan: _Plan, summary: AssistantMessage | None, token: str | int, exc: Exception
    ) -> Outcome:
        """Keep the history; the error goes on the summary message and to the subscribers."""
        message = str(exc) if isinstance(exc, SummaryError) else f"{type(exc).__name__}: {exc}"
        if summary is not None:
            failed = msgspec.structs.replace(
                summary,
                error=MessageError(name="CompactionError", data={"message": message}),
                time=MessageTime(created=summary.time.created, completed=plan.clock()),
            )
            await self._put([failed], [])
        self.host.progress(plan.sid, token, {"kind": "end", "message": f"failed: {message}"})
        self._status(plan.sid, "error", message)
        return Outcome(
            CompactResult(
                status="stop", summary_message_id=summary.id if summary else None, error=message
            ),
            plan.before,
            plan.before,
        )

    async def _check_not_lost(
        self, plan: _Plan, done: AssistantMessage, parts: Sequence[Part]
    ) -> None:
        """Refuse a summary whose session was compacted (or uncompacted) since it was planned:
        another daemon on the database did it meanwhile (the lease it held was lost), so this
        summary replaces a window that is no longer the session's."""
        now = await self.store.boundary(plan.sid)
        if (now.marker if now is not None else None) == plan.boundary:
            return
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart))
        raise Refused(
            "lost: another compaction of the session committed while this one was written "
            "(another daemon on the database); history kept",
            summary_tokens=estimate(text),
            writer=writer_name(done.provider_id, done.model_id),
        )

    async def _refuse(
        self,
        req: Request,
        cfg: Config,
        plan: _Plan,
        marker: WithParts,
        summary: AssistantMessage | None,
        token: str | int,
        exc: Refused,
        started: float,
    ) -> Outcome:
        """A refused or lost compaction leaves nothing: its marker and summary are removed
        (subscribers told), the session is as it was, and ``session/compacted`` carries why it
        was ``rejected`` (no summary replaced anything: ``messagesSummarized`` 0, the tokens
        unchanged). Its error is the caller's, as any failed compaction's."""
        message = str(exc)
        await asyncio.shield(self._remove_own(plan.sid, marker.info.id, summary))
        self.host.progress(plan.sid, token, {"kind": "end", "message": f"failed: {message}"})
        tokens = req.reported_tokens if req.auto and req.reported_tokens else plan.before
        event = CompactedEvent(
            session_id=plan.sid,
            message_id=summary.id if summary is not None else marker.info.id,
            auto=req.auto,
            tokens_before=tokens,
            tokens_after=tokens,
            summary_tokens=exc.summary_tokens,
            writer=exc.writer,
            duration_ms=int((time.monotonic() - started) * 1000),
            rejected=message,
        )
        self._mark_prepared(event, req, cfg, prepared=False)
        self.host.publish(plan.sid, event)
        self._status(plan.sid, "error", message)
        return Outcome(
            CompactResult(status="stop", summary_message_id=None, error=message),
            plan.before,
            plan.before,
        )

    async def _append_continue(self, plan: _Plan) -> Key:
        """The synthetic user message an automatic compaction ends with."""
        cont = plan.continue_message()
        await self._put([cont.info], cont.parts)
        return Key(cont.info.time.created, cont.info.id)

    async def _previous_summaries(self, sid: str, n: int) -> list[str]:
        if n <= 0:
            return []
        texts = await self.store.summary_texts(sid, n)
        return [t for t in texts if t.strip()]

    async def _remove_own(self, sid: str, marker_id: str, summary: AssistantMessage | None) -> None:
        """Remove the marker and summary a compaction stored while it ran (summary first:
        a marker without a finished summary cuts nothing)."""
        for mid in (summary.id if summary else None, marker_id):
            if mid is not None and await self.store.remove_message(sid, mid):
                self.host.publish(sid, MessageRemovedEvent(session_id=sid, message_id=mid))

    async def _discard(self, sid: str, marker_id: str, summary: AssistantMessage | None) -> None:
        """Remove a cancelled compaction's own messages (shielded: it must finish)."""
        with contextlib.suppress(Exception):
            await asyncio.shield(self._remove_own(sid, marker_id, summary))
