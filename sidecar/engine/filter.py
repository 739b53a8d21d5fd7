"""``filterCompacted``: the part of the history the model still sees after compaction.

A compaction marker (a user message with a ``compaction`` part) cuts history only once its
summary reply has finished without error, so a pending or failed compaction never loses
anything. Collapse compaction appends its marker and summary at the end and points back, with
``tailStartID``, at the oldest message it kept verbatim; the window then reads
``marker, summary, tail..., newer...`` (OpenCode's filterCompacted as of May 2026). OpenCode
>= 1.14 writes the same kind of tail on its own markers as ``tail_start_id``, read alike.
"""

from __future__ import annotations

from collections.abc import Sequence

from sidecar.model.conversation import (
    answers,
    compaction_part,
    is_finished_summary,
    is_summary,
)
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts


def _cut(chronological: Sequence[WithParts]) -> tuple[int, int] | None:
    """(marker index, index of its earliest finished summary) of the newest effective marker."""
    summaries: dict[str, int] = {}  # marker id -> earliest finished summary index seen so far
    for i in range(len(chronological) - 1, -1, -1):
        msg = chronological[i]
        info = msg.info
        if isinstance(info, UserMessage) and info.id in summaries and compaction_part(msg):
            return i, summaries[info.id]
        if isinstance(info, AssistantMessage) and is_finished_summary(msg.info):
            summaries[info.parent_id] = i
    return None


def find_boundary(chronological: Sequence[WithParts]) -> int | None:
    """Index of the marker that cuts the history, or None when nothing is cut."""
    cut = _cut(chronological)
    return None if cut is None else cut[0]


def filter_compacted(chronological: Sequence[WithParts]) -> list[WithParts]:
    """The context window, in the order the model must read it.

    Standard: everything from the newest effective marker on (the marker included). Collapse
    (marker has a ``tail`` found before it): ``[marker..summary] ++ [tail..marker)
    ++ (summary..end]``, so the summary of the old part precedes the verbatim tail.
    """
    cut = _cut(chronological)
    if cut is None:
        return _drop_unanswered(chronological)
    marker_at, summary_at = cut
    marker = chronological[marker_at]
    compaction = compaction_part(marker)
    tail_id = compaction.tail if compaction else None
    tail_at = (
        next((i for i in range(marker_at) if chronological[i].info.id == tail_id), None)
        if tail_id
        else None
    )
    if tail_at is None:
        return [chronological[marker_at], *_drop_unanswered(chronological[marker_at + 1 :])]
    head = list(chronological[marker_at : summary_at + 1])
    pair = {m.info.id for m in head}
    # A collapse merged the older markers and summaries stored inside the retained range into
    # this summary (they precede the tail in the window it split), so they stay out; OpenCode
    # (its own ``tail_start_id``) keeps everything from the tail start to the marker.
    opencode = compaction is not None and compaction.tail_start_id is None
    tail = [
        m
        for m in chronological[tail_at:marker_at]
        if m.info.id not in pair
        and not answers(m, marker.info.id)
        and (opencode or (compaction_part(m) is None and not is_summary(m)))
    ]
    return head + tail + _drop_unanswered(chronological[summary_at + 1 :])


def _drop_unanswered(msgs: Sequence[WithParts]) -> list[WithParts]:
    """Without the markers of compactions that have not (or never) finished, and their failed
    summaries: a pending or failed compaction must not change what the model sees."""
    finished = {
        m.info.parent_id
        for m in msgs
        if isinstance(m.info, AssistantMessage) and is_finished_summary(m.info)
    }
    return [
        m
        for m in msgs
        if not (compaction_part(m) is not None and m.info.id not in finished)
        and not (is_summary(m) and not is_finished_summary(m.info))
    ]
