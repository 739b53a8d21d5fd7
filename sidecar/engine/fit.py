"""Windows that fit (PROTOCOL.md ``fit``): the session's model limits, and the last resort of
truncating single oversized tool outputs in the rendering only.

Reported usage arrives after a step, and many OpenAI-compatible local servers report none, so
the overflow check can come too late; ``session/context`` measures the window it is about to
serve against the usable input instead. Stored data is never changed here.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from sidecar.engine.tokens import estimate_messages
from sidecar.model.catalog import lookup
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.model.tokens import ModelLimit, estimate

TRUNCATED = "\n[Tool output truncated to fit the context window: omitted {n} chars]"
OVERSIZED_SHARE = 4  # an output alone above usable/4 is oversized
MIN_KEEP = 200  # characters of a truncated output always kept, so the model sees what it was


def limit_for_window(
    window: Sequence[WithParts], models: dict[str, ModelLimit] | None
) -> ModelLimit | None:
    """Limits of the model the next call goes to: the latest user message's ``model``, or the
    latest (non-summary) assistant's provider/model; None when neither is known."""
    for m in reversed(window):
        info = m.info
        if isinstance(info, UserMessage) and info.model is not None:
            return lookup(info.model.provider_id, info.model.model_id, models)
        if isinstance(info, AssistantMessage) and not info.summary and info.model_id:
            return lookup(info.provider_id, info.model_id, models)
    return None


def truncate_to_fit(window: Sequence[WithParts], usable: int) -> tuple[list[WithParts], list[str]]:
    """A copy of ``window`` whose oversized tool outputs (each alone more than a quarter of
    ``usable``) are cut, largest first and with a visible marker, until the estimate fits or
    none is left; returns it and the cut part ids.

    One huge read or log is the usual cause; ordinary outputs are left verbatim, so a window
    that is simply long is reported (``overflow``) rather than silently mangled."""
    total = estimate_messages(window)
    # The parts lists first, the messages made from them once they are final: a ``WithParts``
    # is never changed once made (the renderers' memos know one by its identity).
    lists = [list(m.parts) for m in window]
    cut: list[str] = []
    candidates: list[tuple[int, int, int]] = []  # (-tokens, message index, part index)
    for mi, msg_parts in enumerate(lists):
        for pi, p in enumerate(msg_parts):
            if isinstance(p, ToolPart) and isinstance(p.state, ToolCompleted):
                size = estimate(p.state.output)
                if not p.state.time.compacted and size > usable // OVERSIZED_SHARE:
                    candidates.append((-size, mi, pi))
    candidates.sort()
    for neg, mi, pi in candidates:
        if total <= usable:
            break
        part = lists[mi][pi]
        assert isinstance(part, ToolPart) and isinstance(part.state, ToolCompleted)
        output = part.state.output
        excess_chars = (total - usable) * 4 + len(TRUNCATED) + 16
        keep = max(MIN_KEEP, len(output) - excess_chars)
        if keep >= len(output):
            continue
        text = output[:keep] + TRUNCATED.format(n=len(output) - keep)
        state = msgspec.structs.replace(part.state, output=text)
        lists[mi][pi] = msgspec.structs.replace(part, state=state)
        total += estimate(text) + neg
        cut.append(part.id)
    return [WithParts(info=m.info, parts=ps) for m, ps in zip(window, lists, strict=True)], cut
