"""Summaries that never fail for being too large (OpenCode #15849, #17340, #11450).

What a writer is sent is bounded by its input limit. Media is stripped to ``[Attached mime:
name]`` and any single tool output too large for a chunk is cut with a marker; if the history
still does not fit, it is summarized in chunks, oldest first, each chunk's summary carried into
the next as a previous summary. The last chunk also sees the reference slice (collapse).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from sidecar.engine import ledger as ledger_mod
from sidecar.engine import render, steer
from sidecar.engine.tokens import estimate, estimate_messages
from sidecar.model.messages import WithParts
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.model.tokens import CacheTokens, Tokens
from sidecar.summarizers.base import (
    STRUCTURED_SUMMARY,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)

# The artifact ledger may take this share of the summary budget: it is what a later turn cannot
# recover from prose (exact paths, commands, errors), so it wins over the writer's text.
LEDGER_SHARE = 0.75
MIN_WRITER_TOKENS = 16
TRUNCATED = "\n[Tool output truncated for compaction: omitted {n} chars]"

Progress = Callable[[str, int | None], None]


def _render(
    fmt: str, msgs: Sequence[WithParts], stub: render.Stub = "opencode"
) -> list[dict[str, Any]]:
    if fmt == "openai":
        return render.to_openai(msgs, strip_media=True, stub=stub)
    if fmt == "anthropic":
        return render.to_anthropic(msgs, strip_media=True, stub=stub)
    return []


def _truncate_outputs(msgs: Sequence[WithParts], max_tokens: int) -> list[WithParts]:
    """Cut any single tool output larger than ``max_tokens`` (its head is kept)."""
    limit_chars = max(256, max_tokens * 4)
    out: list[WithParts] = []
    for m in msgs:
        parts = []
        changed = False
        for p in m.parts:
            if (
                isinstance(p, ToolPart)
                and isinstance(p.state, ToolCompleted)
                and p.state.time.compacted is None
                and len(p.state.output) > limit_chars
            ):
                cut = len(p.state.output) - limit_chars
                state = msgspec.structs.replace(
                    p.state, output=p.state.output[:limit_chars] + TRUNCATED.format(n=cut)
                )
                p = msgspec.structs.replace(p, state=state)
                changed = True
            parts.append(p)
        out.append(WithParts(info=m.info, parts=parts) if changed else m)
    return out


def chunk(msgs: Sequence[WithParts], budget: int) -> list[list[WithParts]]:
    """Greedy oldest-first chunks whose estimates stay within ``budget`` (each holds >= 1)."""
    chunks: list[list[WithParts]] = []
    current: list[WithParts] = []
    used = 0
    for m in msgs:
        cost = estimate_messages([m])
        if current and used + cost > budget:
            chunks.append(current)
            current, used = [], 0
        current.append(m)
        used += cost
    if current:
        chunks.append(current)
    return chunks


STREAM_REPORT_CHARS = 1_000  # a progress report per this many summary characters streamed


def _streaming(progress: Progress | None, index: int, count: int) -> Callable[[int], None] | None:
    """Turn a writer's "characters so far" callback into throttled progress reports."""
    if progress is None:
        return None
    last = 0

    def report(chars: int) -> None:
        nonlocal last
        if chars - last >= STREAM_REPORT_CHARS:
            last = chars
            progress(f"chunk {index + 1} of {count}: {chars} characters written", None)

    return report


def _without_blocks(text: str) -> str:
    """A summary without what the daemon appends (kept block, ledger): rebuilt, not copied."""
    return steer.drop_block(ledger_mod.drop_block(text))


def _add(a: Tokens, b: Tokens) -> Tokens:
    return Tokens(
        input=a.input + b.input,
        output=a.output + b.output,
        reasoning=a.reasoning + b.reasoning,
        cache=CacheTokens(read=a.cache.read + b.cache.read, write=a.cache.write + b.cache.write),
    )


async def summarize(
    writer: Summarizer,
    *,
    system: str,
    prompt: str,
    history: Sequence[WithParts],
    reference: Sequence[WithParts],
    previous: Sequence[str],
    max_tokens: int,
    max_input_tokens: int | None,
    progress: Progress | None = None,
    prior: ledger_mod.Ledger | None = None,
    stub: render.Stub = "opencode",
    kept: str = "",
    structured: bool = True,
    task_budget: int = ledger_mod.TASK_BUDGET,
) -> SummaryResult:
    """The summary of ``history``, ending with the artifact ledger: ``prior`` (default: the one
    in the newest of ``previous``) extended with ``history``, bounded, appended verbatim after
    the writer returns so that no writer can drop it. Writers see earlier summaries without
    their ledger block and get the summary budget minus the ledger's share."""
    fmt = writer.wire_format
    history = list(history)
    base = prior if prior is not None else ledger_mod.latest(previous)
    # ``kept`` (the ``## Kept verbatim`` block, already bounded) comes out of the summary
    # budget first, as the ledger's share does; nothing changes when it is empty.
    kept_tokens = ledger_mod.tokens(kept) + 1 if kept else 0
    room = max_tokens - kept_tokens
    # The task (the first and latest requests, ``task_budget`` tokens at most and never more
    # than half the summary's own budget: a small model's summary must still shrink the
    # window) comes on top: the artifact kinds keep their share.
    led = ledger_mod.update(base, history, min(task_budget, max(0, room) // 2))
    task = ledger_mod.task_tokens(led)
    led = ledger_mod.bound(led, int(room * LEDGER_SHARE) + task)
    block = ledger_mod.render(led)
    max_tokens = max(MIN_WRITER_TOKENS, room - (ledger_mod.tokens(block) - task) - 1)
    previous = [_without_blocks(p) for p in previous]
    if structured and fmt != "parts":
        system = f"{system.rstrip()}\n\n{STRUCTURED_SUMMARY}"
    if max_input_tokens is None:
        chunks = [history]
        ref = list(reference)
    else:
        fixed = estimate(system) + estimate(prompt) + sum(estimate(s) for s in previous)
        # The carried summary of the previous chunk takes the place of older ones.
        carry = max_tokens
        ref = list(reference)
        if estimate_messages(ref) + fixed + carry > max_input_tokens // 2:
            ref = []  # reference is a help, never a reason to fail
        budget = max(1_000, max_input_tokens - fixed - carry - estimate_messages(ref))
        history = _truncate_outputs(history, budget // 2)
        chunks = chunk(history, budget) if estimate_messages(history) > budget else [history]
    carried = list(previous)
    total = Tokens()
    result: SummaryResult | None = None
    for i, part in enumerate(chunks):
        last = i == len(chunks) - 1
        if progress is not None:
            progress(f"summarizing chunk {i + 1} of {len(chunks)}", (i * 100) // len(chunks))
        req = SummaryRequest(
            system=system,
            prompt=prompt,
            history=part,
            rendered=_render(fmt, part, stub),
            max_tokens=max_tokens,
            previous_summaries=carried,
            reference=ref if last else [],
            reference_rendered=_render(fmt, ref, stub) if last else [],
            ledger=block,
        )
        result = await writer.summarize(req, _streaming(progress, i, len(chunks)))
        total = _add(total, result.tokens)
        carried = [_without_blocks(result.text)]
    assert result is not None
    text = _without_blocks(result.text).rstrip()
    for tail in (kept.rstrip(), block):
        if tail:
            text = f"{text}\n\n{tail}" if text else tail
    return SummaryResult(
        text=text, tokens=total, provider_id=result.provider_id, model_id=result.model_id
    )
