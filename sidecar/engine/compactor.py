"""Summarization (seed 000's ``create`` + ``process``), standard and collapse.

Append-only: a compaction adds a marker user message (with a ``compaction`` part), a summary
assistant message answering it, and, when automatic, a synthetic "continue" user message.
Nothing already stored changes. The marker cuts history only once the summary has finished
without error, so every failure path leaves the context exactly as it was; a cancelled
compaction removes its own marker and summary, leaving nothing half-written.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from sidecar.engine import bounded, ledger, overflow, revert
from sidecar.engine.collapse import split
from sidecar.engine.filter import filter_compacted
from sidecar.engine.host import Host
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.catalog import lookup
from sidecar.model.config import Config
from sidecar.model.conversation import CONTINUE_TEXT, is_marker, is_summary, latest_model_turn
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
)
from sidecar.model.rpc import (
    CompactedEvent,
    CompactResult,
    MessageRemovedEvent,
    MessageUpdatedEvent,
    PartUpdatedEvent,
    StatusEvent,
)
from sidecar.store import Key, Store
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    DEFAULT_PROMPT,
    Summarizer,
    SummaryError,
)

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


@dataclass
class Outcome:
    result: CompactResult
    before_tokens: int = 0
    after_tokens: int = 0
    cut: Key | None = None  # the newest message the compaction saw
    marker: Key | None = None  # its marker
    end: Key | None = None  # the newest message it added


def _without_ledger(m: WithParts) -> WithParts:
    """An earlier summary as the writer sees it inline: its prose without the ledger block
    (the daemon rolls the ledger itself; a model must neither copy nor edit it)."""
    parts: list[Part] = [
        msgspec.structs.replace(p, text=ledger.drop_block(p.text)) if isinstance(p, TextPart) else p
        for p in m.parts
    ]
    return WithParts(info=m.info, parts=parts)


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
    clock says, before what the frontend writes next (DESIGN §4, One timeline); and the same
    writes give the same stored times."""

    def __init__(self, start: int) -> None:
        self._last = start - 1

    def __call__(self) -> int:
        self._last += 1
        return self._last


class Compactor:
    def __init__(self, store: Store, host: Host) -> None:
        self.store = store
        self.host = host

    async def _put(self, messages: list[Any], parts: list[Part]) -> None:
        encoded_m = [(m, _stored(m)) for m in messages]
        encoded_p = [(p, _stored(p)) for p in parts]
        await self.store.put_many(encoded_m, encoded_p)
        for m, raw in encoded_m:
            self.host.publish(
                m.session_id, "message/updated", MessageUpdatedEvent(message=msgspec.Raw(raw))
            )
        for p, raw in encoded_p:
            self.host.publish(p.session_id, "part/updated", PartUpdatedEvent(part=msgspec.Raw(raw)))

    def _status(
        self, sid: str, status: Literal["idle", "compacting", "error"], error: str | None = None
    ) -> None:
        self.host.publish(
            sid, "session/status", StatusEvent(session_id=sid, status=status, error=error)
        )

    async def run(self, req: Request, cfg: Config, writer: Summarizer) -> Outcome:
        sid = req.session_id
        session = await self.store.require_session(sid)
        if session.revert is not None:
            session = await revert.cleanup(self.store, self.host, session)
        window = await load_window(self.store, session)
        if req.cutoff is not None:
            cutoff = req.cutoff
            window = [m for m in window if Key(m.info.time.created, m.info.id) <= cutoff]
        before = estimate_messages(window)
        ccfg = cfg.compaction
        standard = ccfg.method != "collapse"
        if not standard:
            parts = split(window, ccfg.extract_ratio, ccfg.recent_ratio)
            to_summarize, tail, reference = parts.summarize, parts.tail, parts.reference
        else:
            to_summarize, tail, reference = list(window), [], []
        if standard:
            # As OpenCode sends it: the window as it is, an earlier compaction inline
            # ("What did we do so far?", its summary, "Continue ..."), no merge block.
            previous: list[str] = []
            history = [_without_ledger(m) if is_summary(m) else m for m in window]
        else:
            # Collapse (seed 003): earlier summaries go to the writer as summaries to merge.
            previous = await self._previous_summaries(sid, ccfg.previous_summaries)
            history = [m for m in to_summarize if not is_marker(m) and not is_summary(m)]
        if tail and estimate_messages(history) < ccfg.extract_ratio / 2 * before:
            # The window is dominated by its newest messages (one huge tool output, say):
            # summarizing the little before them cannot free room, so summarize everything.
            to_summarize, tail, reference = list(window), [], []
            history = [m for m in to_summarize if not is_marker(m) and not is_summary(m)]

        last_user = _last_user(window)
        model = req.model or (last_user.model if last_user else None)
        # What compaction appends must sort after everything already in the session, even
        # when a frontend's clock runs ahead of ours.
        latest = max((m.info.time.created for m in window), default=None)
        cut = max((Key(m.info.time.created, m.info.id) for m in window), default=None)
        clock = _Clock(now_ms() if latest is None else latest + 1)
        now = clock()
        marker = UserMessage(
            id=new_id("msg"),
            session_id=sid,
            time=MessageTime(created=now),
            agent=last_user.agent if last_user else None,
            model=model,
        )
        marker_part = CompactionPart(
            id=new_id("prt"),
            session_id=sid,
            message_id=marker.id,
            auto=req.auto,
            overflow=True if req.overflow else None,
            tail_start_id=tail[0].info.id if tail else None,
        )
        await self._put([marker], [marker_part])
        if standard:
            # The new marker is sent too, as user "What did we do so far?" before the prompt.
            history.append(WithParts(info=marker, parts=[marker_part]))
        self._status(sid, "compacting")
        token = req.progress_token if req.progress_token is not None else f"compact-{marker.id}"
        self.host.progress(
            sid,
            token,
            {
                "kind": "begin",
                "title": "Compacting",
                "cancellable": True,
                "message": f"{len(history)} messages",
                "percentage": 0,
            },
        )
        summary: AssistantMessage | None = None
        try:
            hooks = await self.host.compacting_hook(sid)
            prompt = next((h.prompt for h in hooks if h.prompt), None) or DEFAULT_PROMPT
            extra = [c for h in hooks for c in h.context if c]
            if req.instructions:
                extra.append(req.instructions)
            if extra:
                prompt = prompt + "\n\n" + "\n\n".join(extra)
            summary = AssistantMessage(
                id=new_id("msg"),
                session_id=sid,
                parent_id=marker.id,
                time=MessageTime(created=clock()),
                provider_id=writer.provider_id,
                model_id=writer.model_id,
                mode="compaction",
                agent="compaction",
                path={"cwd": session.directory or "", "root": session.directory or ""},
                summary=True,
            )
            await self._put([summary], [])

            def report(message: str, pct: int | None) -> None:
                value: dict[str, Any] = {"kind": "report", "message": message}
                if pct is not None:
                    value["percentage"] = pct
                self.host.progress(sid, token, value)

            limit = cfg.summarizer.max_input_tokens or writer.input_limit()
            result = await bounded.summarize(
                writer,
                system=COMPACTION_SYSTEM,
                prompt=prompt,
                history=history,
                reference=reference,
                previous=previous,
                max_tokens=_summary_budget(window, cfg),
                max_input_tokens=limit,
                progress=report,
                prior=ledger.latest(previous or await self._previous_summaries(sid, 1)),
            )
            # OpenCode's summary parts: step-start, the text, step-finish (with the usage).
            step_start = StepStartPart(id=new_id("prt"), session_id=sid, message_id=summary.id)
            text_part = TextPart(
                id=new_id("prt"), session_id=sid, message_id=summary.id, text=result.text
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
                time=MessageTime(created=summary.time.created, completed=clock()),
                provider_id=result.provider_id,
                model_id=result.model_id,
            )
            after_window = [
                WithParts(info=marker, parts=[marker_part]),
                WithParts(info=done, parts=[text_part]),
                *tail,
            ]
            after = estimate_messages(filter_compacted(after_window))
            if after >= before and req.usable > 0 and req.reported_tokens - before > req.usable:
                raise SummaryError(
                    "context overflow that compaction cannot help: the provider counted "
                    f"{req.reported_tokens} tokens but the history is only about {before}; the "
                    f"rest (about {req.reported_tokens - before}: system prompt, tool definitions)"
                    f" alone exceeds the usable {req.usable}. Shrink them or raise the model's "
                    "limits; history kept"
                )
            if after >= before:
                raise SummaryError(
                    f"compaction would not make the context smaller ({before} -> {after} "
                    "estimated tokens); history kept"
                )
            await self._put([done], [step_start, text_part, step_finish])
        except asyncio.CancelledError:
            await self._discard(sid, marker, summary)
            self.host.progress(sid, token, {"kind": "end", "message": "cancelled"})
            self._status(sid, "idle")
            raise
        except Exception as exc:
            message = str(exc) if isinstance(exc, SummaryError) else f"{type(exc).__name__}: {exc}"
            if summary is not None:
                failed = msgspec.structs.replace(
                    summary,
                    error=MessageError(name="CompactionError", data={"message": message}),
                    time=MessageTime(created=summary.time.created, completed=clock()),
                )
                await self._put([failed], [])
            self.host.progress(sid, token, {"kind": "end", "message": f"failed: {message}"})
            self._status(sid, "error", message)
            return Outcome(
                CompactResult(
                    status="stop", summary_message_id=summary.id if summary else None, error=message
                ),
                before,
                before,
            )
        end = Key(done.time.created, done.id)

        if req.auto:
            cont = UserMessage(
                id=new_id("msg"),
                session_id=sid,
                time=MessageTime(created=clock()),
                agent=last_user.agent if last_user else None,
                model=model,
            )
            cont_part = TextPart(
                id=new_id("prt"),
                session_id=sid,
                message_id=cont.id,
                text=CONTINUE_TEXT,
                synthetic=True,
            )
            await self._put([cont], [cont_part])
            end = Key(cont.time.created, cont.id)
        self.host.publish(
            sid,
            "session/compacted",
            CompactedEvent(session_id=sid, message_id=done.id, auto=req.auto),
        )
        self.host.progress(sid, token, {"kind": "end", "message": f"{before} -> {after} tokens"})
        self._status(sid, "idle")
        return Outcome(
            CompactResult(status="continue", summary_message_id=done.id),
            before,
            after,
            cut=cut,
            marker=Key(marker.time.created, marker.id),
            end=end,
        )

    async def _previous_summaries(self, sid: str, n: int) -> list[str]:
        if n <= 0:
            return []
        texts = await self.store.summary_texts(sid, n)
        return [t for t in texts if t.strip()]

    async def _discard(
        self, sid: str, marker: UserMessage, summary: AssistantMessage | None
    ) -> None:
        """Remove a cancelled compaction's own messages (shielded: it must finish)."""

        async def remove() -> None:
            for m in (summary, marker):
                if m is not None and await self.store.remove_message(sid, m.id):
                    self.host.publish(
                        sid, "message/removed", MessageRemovedEvent(session_id=sid, message_id=m.id)
                    )

        with contextlib.suppress(Exception):
            await asyncio.shield(remove())
