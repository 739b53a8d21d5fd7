"""Writing a compaction's summary: the summary message opened, the writer run (its
progress reported, a failure retried with the fallback writer), its result verified,
and a failure, refusal or lost race undone, so the context stays as it was."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import msgspec

from sidecar.engine import bounded, ledger, verify
from sidecar.engine.filter import filter_compacted
from sidecar.engine.host import Host
from sidecar.engine.planning import (
    RECALL_HINT,
    Outcome,
    Plan,
    Refused,
    Request,
    check_smaller,
    fallback_writer,
    mark_prepared,
    previous_summaries,
    stored,
    summary_budget,
)
from sidecar.engine.ports import StorePort
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.model.config import Config
from sidecar.model.conversation import (
    writer_name,
)
from sidecar.model.ids import new_id
from sidecar.model.messages import (
    AssistantMessage,
    MessageError,
    MessageTime,
    WithParts,
)
from sidecar.model.parts import (
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
    SessionStatus,
    StatusEvent,
)
from sidecar.summarizers.base import (
    COMPACTION_SYSTEM,
    Summarizer,
    SummaryError,
    SummaryResult,
)
from sidecar.summarizers.extractive import ExtractiveSummarizer

log = logging.getLogger("sidecar.engine")


class SummaryStep:
    """The summary-writing steps a ``Compactor`` runs."""

    def __init__(self, store: StorePort, host: Host) -> None:
        self.store = store
        self.host = host

    async def _put(self, messages: list[Any], parts: list[Part]) -> None:
        encoded_m = [(m, stored(m)) for m in messages]
        encoded_p = [(p, stored(p)) for p in parts]
        await self.store.put_many(encoded_m, encoded_p)
        for m, raw in encoded_m:
            self.host.publish(m.session_id, MessageUpdatedEvent(message=msgspec.Raw(raw)))
        for p, raw in encoded_p:
            self.host.publish(p.session_id, PartUpdatedEvent(part=msgspec.Raw(raw)))

    def _status(self, sid: str, status: SessionStatus, error: str | None = None) -> None:
        self.host.publish(sid, StatusEvent(session_id=sid, status=status, error=error))

    async def _open_summary(
        self, plan: Plan, marker: WithParts, writer: Summarizer
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
        plan: Plan,
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

        budget = summary_budget(plan.window, cfg)
        prior = ledger.latest(plan.previous or await previous_summaries(self.store, sid, 1))

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
            writer = fallback_writer()
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
            check_smaller(req, plan.before, after, [text_part])
        except Refused as exc:
            exc.writer = writer_name(done.provider_id, done.model_id)
            raise
        return done, [step_start, text_part, step_finish], after

    async def _verified(
        self,
        plan: Plan,
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
        self, plan: Plan, summary: AssistantMessage | None, token: str | int, exc: Exception
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
        self, plan: Plan, done: AssistantMessage, parts: Sequence[Part]
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
        plan: Plan,
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
        mark_prepared(event, req, cfg, prepared=False)
        self.host.publish(plan.sid, event)
        self._status(plan.sid, "error", message)
        return Outcome(
            CompactResult(status="stop", summary_message_id=None, error=message),
            plan.before,
            plan.before,
        )

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
