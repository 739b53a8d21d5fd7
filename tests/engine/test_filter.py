from typing import Any

import msgspec
import pytest

from sidecar.engine.filter import filter_compacted, find_boundary
from sidecar.model.parts import CompactionPart

from .builders import Session, compaction, ids


def test_no_compaction_keeps_everything() -> None:
    s = Session()
    s.turn("a")
    s.turn("b")
    assert ids(filter_compacted(s.messages)) == ids(s.messages)
    assert find_boundary(s.messages) is None
    assert filter_compacted([]) == []


@pytest.mark.parametrize(("eras", "boundary"), [(1, 2), (2, 6)])
def test_the_latest_finished_summary_cuts_at_its_marker(eras: int, boundary: int) -> None:
    """One compaction cuts at its marker; of two, the latest wins."""
    s = Session()
    for era in range(eras):
        s.turn(f"era {era}")
        marker, summary = s.compact()
    prompt = s.user("Continue if you have next steps")
    reply = s.assistant("more")
    out = filter_compacted(s.messages)
    assert ids(out) == [marker.info.id, summary.info.id, prompt.info.id, reply.info.id]
    assert find_boundary(s.messages) == boundary


@pytest.mark.parametrize(
    "attempt", [{"finish": None}, {"error": "APIError"}], ids=["unfinished", "errored"]
)
def test_an_unfinished_or_errored_summary_cuts_nothing(attempt: dict[str, Any]) -> None:
    s = Session()
    s.turn("old")
    s.compact(**attempt)
    # Nothing is cut, and the pending marker/summary are not shown either: a compaction in
    # progress (or failed) must not change what the model sees.
    assert ids(filter_compacted(s.messages)) == ids(s.messages[:2])
    assert find_boundary(s.messages) is None


def test_marker_without_any_reply_cuts_nothing() -> None:
    s = Session()
    s.turn("old")
    s.user(compaction())
    assert ids(filter_compacted(s.messages)) == ids(s.messages[:2])


def test_plain_reply_to_marker_is_not_a_summary() -> None:
    s = Session()
    s.turn("old")
    s.user(compaction())
    s.assistant("not a summary")
    assert find_boundary(s.messages) is None


def test_summary_for_a_different_parent_cuts_nothing() -> None:
    s = Session()
    other = s.user("question")
    s.user(compaction())
    summary = s.assistant("summary", summary=True, parent=other.info.id)
    assert ids(filter_compacted(s.messages)) == [other.info.id, summary.info.id]


def test_summary_must_come_after_its_marker() -> None:
    s = Session()
    early = s.assistant("summary", summary=True)
    marker = s.user(compaction())
    s.messages[0] = msgspec.structs.replace(
        early, info=msgspec.structs.replace(early.info, parent_id=marker.info.id)
    )
    assert find_boundary(s.messages) is None


def test_failed_newer_compaction_falls_back_to_the_older_one() -> None:
    s = Session()
    s.turn("first era")
    marker1, _ = s.compact()
    s.turn("second era")
    s.compact(error="APIError")
    out = filter_compacted(s.messages)
    assert out[0] is marker1
    assert len(out) == 4  # marker1, summary1, the second era's turn; the failed pair hidden


def test_retry_summary_after_a_failed_one() -> None:
    s = Session()
    s.turn("old")
    marker, _failed = s.compact(error="APIError")
    retry = s.assistant("summary", summary=True, parent=marker.info.id)
    assert ids(filter_compacted(s.messages)) == [marker.info.id, retry.info.id]


def test_collapse_puts_summary_before_the_retained_tail() -> None:
    s = Session()
    s.turn("summarized away")  # msg_0001, msg_0003
    tail = s.user("kept 1")
    kept1 = s.assistant("kept reply 1")
    prompt2 = s.user("kept 2")
    kept2 = s.assistant("kept reply 2")
    marker, summary = s.compact(tail=tail.info.id)
    cont = s.user("Continue if you have next steps")
    reply = s.assistant("new")
    out = filter_compacted(s.messages)
    assert ids(out) == [
        marker.info.id,
        summary.info.id,
        tail.info.id,
        kept1.info.id,
        prompt2.info.id,
        kept2.info.id,
        cont.info.id,
        reply.info.id,
    ]
    assert find_boundary(s.messages) == 6


def test_collapse_with_unknown_tail_behaves_like_standard() -> None:
    s = Session()
    s.turn("old")
    marker, summary = s.compact(tail="msg_missing")
    assert ids(filter_compacted(s.messages)) == [marker.info.id, summary.info.id]


def test_collapse_tail_after_the_marker_behaves_like_standard() -> None:
    s = Session()
    s.turn("old")
    marker = s.user(compaction(tail="later"))
    summary = s.assistant("summary", summary=True)
    later = s.user("later")
    s.messages[-1] = msgspec.structs.replace(
        later, info=msgspec.structs.replace(later.info, id="later")
    )
    assert ids(filter_compacted(s.messages)) == [marker.info.id, summary.info.id, "later"]


def test_collapse_drops_an_older_compaction_pair_stored_inside_the_tail() -> None:
    # Unlike OpenCode's tail_start_id (which keeps such a pair), an older marker/summary
    # stored inside the retained range was merged into the new summary (it heads the window
    # the collapse split), so showing it again would repeat a stale summary.
    s = Session()
    s.turn("ancient")
    tail = s.user("kept")
    s.compact()  # an older compaction, stored after the new tail start
    recent = [s.user("recent"), s.assistant("ok")]
    marker, summary = s.compact(tail=tail.info.id)
    out = filter_compacted(s.messages)
    assert ids(out) == [marker.info.id, summary.info.id, tail.info.id, *ids(recent)]


def test_collapse_tail_excludes_attempts_of_the_same_marker() -> None:
    s = Session()
    tail = s.user("kept")
    marker = s.user(compaction(tail=tail.info.id))
    # Out-of-order storage: an attempt for this marker sorted into the tail range.
    s.messages.insert(1, s.assistant("attempt", summary=True, parent=marker.info.id, finish=None))
    s.messages.pop()
    summary = s.assistant("summary", summary=True, parent=marker.info.id)
    out = filter_compacted(s.messages)
    assert ids(out) == [marker.info.id, summary.info.id, tail.info.id]


def test_opencode_tail_start_id_keeps_its_tail_like_tail_start_id() -> None:
    # OpenCode >= 1.14 writes its kept tail as snake_case ``tail_start_id`` on its marker.
    s = Session()
    s.turn("old")
    tail = s.user("kept")
    kept = [tail, s.assistant("ok")]
    marker = s.user(
        CompactionPart(
            session_id="s", message_id="", auto=False, opencode_tail_start_id=tail.info.id
        )
    )
    summary = s.assistant("summary", summary=True)
    later = s.user("later")
    out = filter_compacted(s.messages)
    assert ids(out) == [marker.info.id, summary.info.id, *ids(kept), later.info.id]


def test_opencode_tail_keeps_an_older_compaction_pair_stored_inside_it() -> None:
    # OpenCode's filterCompacted (1.18) keeps every message from its tail start to the
    # marker, an older marker and summary included; the daemon's own collapse drops them.
    s = Session()
    s.turn("ancient")
    tail = s.user("kept")
    older = s.compact()
    recent = [s.user("recent"), s.assistant("ok")]
    marker = s.user(
        CompactionPart(session_id="s", message_id="", opencode_tail_start_id=tail.info.id)
    )
    summary = s.assistant("summary", summary=True)
    out = filter_compacted(s.messages)
    assert ids(out) == [
        marker.info.id,
        summary.info.id,
        tail.info.id,
        *ids(list(older)),
        *ids(recent),
    ]
