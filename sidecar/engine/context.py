"""``session/context``: the window rendered for a model, with its estimated size."""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.engine import render
from sidecar.engine.fit import truncate_to_fit
from sidecar.engine.ports import StorePort
from sidecar.engine.tokens import estimate_messages
from sidecar.engine.window import load_window
from sidecar.model.messages import WithParts
from sidecar.model.parts import CompactionPart
from sidecar.model.rpc import ContextFormat, ContextResult
from sidecar.model.session import Session


async def build(
    store: StorePort, session: Session, fmt: ContextFormat, stub: render.Stub = "opencode"
) -> ContextResult:
    return (await build_with_window(store, session, fmt, stub))[0]


async def build_with_window(
    store: StorePort, session: Session, fmt: ContextFormat, stub: render.Stub = "opencode"
) -> tuple[ContextResult, list[WithParts], dict[str, str] | None]:
    """The rendered window, the window itself (``fit`` measures and may cut it) and, for the
    ``parts`` format, the stored JSON of its messages and parts by id."""
    raws: dict[str, str] | None = {} if fmt == "parts" else None
    window = await load_window(store, session, raws)
    return render_result(window, fmt, raws, stub), window, raws


def render_result(
    window: Sequence[WithParts],
    fmt: ContextFormat,
    raws: dict[str, str] | None = None,
    stub: render.Stub = "opencode",
) -> ContextResult:
    """``stub``: how pruned outputs are sent (``compaction.prunedStub``)."""
    if fmt == "openai":
        messages = render.to_openai(window, stub=stub)
    elif fmt == "anthropic":
        messages = render.to_anthropic(window, stub=stub)
    else:
        messages = render.to_parts(window, raws, stub)
    # filter_compacted shows no unanswered marker, so a marker heading the window is the cut.
    head = window[0] if window else None
    cut = head is not None and any(isinstance(p, CompactionPart) for p in head.parts)
    return ContextResult(
        format=fmt,
        messages=messages,
        estimated_tokens=estimate_messages(window) + render.stub_extra(window, stub),
        boundary_message_id=head.info.id if cut and head is not None else None,
    )


def build_fitted(
    fmt: ContextFormat,
    window: list[WithParts],
    raws: dict[str, str] | None,
    usable: int,
    stub: render.Stub = "opencode",
    overhead: int = 0,
) -> ContextResult:
    """The last resort: oversized tool outputs cut in the rendering (stored data untouched);
    ``overflow`` when even that does not fit. ``raws``: the window's stored JSON (``parts``
    format), as ``build_with_window`` read it. ``overhead``: the frontend's, which the window
    must leave room for."""
    fitted, cut = truncate_to_fit(window, usable - overhead)
    if raws is not None:
        # Unchanged objects keep their stored JSON; the cut parts are re-encoded.
        raws = dict(raws)
        for pid in cut:
            raws.pop(pid, None)
    result = render_result(fitted, fmt, raws, stub)
    result.truncated_part_ids = cut
    result.overflow = result.estimated_tokens + overhead > usable
    result.usable = usable
    return result
