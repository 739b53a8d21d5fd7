"""The session's open turn (PROTOCOL.md, "Engine rules"): what a compaction made mid-turn keeps.

A read (``fit``) may compact while the model is between steps of a turn: its last step asked
for tools and the frontend is about to send their results. Summarizing that turn away would
send the model marker + summary + continue, without the results it asked for. So such a
compaction keeps the turn (its user message, every step, tool call and result) verbatim after
the summary, through the marker's ``tailStartID``, as collapse keeps its tail; when the turn
alone does not fit, only its newest messages that do (none, when the newest alone does not).

Pure rules over a chronological window (``filter_compacted``'s order).
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.engine.tokens import estimate_messages
from sidecar.model.conversation import is_marker, is_summary
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import TextPart
from sidecar.model.rpc import OpenTurn

OPEN_FINISH = (None, "tool-calls", "unknown")  # a step after which the model goes on


def _synthetic(m: WithParts) -> bool:
    """A user message the daemon or the frontend wrote for the model (``Continue if you have
    next steps``): every text part synthetic."""
    texts = [p for p in m.parts if isinstance(p, TextPart)]
    return bool(texts) and all(p.synthetic for p in texts)


def _interrupts(window: Sequence[WithParts], i: int) -> bool:
    """The message at ``i`` came while a turn was still open: the newest message before it
    (markers and summaries aside) is an unanswered user message or a step that goes on."""
    for m in reversed(window[:i]):
        if is_marker(m) or is_summary(m):
            continue
        if isinstance(m.info, AssistantMessage):
            return m.info.finish in OPEN_FINISH
        return True
    return False


def start(window: Sequence[WithParts]) -> int | None:
    """The index of the open turn's first message, or None when the latest turn has ended.

    The turn begins at the newest user message that is not a compaction marker; a synthetic
    one (a compaction's continue message) that came inside an open turn does not begin a new
    turn. It is open while no step answered it yet, or its newest step has no ``finish``, or
    ended in tool calls."""
    at: int | None = None
    for i in range(len(window) - 1, -1, -1):
        m = window[i]
        if not isinstance(m.info, UserMessage) or is_marker(m):
            continue
        at = i
        if not (_synthetic(m) and _interrupts(window, i)):
            break
    if at is None:
        return None
    last = next(
        (
            m.info
            for m in reversed(window[at:])
            if isinstance(m.info, AssistantMessage) and not m.info.summary
        ),
        None,
    )
    if last is not None and last.finish not in OPEN_FINISH:
        return None
    return at


def kept_from(window: Sequence[WithParts], at: int, budget: int | None) -> tuple[int, OpenTurn]:
    """Where the kept tail begins for an open turn starting at ``at``: ``at`` itself when the
    turn fits ``budget`` tokens (None: no budget known), else the oldest message from which the
    rest still fits; ``len(window)`` (nothing kept) when even the newest message alone does not
    (keeping it would leave the compaction nothing to gain)."""
    if budget is None or estimate_messages(window[at:]) <= budget:
        return at, "kept"
    k, total = len(window), 0
    for i in range(len(window) - 1, at, -1):
        total += estimate_messages([window[i]])
        if total > budget:
            break
        k = i
    return k, "cut"
