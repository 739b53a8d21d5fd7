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
from sidecar.model.messages import AssistantMessage, WithParts


def _cut(chronological: Sequence[WithParts]) -> tuple[int, int] | None:
    """(marker index, index of its earliest finished summary) of the newest effective marker."""
    summaries: dict[str, int] = {}  # marker id -> earliest finished summary index seen so far
    # (``is_finished_summary`` asked only of a summary, ``compaction_part`` only of a user
    # message a summary answers: every read of a window walks it, and most messages are
    # neither.)
    for i in range(len(chronological) - 1, -1, -1):
        msg = chronological[i]
        info = msg.info
        if isinstance(info, AssistantMessage):
            if info.summary and is_finished_summary(info):
                summaries[info.parent_id] = i
        elif info.id in summaries and compaction_part(msg):
            return i, summaries[info.id]
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
    finished: set[str] = set()
    markers: list[int] = []
    summaries: list[int] = []  # (unfinished ones are dropped, finished ones' markers kept)
    for i, m in enumerate(msgs):
        info = m.info
        if isinstance(info, AssistantMessage):
            if info.summary:
                if is_finished_summary(info):
                    finished.add(info.parent_id)
                else:
                    summaries.append(i)
        elif compaction_part(m) is not None:
            markers.append(i)
    drop = {i for i in markers if msgs[i].info.id not in finished}
    drop.update(summaries)
    if not drop:
        return list(msgs)
    return [m for i, m in enumerate(msgs) if i not in drop]
