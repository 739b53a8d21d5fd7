"""``session/context``: the window rendered for a model, with its estimated size."""

from __future__ import annotations

from sidecar.engine import render
from sidecar.engine.filter import find_boundary
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
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
    at = find_boundary(window)
    return ContextResult(
        format=fmt,
        messages=messages,
        estimated_tokens=estimate_messages(window),
        boundary_message_id=window[at].info.id if at is not None else None,
    )
