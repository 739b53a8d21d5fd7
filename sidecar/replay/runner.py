"""Replay a transcript through a real daemon, as a frontend would drive it.

Each user message is written as-is. Before each assistant message the runner asks for the
context window, as a frontend does before calling its model; the window's estimated size
becomes that message's ``tokens.input`` (the prompt it would have been sent), so overflow is
judged on the daemon's own window, against a deliberately small model window. After each
finished assistant message the runner waits (``session/idle``) for the automatic work the
daemon started, and reports prunes and compactions.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar_client import (
    AssistantMessage,
    Client,
    ModelRef,
    Tokens,
    UserMessage,
    spawn,
)

from sidecar.engine.tokens import estimate
from sidecar.model.ids import now_ms
from sidecar.model.transcript import TMessage, TPart, Transcript

Echo = Callable[[str], None]


@dataclass
class Compaction:
    """As ``inspect`` shows it: ``turn`` model calls came before it; ``before``/``after`` are
    the estimated tokens of the window sent just before it and right after its summary."""

    turn: int
    before: int
    after: int
    auto: bool = True
    writer: str = ""


@dataclass
class Report:
    session: str
    messages: int
    compactions: list[Compaction] = field(default_factory=list)
    prunes: int = 0
    pruned_tokens: int = 0
    errors: list[str] = field(default_factory=list)
    final_tokens: int = 0
    summary: str = ""
    window: int = 0
    session_id: str = ""


def _committed(events: list[Any]) -> list[Any]:
    """The ``session/compacted`` events of compactions that were committed: a refused or lost
    one (nothing stored) has ``rejected`` and summarized nothing."""
    return [e for e in events if not (e.get("rejected") and e.get("messagesSummarized") == 0)]


def _tool_state(p: TPart, now: int) -> dict[str, Any]:
    if p.status == "error":
        return {
            "status": "error",
            "input": p.input,
            "error": p.output or "Tool execution aborted",
            "time": {"start": now, "end": now},
        }
    return p.completed_state(now)


def _part(p: TPart, sid: str, mid: str, now: int) -> dict[str, Any]:
    base = {"sessionID": sid, "messageID": mid}
    if p.type == "tool":
        return {
            **base,
            "type": "tool",
            "callID": p.callID,
            "tool": p.tool,
            "state": _tool_state(p, now),
        }
    return {**base, "type": p.type, "text": p.text}


def _output_tokens(m: TMessage) -> int:
    return sum(
        estimate(p.text) + estimate(str(p.input) if p.type == "tool" else "") for p in m.parts
    )


class _Bar:
    """Replay progress on stderr (tqdm, as for imports), only when stderr is a terminal."""

    def __init__(self, total: int) -> None:
        self._bar: Any = None
        if sys.stderr.isatty():
            from tqdm import tqdm  # type: ignore[import-untyped]

            self._bar = tqdm(total=max(1, total), unit="msg", file=sys.stderr, leave=False)

    def show(self, done: int, note: str) -> None:
        if self._bar is None:
            return
        self._bar.n = done
        self._bar.set_postfix_str(note, refresh=False)
        self._bar.refresh()

    def clear(self) -> None:
        if self._bar is not None:
            self._bar.close()


async def replay(
    transcript: Transcript,
    *,
    context: int,
    method: str = "standard",
    summarizer: dict[str, Any] | None = None,
    db: Path | None = None,
    echo: Echo = print,
    verbose: bool = True,
    env: dict[str, str | None] | None = None,
) -> Report:
    model = transcript.model
    output_limit = max(1_024, context // 8)
    options: dict[str, Any] = {
        "models": {f"replay/{model}": {"context": context, "output": output_limit}},
        "compaction": {"method": method},
    }
    if summarizer:
        options["summarizer"] = summarizer
    with tempfile.TemporaryDirectory(prefix="sidecar-replay-") as tmp:
        path = db or Path(tmp) / "replay.db"
        client = await spawn(path, initialization_options=options, env=env)
        try:
            report = await _drive(client, transcript, model, context, echo, verbose)
        finally:
            await client.close()
        report.compactions = await _as_inspected(path, report.session_id, context)
        return report


async def _as_inspected(db: Path, session_id: str, context: int) -> list[Compaction]:
    """The compactions as ``inspect``/``report`` compute them from the stored session, so
    ``demo`` and ``inspect`` print the same figures for the same compactions."""
    from sidecar.engine.window import load_history
    from sidecar.tools.inspect import inspect
    from sidecar.tools.readdb import open_store

    store = await open_store(db)
    try:
        session = await store.require_session(session_id)
        history = await load_history(store, session)
    finally:
        await store.close()
    ins = inspect(session, history, context=context)
    return [Compaction(c.turn, c.before, c.after, c.auto, c.writer) for c in ins.compactions]


async def _drive(
    client: Client, t: Transcript, model: str, context: int, echo: Echo, verbose: bool
) -> Report:
    session = await client.create_session(title=t.session)
    sid = session.id
    ref = ModelRef(provider_id="replay", model_id=model)
    report = Report(session=t.session, messages=len(t.messages), window=context, session_id=sid)
    bar = _Bar(len(t.messages))
    seen = {"session/compacted": 0, "session/pruned": 0, "session/status": 0}
    last_user = ""
    for turn, m in enumerate(t.messages, start=1):
        bar.show(turn, f"{len(report.compactions)} compactions")
        if m.role == "user":
            user = await client.update_message(UserMessage(session_id=sid, model=ref))
            last_user = user.id
            for p in m.parts:
                await client.update_part(_part(p, sid, last_user, now_ms()))
            continue
        # The window a frontend sends (``fit``, the default): when the stored one is over the
        # model's usable input the daemon compacts before answering.
        ctx = await client.context(sid)
        prompt = ctx.estimated_tokens
        fitted = _committed(client.notifications("session/compacted")[seen["session/compacted"] :])
        seen["session/compacted"] = len(client.notifications("session/compacted"))
        fit_notes: list[str] = []
        for c in fitted:
            fit_notes.append(_compacted(report, turn, c, "to fit"))
        reply = await client.update_message(
            AssistantMessage(
                session_id=sid,
                parent_id=last_user,
                provider_id="replay",
                model_id=model,
                mode="build",
                agent="build",
            )
        )
        for p in m.parts:
            await client.update_part(_part(p, sid, reply.id, now_ms()))
        nxt = t.messages[turn] if turn < len(t.messages) else None
        has_tools = any(p.type == "tool" for p in m.parts)
        finish = (
            "tool-calls" if has_tools and nxt is not None and nxt.role == "assistant" else "stop"
        )
        out = _output_tokens(m)
        reply.finish = finish
        reply.tokens = Tokens(input=prompt, output=out)
        reply.time.completed = reply.time.created + 1
        await client.update_message(reply)
        await client.idle(sid)
        notes: list[str] = fit_notes
        pruned = client.notifications("session/pruned")[seen["session/pruned"] :]
        seen["session/pruned"] += len(pruned)
        for p in pruned:
            report.prunes += 1
            report.pruned_tokens += p["tokensSaved"]
            notes.append(f"pruned {len(p['partIDs'])} outputs (-{p['tokensSaved']:,} tok)")
        compacted = _committed(
            client.notifications("session/compacted")[seen["session/compacted"] :]
        )
        seen["session/compacted"] = len(client.notifications("session/compacted"))
        for c in compacted:
            notes.append(_compacted(report, turn, c))
        statuses = client.notifications("session/status")[seen["session/status"] :]
        seen["session/status"] += len(statuses)
        for s in statuses:
            if s.get("status") == "error":
                report.errors.append(str(s.get("error")))
                notes.append(f"ERROR: {s.get('error')}")
        if verbose and (notes or turn % 10 == 0 or turn == len(t.messages)):
            bar.clear()
            echo(f"message {turn:4d}  context {prompt:7,} tok  {'; '.join(notes)}".rstrip())
    bar.clear()
    final = await client.context(sid)
    report.final_tokens = final.estimated_tokens
    page = await client.messages(sid)
    summaries = [
        m for m in page.messages if _raw(m.info).get("summary") and _raw(m.info).get("finish")
    ]
    if summaries:
        report.summary = "\n".join(
            _raw(p).get("text", "") for p in summaries[-1].parts if _raw(p).get("type") == "text"
        )
    return report


def _compacted(report: Report, turn: int, event: dict[str, Any], how: str = "") -> str:
    """Note a ``session/compacted`` event; its line shows the event's own before/after pair
    (the one ``inspect``, ``report`` and ``session/compactions`` show)."""
    before, after = event["tokensBefore"], event["tokensAfter"]
    report.compactions.append(Compaction(turn, before, after, event["auto"]))
    label = f"COMPACTED #{len(report.compactions)}" + (f" {how}" if how else "")
    return f"{label}: {before:,} -> {after:,} tok, by {event.get('writer', '?')}"


def _raw(value: Any) -> dict[str, Any]:
    """A message or part as its wire JSON, whether the client handed back raw JSON, a dict or
    (since the client returns typed Structs) a Struct."""
    import msgspec

    if isinstance(value, msgspec.Raw):
        return msgspec.json.decode(value)  # type: ignore[no-any-return]
    if isinstance(value, msgspec.Struct):
        built = msgspec.to_builtins(value)
        return built if isinstance(built, dict) else {}
    return value if isinstance(value, dict) else {}
