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
import logging
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from sidecar.engine import bounded, render, steer
from sidecar.engine.filter import filter_compacted
from sidecar.engine.planning import (  # re-exported: the compaction's request and results
    RECALL_HINT,
    Outcome,
    Plan,
    Prepared,
    Refused,
    Request,
    diagnostics,
    fingerprint,
    make_plan,
    mark_prepared,
    open_turn_after,
    prepared_cut,
    prompt,
    summary_budget,
)
from sidecar.engine.summary_write import SummaryStep
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.config import Config
from sidecar.model.conversation import writer_name
from sidecar.model.ids import new_id
from sidecar.model.messages import AssistantMessage, MessageTime, WithParts
from sidecar.model.parts import Part, TextPart, ToolCompleted, ToolPart
from sidecar.model.rpc import CompactedEvent, CompactionRecord, CompactResult, OpenTurn
from sidecar.store import Key
from sidecar.summarizers.base import Summarizer, SummaryError

_encoder = msgspec.json.Encoder()
log = logging.getLogger("sidecar.engine")


__all__ = ["RECALL_HINT", "Compactor", "Outcome", "Prepared", "Refused", "Request", "fingerprint"]


class Compactor(SummaryStep):
    """Runs a compaction (``run``), or prepares its summary ahead (``prepare``) and commits
    that later (``commit_prepared``)."""

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
            **diagnostics(record),
        )
        mark_prepared(event, req, cfg, prepared=False)
        marker_key = Key(marker.info.time.created, marker.info.id)
        return self._finish(plan, token, event, parts, after, marker_key, end, record)

    def _finish(
        self,
        plan: Plan,
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

    async def _kept(self, req: Request, cfg: Config, plan: Plan) -> str:
        """The ``## Kept verbatim`` block (``compaction.keep``), bounded by ``maxTokens`` and
        by the ledger's share of the summary budget: empty unless something is kept."""
        keep = cfg.compaction.keep
        if not (keep.first_request or keep.todo_tools or keep.pinned) or keep.max_tokens <= 0:
            return ""
        share = int(summary_budget(plan.window, cfg) * bounded.LEDGER_SHARE)
        budget = min(keep.max_tokens, share)
        return await steer.kept_block(self.store, plan.sid, keep, budget, req.cutoff)

    async def _diagnose(
        self,
        req: Request,
        plan: Plan,
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
            await self.store.record_compaction(
                plan.sid, done.id, done.time.created, _encoder.encode(record)
            )
        except Exception:  # the compaction itself is committed: it stands, unrecorded
            log.exception("could not record the diagnostics of compaction %s", done.id)
        return record

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
        cut = prepared_cut(plan)
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
        how = open_turn_after(plan, prepared.cut)
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
        event = CompactedEvent(session_id=plan.sid, message_id=done.id, **diagnostics(record))
        mark_prepared(event, req, cfg, prepared=True)
        marker_key = Key(marker.time.created, marker.id)
        return self._finish(plan, token, event, text, after, marker_key, end, record, prepared=True)

    async def _plan(self, req: Request, cfg: Config) -> Plan:
        """What to summarize, what to keep verbatim (collapse), and how it is sent."""
        return await make_plan(self.store, self.host, req, cfg)

    async def _append_marker(self, req: Request, plan: Plan) -> WithParts:
        appended = plan.marker(req.auto, bool(req.overflow), plan.tail)
        await self._put([appended.info], appended.parts)
        if plan.standard:
            # The new marker is sent too, as user "What did we do so far?" before the prompt.
            plan.history.append(appended)
        return appended

    def _begin(self, req: Request, plan: Plan, marker: WithParts) -> str | int:
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
        return await prompt(self.host, req, cfg)

    async def _append_continue(self, plan: Plan) -> Key:
        """The synthetic user message an automatic compaction ends with."""
        cont = plan.continue_message()
        await self._put([cont.info], cont.parts)
        return Key(cont.info.time.created, cont.info.id)
