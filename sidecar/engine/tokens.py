"""Token estimates: OpenCode's 4-characters-per-token heuristic, reproduced bit for bit.

Prune decisions hinge on exact thresholds (``> 40,000``, ``> 20,000``), so the estimate must
round the way OpenCode's ``Math.round(len / 4)`` does (half-up, not Python's half-to-even) and
count length the way JavaScript does (UTF-16 code units), or the two would prune different parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from sidecar.engine.memo import LiveMemo
from sidecar.engine.render import (
    SUBTASK_TEXT,
    attached_text,
    is_media,
    is_skipped_file,
)
from sidecar.model.conversation import CLEARED, COMPACTION_TEXT, INTERRUPTED
from sidecar.model.messages import WithParts
from sidecar.model.parts import (
    CompactionPart,
    FilePart,
    Part,
    ReasoningPart,
    SubtaskPart,
    TextPart,
    ToolCompleted,
    ToolError,
    ToolPart,
)
from sidecar.model.tokens import estimate as estimate  # re-exported: the engine's one estimate

FILE_TOKENS = 1_000
"""Flat cost of an image or PDF. Their URL is often a base64 ``data:`` URL whose length says
nothing about what the provider charges; ~1,000 tokens is the order of one ~1 MP image."""

MESSAGE_OVERHEAD = 4
"""Per-message framing (role, separators) that chat formats add around the content; OpenAI's
own accounting uses 3-4 tokens a message. It keeps an estimate of many short messages honest."""

_encoder = msgspec.json.Encoder()


def estimate_value(obj: Any) -> int:
    """Estimate of a JSON-ish value as it travels: its compact JSON encoding."""
    return estimate(_encoder.encode(obj).decode())


def estimate_part(part: Part) -> int:
    """What ``part`` costs when rendered for the model (see ``render``); 0 if it is not sent."""
    if isinstance(part, TextPart):
        return 0 if part.ignored else estimate(part.text)
    if isinstance(part, ReasoningPart):
        return estimate(part.text)
    if isinstance(part, ToolPart):
        return _estimate_tool(part)
    if isinstance(part, FilePart):
        if is_skipped_file(part.mime):
            return 0
        return FILE_TOKENS if is_media(part.mime) else estimate(attached_text(part))
    if isinstance(part, CompactionPart):
        return estimate(COMPACTION_TEXT)
    if isinstance(part, SubtaskPart):
        return estimate(SUBTASK_TEXT)
    return 0


def _estimate_tool(part: ToolPart) -> int:
    state = part.state
    cost = estimate_value(state.input)
    if isinstance(state, ToolCompleted):
        if state.time.compacted:
            return cost + estimate(CLEARED)
        attachments = sum(estimate_part(a) for a in state.attachments or ())
        return cost + estimate(state.output) + attachments
    if isinstance(state, ToolError):
        return cost + estimate(state.error)
    return cost + estimate(INTERRUPTED)


_MEMO_LIMIT = 100_000
_memo: LiveMemo[int] = LiveMemo(_MEMO_LIMIT)
# A message's parts summed, by its ``WithParts`` (the window cache hands back the same one
# until the message or one of its parts is written; no one changes one once made).
_message_memo: LiveMemo[int] = LiveMemo(_MEMO_LIMIT)


def _cached_estimate(part: Part) -> int:
    """``estimate_part`` remembered per part object, while it lives: the store hands back the
    same (immutable by convention) objects for unchanged parts, so a window estimated every
    turn is cheap."""
    key = id(part)
    cost = _memo.get(key)
    if cost is None:
        cost = estimate_part(part)
        _memo.put(key, (part,), cost)
    return cost


def estimate_messages(msgs: Sequence[WithParts]) -> int:
    """Estimated size of a window: every part plus ``MESSAGE_OVERHEAD`` per message.

    Deliberately a little generous (messages the renderer skips still count), since it is used
    to decide whether a window fits.
    """
    total = MESSAGE_OVERHEAD * len(msgs)
    known = _message_memo.get  # (without a call per message: every read sums the window)
    for m in msgs:
        cost = known(id(m))
        if cost is None:
            cost = sum(_cached_estimate(p) for p in m.parts)
            _message_memo.put(id(m), (m,), cost)
        total += cost
    return total
