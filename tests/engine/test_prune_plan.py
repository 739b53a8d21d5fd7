from collections.abc import Callable, Iterable, Iterator

import msgspec
import pytest

from sidecar.engine.prune_plan import PrunePlan, apply, plan
from sidecar.model.config import CompactionConfig
from sidecar.model.messages import WithParts
from sidecar.model.parts import ToolCompleted, ToolPart

from .builders import Session, chars, tool

CFG = CompactionConfig()


def tool_of(msg: WithParts, index: int = 0) -> ToolPart:
    parts = [p for p in msg.parts if isinstance(p, ToolPart)]
    return parts[index]


def with_recent_turns(s: Session, tokens: int = 50_000) -> list[str]:
    """Two newest turns with big outputs, which must never be pruned; returns their part ids."""
    return [tool_of(s.turn(tool(output=chars(tokens)))).id for _ in range(2)]


def guarded(msgs: Iterable[WithParts], last_id: str) -> Iterator[WithParts]:
    """Yields newest first and fails if asked for anything after ``last_id``."""
    for m in msgs:
        yield m
        if m.info.id == last_id:
            raise AssertionError(f"walk consumed past {last_id}")


def test_the_part_crossing_the_protect_budget_is_pruned() -> None:
    s = Session()
    older = s.turn(tool(output=chars(20_001)))
    newer = s.turn(tool(output=chars(39_999)))
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    # 39,999 stays under 40,000; 39,999 + 20,001 = 60,000 crosses: the crossing part is pruned.
    assert p == PrunePlan([tool_of(older).id], 20_001, True, [tool_of(older)])
    assert tool_of(newer).id not in p.part_ids


def test_all_parts_beyond_the_budget_are_candidates() -> None:
    s = Session()
    a = s.turn(tool(output=chars(10_000)))
    b = s.turn(tool(output=chars(15_000)))
    c = s.turn(tool(output=chars(30_000)))
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    # 30k protected; 45k crosses (15k pruned); 55k (10k pruned): 25k > 20k commits.
    assert p.part_ids == [tool_of(b).id, tool_of(a).id]
    assert p.tokens_saved == 25_000
    assert p.commit is True
    assert tool_of(c).id not in p.part_ids


@pytest.mark.parametrize(
    ("tokens", "commit"),
    [(20_000, False), (20_001, True)],
    ids=["exactly the minimum does not commit", "one token over the minimum commits"],
)
def test_the_minimum_decides_the_commit(tokens: int, commit: bool) -> None:
    s = Session()
    old = s.turn(tool(output=chars(tokens)))
    s.turn(tool(output=chars(40_000)))
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    assert p.part_ids == [tool_of(old).id]
    assert p.tokens_saved == tokens
    assert p.commit is commit


@pytest.mark.parametrize(
    "turns",
    [
        [[tool(output=chars(40_000))]],
        [
            [tool(status="error", error=chars(50_000)), tool(status="running")],
            [tool(output=chars(40_000))],
        ],
    ],
    ids=["exactly the protect budget is protected", "unfinished tools are ignored"],
)
def test_nothing_to_prune(turns: list[list[ToolPart]]) -> None:
    s = Session()
    for parts in turns:
        s.turn(*parts)
    with_recent_turns(s)
    assert plan(s.newest_first(), CFG) == PrunePlan([], 0, False)


def test_last_two_turns_are_untouched() -> None:
    s = Session()
    t1 = s.turn(tool(output=chars(25_000)))
    t2 = s.turn(tool(output=chars(45_000)))
    recent = with_recent_turns(s, 100_000)
    p = plan(s.newest_first(), CFG)
    # The recent 200k are not even counted: 45k crosses on its own.
    assert p.part_ids == [tool_of(t2).id, tool_of(t1).id]
    assert p.tokens_saved == 70_000
    assert not set(recent) & set(p.part_ids)


def test_only_two_turns_prunes_nothing() -> None:
    s = Session()
    with_recent_turns(s, 100_000)
    assert plan(s.newest_first(), CFG) == PrunePlan([], 0, False)


def test_parts_are_walked_newest_first_within_a_message() -> None:
    s = Session()
    msg = s.turn(tool(output=chars(25_000)), tool(output=chars(30_000)), tool(output=chars(30_000)))
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    # 30k, 60k (crosses: 30k), 85k (25k): the last part in the message is protected.
    assert p.part_ids == [tool_of(msg, 1).id, tool_of(msg, 0).id]
    assert p.tokens_saved == 55_000


@pytest.mark.parametrize(
    ("older", "stop", "newer"),
    [
        (50_000, lambda s: s.compact()[1], 25_000),
        (30_000, lambda s: s.turn(tool(output=chars(1_000), compacted=123)), 20_000),
    ],
    ids=["summary message", "compacted output"],
)
def test_the_walk_stops_lazily_at(
    older: int, stop: Callable[[Session], WithParts], newer: int
) -> None:
    """A finished summary, or an output pruned before, ends the whole walk: nothing older is
    even read."""
    s = Session()
    before = s.turn(tool(output=chars(older)))
    boundary = stop(s)
    b = s.turn(tool(output=chars(45_000)))
    s.turn(tool(output=chars(newer)))
    with_recent_turns(s)
    p = plan(guarded(s.newest_first(), boundary.info.id), CFG)
    assert p == PrunePlan([tool_of(b).id], 45_000, True, [tool_of(b)])
    assert tool_of(before).id not in p.part_ids


def test_summary_inside_the_active_turns_does_not_stop() -> None:
    s = Session()
    old = s.turn(tool(output=chars(60_000)))
    s.compact()  # marker is turn 2 from the end, the summary is skipped with it
    s.turn(tool(output=chars(10)))
    p = plan(s.newest_first(), CFG)
    assert p.part_ids == [tool_of(old).id]
    assert p.tokens_saved == 60_000


def test_protected_tools_are_skipped_and_not_counted() -> None:
    s = Session()
    msg = s.turn(
        tool("read", chars(25_000)), tool("skill", chars(50_000)), tool("bash", chars(30_000))
    )
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    # bash 30k protected, skill ignored, read crosses at 55k.
    assert p.part_ids == [tool_of(msg, 0).id]
    assert p.tokens_saved == 25_000
    assert p.commit is True

    custom = plan(s.newest_first(), CompactionConfig(protected_tools=["read"]))
    # skill 50k crosses with bash: 80k; read is protected now.
    assert custom.part_ids == [tool_of(msg, 1).id]
    assert custom.tokens_saved == 50_000


def test_compacted_output_stops_before_older_parts_of_its_message() -> None:
    s = Session()
    msg = s.turn(
        tool(output=chars(30_000)), tool(output=chars(5), compacted=1), tool(output=chars(50_000))
    )
    with_recent_turns(s)
    p = plan(s.newest_first(), CFG)
    assert p.part_ids == [tool_of(msg, 2).id]
    assert p.tokens_saved == 50_000


def test_compacted_protected_tool_does_not_stop() -> None:
    s = Session()
    old = s.turn(tool(output=chars(30_000)))
    s.turn(tool("skill", chars(5), compacted=1), tool(output=chars(40_000)))
    with_recent_turns(s)
    assert plan(s.newest_first(), CFG).part_ids == [tool_of(old).id]


def test_custom_thresholds() -> None:
    s = Session()
    a = s.turn(tool(output=chars(600)))
    s.turn(tool(output=chars(1_000)))
    with_recent_turns(s)
    cfg = CompactionConfig(prune_protect=1_000, prune_minimum=500)
    assert plan(s.newest_first(), cfg) == PrunePlan([tool_of(a).id], 600, True, [tool_of(a)])


def test_prune_disabled_reads_nothing() -> None:
    def explode() -> Iterator[WithParts]:
        raise AssertionError("consumed")
        yield  # pragma: no cover

    assert plan(explode(), CompactionConfig(prune=False)) == PrunePlan([], 0, False)


def test_empty_session() -> None:
    assert plan([], CFG) == PrunePlan([], 0, False)


def test_apply_sets_compacted_on_a_copy() -> None:
    part = tool(output="out", input={"a": 1})
    done = apply(part, 1_700_000_000_000)
    assert isinstance(done.state, ToolCompleted)
    assert done.state.time.compacted == 1_700_000_000_000
    assert (done.state.time.start, done.state.time.end) == (1, 2)
    assert done.state.output == "out"  # nothing is deleted
    assert done.state.input == {"a": 1}
    assert (done.id, done.call_id, done.tool) == (part.id, part.call_id, part.tool)
    assert isinstance(part.state, ToolCompleted)
    assert part.state.time.compacted is None


def test_apply_rejects_unfinished_calls() -> None:
    with pytest.raises(ValueError, match="not a completed tool call"):
        apply(tool(status="running"), 1)


def test_user_title_summary_does_not_stop_the_walk() -> None:
    s = Session()
    old = s.turn(tool(output=chars(30_000)))
    titled = s.user("titled")
    s.messages[-1] = msgspec.structs.replace(
        titled, info=msgspec.structs.replace(titled.info, summary={"title": "t", "diffs": []})
    )
    s.assistant(tool(output=chars(40_000)))
    with_recent_turns(s)
    assert plan(s.newest_first(), CFG).part_ids == [tool_of(old).id]
