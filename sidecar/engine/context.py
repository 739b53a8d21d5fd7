"""``session/context``: the window rendered for a model, with its estimated size."""

from __future__ import annotations

from sidecar.engine import render
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.parts import CompactionPart
from sidecar.model.rpc import ContextFormat, ContextResult
from sidecar.model.session import Session
from sidecar.store import Store


async def build(store: Store, session: Session, fmt: ContextFormat) -> ContextResult:
    raws: dict[str, str] = {}
    window = await load_window(store, session, raws if fmt == "parts" else None)
    if fmt == "openai":
        messages = render.to_openai(window)
    elif fmt == "anthropic":
        messages = render.to_anthropic(window)
    else:
        messages = render.to_parts(window, raws)
    # filter_compacted shows no unanswered marker, so a marker heading the window is the cut.
    head = window[0] if window else None
    cut = head is not None and any(isinstance(p, CompactionPart) for p in head.parts)
    return ContextResult(
        format=fmt,
        messages=messages,
        estimated_tokens=estimate_messages(window),
        boundary_message_id=head.info.id if cut and head is not None else None,
    )
