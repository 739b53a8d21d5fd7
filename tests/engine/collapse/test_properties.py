"""Property tests of collapse compaction over random sessions, on a real store.

Each hypothesis example gets its own store file (``fresh_store``) and runs in its own event
loop, so examples cannot leak into each other.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import msgspec
from hypothesis import HealthCheck, assume, event, example, given, settings
from hypothesis import strategies as st

from sidecar.engine import prune_run, render
from sidecar.engine.filter import filter_compacted
from sidecar.engine.fork import fork
from sidecar.engine.revert import revert, unrevert
from sidecar.engine.window import load_window
from sidecar.model.conversation import is_marker, is_summary
from sidecar.model.messages import AssistantMessage, WithParts
from sidecar.model.parts import CompactionPart, TextPart
from sidecar.store import Key
from sidecar.summarizers.sections import FILES_MODIFIED, parse_summary

from . import strategies as S
from .harness import (
    RecordingWriter,
    Writer,
    check_boundaries,
    check_rendered,
    config,
    fresh_store,
    size,
)
from .specs import StepSpec, ToolSpec, TurnSpec

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@contextlib.asynccontextmanager
async def written(first: list[TurnSpec]) -> AsyncIterator[tuple[Writer, str]]:
    """A store of its own holding one session with the turns ``first``: each example's start."""
    async with fresh_store() as store:
        w = Writer(store)
        s = await w.session()
        await w.turns(s.id, first)
        yield w, s.id


def ids(window: Sequence[WithParts]) -> list[str]:
    return [m.info.id for m in window]


def modified_in(texts: list[str]) -> set[str]:
    """The "Files modified" section of the newest summary text."""
    return set(parse_summary(texts[-1]).lists[FILES_MODIFIED]) if texts else set()


async def apply_ops(w: Writer, sid: str, ops: list[tuple[Any, ...]], check: bool = True) -> None:
    """Run random operations: new turns, compactions (either method, manual or automatic)
    and prunes; after each one the window must render with every call answered."""
    for op in ops:
        if op[0] == "turns":
            await w.turns(sid, op[1])
        elif op[0] == "compact":
            await w.compact(sid, config(op[1]), auto=op[2])
        else:
            cfg = config("collapse", pruneProtect=300, pruneMinimum=100)
            session = await w.store.require_session(sid)
            await prune_run.run(w.store, session, cfg.compaction)
        if check:
            window = await w.window(sid)
            if window:
                check_rendered(window)
            check_boundaries(window, set(await w.stored(sid)))


# -- a. rendered context pairs every call with exactly one result -------------------------------


@SETTINGS
@given(first=S.sessions, ops=S.ops)
def test_a_rendered_context_pairs_calls_and_results(
    first: list[TurnSpec], ops: list[tuple[Any, ...]]
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            check_rendered(await w.window(sid))
            await w.compact(sid, config("collapse"))
            await apply_ops(w, sid, ops)

    run(body())


# -- b. repeated compactions (no new messages) ---------------------------------------------------


@SETTINGS
@given(
    first=S.sessions,
    extract=st.sampled_from([0.5, 0.65, 0.8]),
    recent=st.sampled_from([0.1, 0.15, 0.3]),
)
def test_b_repeated_collapse_shrinks_what_it_measures(
    first: list[TurnSpec], extract: float, recent: float
) -> None:
    """The first collapse shrinks the context to exactly what it reports; every later attempt
    measures the real window before it and, when it succeeds, reports a smaller one; the
    window stays valid throughout.

    The stronger property (the *actual* window never grows and reaches a fixed point) does
    not hold today; see the report: failed attempts leave their marker in the window, and a
    second collapse brings the first marker/summary pair back inside the retained tail.
    """

    async def body() -> None:
        async with written(first) as (w, sid):
            cfg = config("collapse", extractRatio=extract, recentRatio=recent)
            before = await w.window(sid)
            first_outcome = await w.compact(sid, cfg)
            after = await w.window(sid)
            assert first_outcome.before_tokens == size(before)
            if first_outcome.result.status == "continue":
                assert size(after) == first_outcome.after_tokens < size(before)
                assert sum(is_summary(m) for m in after) == 1
            for _ in range(5):
                before = await w.window(sid)
                outcome = await w.compact(sid, cfg)
                after = await w.window(sid)
                assert outcome.before_tokens == size(before)
                if outcome.result.status == "continue":
                    assert outcome.after_tokens < outcome.before_tokens
                else:
                    assert outcome.result.error
                check_rendered(after)
                check_boundaries(after, set(await w.stored(sid)))

    run(body())


# -- c. the rolling summary keeps the files of cycle 1 ------------------------------------------


@SETTINGS
@given(
    first=S.sessions,
    later=st.lists(st.lists(S.turns, min_size=1, max_size=4), min_size=1, max_size=4),
)
def test_c_rolling_summary_names_files_modified_in_cycle_1(
    first: list[TurnSpec], later: list[list[TurnSpec]]
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            cfg = config("collapse")
            before = set(ids(await w.window(sid)))
            outcome = await w.compact(sid, cfg)
            assume(outcome.result.status == "continue")
            summarized = before - set(ids(await w.window(sid)))
            cycle1 = {f for mid in summarized for f in w.modified.get(mid, ())}
            assert cycle1 <= modified_in(await w.store.summary_texts(sid, 1))
            event(f"files modified in cycle 1: {'some' if cycle1 else 'none'}")
            everything = set(before)
            done = 1
            for batch in later:  # cycles 2..N (N = 2..5), new turns before each
                everything |= set(await w.turns(sid, batch))
                outcome = await w.compact(sid, cfg, auto=True)
                done += outcome.result.status == "continue"
            event(f"successful collapse cycles: {done}")
            latest = modified_in(await w.store.summary_texts(sid, 1))
            missing = sorted(f for f in cycle1 if f not in latest)
            assert not missing, f"cycle-1 files lost from the rolling summary: {missing}"
            # More generally: a file written by any message that has left the window is named.
            gone = everything - set(ids(await w.window(sid)))
            lost = sorted({f for mid in gone for f in w.modified.get(mid, ())} - latest)
            assert not lost, f"files of summarized messages missing from the summary: {lost}"

    run(body())


# -- d. fork then context -----------------------------------------------------------------------


@SETTINGS
@given(first=S.sessions, ops=S.ops, again=st.booleans(), pick=st.floats(0, 1, exclude_max=True))
def test_d_fork_keeps_the_context(
    first: list[TurnSpec], ops: list[tuple[Any, ...]], again: bool, pick: float
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            await w.compact(sid, config("collapse"))
            await apply_ops(w, sid, ops, check=False)
            if again:
                await w.compact(sid, config("collapse"))
            parent_window = await w.window(sid)

            tails = [
                p.tail_start_id
                for m in await w.store.window(sid)
                for p in m.parts
                if isinstance(p, CompactionPart) and p.tail_start_id
            ]
            event(f"collapse markers with a tail: {min(len(tails), 3)}")
            whole = await fork(w.store, await w.store.require_session(sid), None)
            fork_window = await load_window(w.store, whole)
            assert render.to_openai(fork_window) == render.to_openai(parent_window)
            assert render.to_anthropic(fork_window) == render.to_anthropic(parent_window)
            await _check_fork_references(w, whole.id)

            history = await w.store.window(sid)
            at = history[int(pick * len(history))]
            part = await fork(w.store, await w.store.require_session(sid), at.info.id)
            prefix = await w.store.window(sid, end=Key(at.info.time.created, at.info.id))
            expected = filter_compacted(prefix)
            got = await load_window(w.store, part)
            assert len(got) == len(expected)
            assert render.to_openai(got) == render.to_openai(expected)
            await _check_fork_references(w, part.id)

    run(body())


async def _check_fork_references(w: Writer, fork_id: str) -> None:
    """Every parentID and tailStartID of the fork points at a message of the fork."""
    msgs = await w.store.window(fork_id)
    own = {m.info.id for m in msgs}
    for m in msgs:
        if isinstance(m.info, AssistantMessage) and m.info.parent_id:
            assert m.info.parent_id in own
        for p in m.parts:
            assert p.session_id == fork_id and p.message_id == m.info.id
            if isinstance(p, CompactionPart) and p.tail_start_id is not None:
                assert p.tail_start_id in own, "tailStartID not remapped into the fork"
    window = await load_window(w.store, await w.store.require_session(fork_id))
    check_boundaries(window, own)


# -- e. revert then compact ---------------------------------------------------------------------


@SETTINGS
@given(
    first=S.sessions,
    ops=S.ops,
    pick=st.floats(0, 1, exclude_max=True),
    by_part=st.booleans(),
    part_pick=st.floats(0, 1, exclude_max=True),
    method=S.methods,
)
def test_e_revert_then_compact_never_resurrects(
    first: list[TurnSpec],
    ops: list[tuple[Any, ...]],
    pick: float,
    by_part: bool,
    part_pick: float,
    method: str,
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            await apply_ops(w, sid, ops, check=False)
            history = await w.store.window(sid)
            at = history[int(pick * len(history))]
            part_id = None
            if by_part and at.parts:
                part_id = at.parts[int(part_pick * len(at.parts))].id
            rkey = Key(at.info.time.created, at.info.id)
            gone_msgs = {m.info.id for m in history if Key(m.info.time.created, m.info.id) > rkey}
            gone_parts = {p.id for m in history if m.info.id in gone_msgs for p in m.parts}
            if part_id is None:
                gone_msgs.add(at.info.id)
                gone_parts |= {p.id for p in at.parts}
            else:
                gone_parts |= {p.id for p in at.parts if p.id >= part_id}
            gone_tags = _tags(w, history, gone_msgs, gone_parts)

            event("revert at a part" if part_id else "revert at a message")
            event(f"compacted before the revert: {await w.store.boundary(sid) is not None}")
            session = await revert(w.store, await w.store.require_session(sid), at.info.id, part_id)
            writer = RecordingWriter()
            await w.compact(sid, config(method), auto=True, writer=writer)

            stored = await w.stored(sid)
            assert not (gone_msgs | gone_parts) & set(stored), "cleanup left reverted data"
            window = await w.window(sid)
            in_window = set(ids(window)) | {p.id for m in window for p in m.parts}
            assert not (gone_msgs | gone_parts) & in_window
            rendered = msgspec.json.encode(render.to_openai(window)).decode()
            assert not [t for t in gone_tags if t in rendered]
            for req in writer.requests:
                sent = [*req.history, *req.reference]
                sent_ids = set(ids(sent)) | {p.id for m in sent for p in m.parts}
                assert not (gone_msgs | gone_parts) & sent_ids
                text = msgspec.json.encode([sent, req.previous_summaries]).decode()
                assert not [t for t in gone_tags if t in text], "reverted text sent to summarize"
            summaries = await w.store.summary_texts(sid, 10)
            assert not [t for t in gone_tags for x in summaries if t in x]

            session = await w.store.require_session(sid)
            assert session.revert is None
            count = await w.store.count_messages(sid)
            session = await unrevert(w.store, session)
            assert ids(await w.window(sid)) == ids(window)
            assert await w.store.count_messages(sid) == count

    run(body())


def _tags(w: Writer, history: Sequence[WithParts], msgs: set[str], parts: set[str]) -> list[str]:
    """The unique tags written into the reverted messages and parts."""
    out: list[str] = []
    for m in history:
        for p in m.parts:
            if p.id not in parts:
                continue
            text = p.text if isinstance(p, TextPart) else msgspec.json.encode(p).decode()
            out += [t for t in w.texts.get(m.info.id, []) if t in text]
    return out


# -- f. the retained tail is byte-identical -----------------------------------------------------


_SMALL = StepSpec(text=0, tools=(), reasoning=False, error=None)
_TOOLS = (ToolSpec("bash", "completed", 0, 0), ToolSpec("bash", "completed", 246, 0))


@SETTINGS
@given(first=S.sessions, ops=S.ops, auto=st.booleans())
# After an automatic compaction the first message the next one keeps can be the daemon's own
# continue message, which the test did not write (found by Hypothesis; failed one run in two).
@example(
    first=[
        TurnSpec(user=10, steps=(_SMALL,)),
        TurnSpec(user=10, steps=(_SMALL,)),
        TurnSpec(user=10, steps=(StepSpec(text=0, tools=(), reasoning=True, error=None),)),
        TurnSpec(
            user=10, steps=(_SMALL, StepSpec(text=0, tools=_TOOLS, reasoning=False, error=None))
        ),
    ],
    ops=[("compact", "collapse", True)],
    auto=False,
)
def test_f_retained_tail_is_byte_identical(
    first: list[TurnSpec], ops: list[tuple[Any, ...]], auto: bool
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            await apply_ops(w, sid, [op for op in ops if op[0] != "prune"], check=False)
            stored_before = await w.stored(sid)
            outcome = await w.compact(sid, config("collapse"), auto=auto)
            assume(outcome.result.status == "continue")
            stored_after = await w.stored(sid)
            # append-only: everything stored before is still stored, byte for byte
            assert {k: stored_after[k] for k in stored_before} == stored_before
            window = await w.window(sid)
            marker = window[0]
            tail_id = next(p for p in marker.parts if isinstance(p, CompactionPart)).tail_start_id
            if tail_id is None:
                return
            start = ids(window).index(tail_id)
            # The tail is what was stored before this compaction, from ``tail_id`` on (then the
            # continue message this one added). Its first message may be the daemon's own (an
            # earlier compaction's continue message), so it is compared with what was stored;
            # what the test wrote is also compared with the bytes it wrote.
            tail = [m for m in window[start:] if m.info.id in stored_before]
            assert tail and tail[0].info.id == tail_id
            for m in tail:
                assert stored_after[m.info.id] == stored_before[m.info.id]
                assert stored_after[m.info.id] == w.raw.get(m.info.id, stored_before[m.info.id])
                for p in m.parts:
                    assert stored_after[p.id] == stored_before[p.id]
                    assert stored_after[p.id] == w.raw.get(p.id, stored_before[p.id])
            added = [m.info.id for m in window[start:] if m.info.id not in stored_before]
            assert len(added) <= 1  # at most the continue message of an automatic compaction

    run(body())


# -- extra: a marker/summary pair is never split by the collapse breakpoint ------------------------


@SETTINGS
@given(first=S.sessions, ops=S.ops)
def test_collapse_marker_points_back_into_its_window(
    first: list[TurnSpec], ops: list[tuple[Any, ...]]
) -> None:
    async def body() -> None:
        async with written(first) as (w, sid):
            await apply_ops(w, sid, ops, check=False)
            before = await w.window(sid)
            outcome = await w.compact(sid, config("collapse"))
            if outcome.result.status != "continue":
                return
            window = await w.window(sid)
            assert is_marker(window[0]) and is_summary(window[1])
            tail_id = next(
                p for p in window[0].parts if isinstance(p, CompactionPart)
            ).tail_start_id
            if tail_id is not None:
                # the tail starts on a message boundary of the window the split saw
                assert tail_id in ids(before)
                assert not is_summary(next(m for m in before if m.info.id == tail_id))

    run(body())
