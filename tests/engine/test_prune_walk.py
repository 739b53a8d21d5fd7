"""The store-side prune walk decides exactly what the plain plan decides over the whole history.

``prune_run.walk`` reads light rows (never a pruned output) starting from the window cache
and paging backwards; ``REFERENCE`` is the plan as it was written before that (a copy kept
here, so a change to ``prune_plan`` cannot move both sides at once). On random sessions —
summaries inside and outside the protected turns, compacted and protected outputs, non-ASCII
outputs, reverts, cutoffs — with a cold and a warm cache and tiny pages, they must agree.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import msgspec
import pytest

from sidecar.engine import prune_run, tokens
from sidecar.engine.prune_plan import PROTECTED_TURNS
from sidecar.engine.window import cut_reverted, load_history, load_window, revert_key
from sidecar.model.config import CompactionConfig
from sidecar.model.messages import AssistantMessage, UserMessage, WithParts
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.model.session import RevertInfo, Session, SessionTime
from sidecar.store import Key, Store

from .builders import SID, tool
from .builders import Session as Builder

CFG = CompactionConfig(prune_protect=300, prune_minimum=100)


def reference(newest_first: Iterable[WithParts], cfg: CompactionConfig) -> tuple[list[str], int]:
    """``prune_plan.plan`` before the light walk, verbatim in substance."""
    protected = set(cfg.protected_tools)
    total = pruned = turns = 0
    candidates: list[str] = []
    for msg in newest_first:
        if isinstance(msg.info, UserMessage):
            turns += 1
        if turns < PROTECTED_TURNS:
            continue
        if isinstance(msg.info, AssistantMessage) and msg.info.summary:
            break
        stop = False
        for part in reversed(msg.parts):
            if not isinstance(part, ToolPart) or not isinstance(part.state, ToolCompleted):
                continue
            if part.tool in protected:
                continue
            if part.state.time.compacted:
                stop = True
                break
            estimate = tokens.estimate(part.state.output)
            total += estimate
            if total > cfg.prune_protect:
                pruned += estimate
                candidates.append(part.id)
        if stop:
            break
    return candidates, pruned


def random_session(rng: random.Random) -> Builder:
    b = Builder()
    for _ in range(rng.randint(1, 14)):
        roll = rng.random()
        if roll < 0.12:
            b.compact()
            continue
        b.user("do it")
        parts = []
        for _ in range(rng.randint(0, 4)):
            kind = rng.random()
            size = rng.choice([1, 10, 60, 150, 400])
            out = rng.choice(["x", "é", "😀"]) * size
            if kind < 0.1:
                parts.append(tool("bash", out, compacted=rng.choice([1, 0])))
            elif kind < 0.2:
                parts.append(tool("skill", out))
            elif kind < 0.3:
                parts.append(tool("bash", out, status=rng.choice(["error", "running"])))
            elif kind < 0.4:
                parts.append("some text")
            else:
                parts.append(tool(rng.choice(["bash", "read", "grep"]), out))
        b.assistant(*parts, summary=True if rng.random() < 0.05 else None)
    return b


async def store_session(store: Store, b: Builder, sid: str) -> Session:
    session = Session(id=sid, title="t", time=SessionTime(created=1, updated=1))
    await store.put_session(session)
    for m in b.messages:
        info = msgspec.structs.replace(m.info, session_id=sid)
        await store.put_message(info, msgspec.json.encode(info))
        for p in m.parts:
            part = msgspec.structs.replace(p, session_id=sid)
            await store.put_part(part, msgspec.json.encode(part))
    return session


@pytest.mark.parametrize("seed", range(60))
async def test_walk_decides_what_the_plan_decides(store: Store, seed: int) -> None:
    rng = random.Random(seed)
    b = random_session(rng)
    sid = f"{SID}_{seed}"
    session = await store_session(store, b, sid)
    msgs = b.messages
    if rng.random() < 0.3 and msgs:
        target = rng.choice(msgs)
        part_id = rng.choice(target.parts).id if target.parts and rng.random() < 0.5 else None
        session.revert = RevertInfo(message_id=target.info.id, part_id=part_id)
    cutoff = None
    if rng.random() < 0.3 and msgs:
        m = rng.choice(msgs).info
        cutoff = Key(m.time.created, m.id)
    cfg = CFG if seed % 3 else CompactionConfig(prune_protect=50, prune_minimum=0)

    history = cut_reverted(
        await load_history(store, session), session, await revert_key(store, session)
    )
    visible = [
        m for m in history if cutoff is None or Key(m.info.time.created, m.info.id) <= cutoff
    ]
    want = reference(reversed(visible), cfg)

    for page in (1, 3, 128):
        store.cache.invalidate(sid)  # cold: light pages only
        cold = await prune_run.walk(store, session, cfg, cutoff, page)
        assert (cold.part_ids, cold.tokens_saved) == want, page
        assert cold.commit == (want[1] > cfg.prune_minimum)
    await load_window(store, session)  # warm: the window cache, then light pages behind it
    warm = await prune_run.walk(store, session, cfg, cutoff)
    assert (warm.part_ids, warm.tokens_saved) == want


async def test_walk_passes_a_summary_inside_the_protected_turns(store: Store) -> None:
    """A compaction summary in the two newest turns does not end the walk (OpenCode walks on
    to the older outputs), whatever page boundary it falls on."""
    b = Builder()
    old = [b.turn(tool("bash", "x" * 4000)) for _ in range(3)]
    b.compact()
    b.turn(tool("bash", "x" * 40))
    session = await store_session(store, b, "ses_summary")
    want = reference(b.newest_first(), CFG)
    assert want[0] and set(want[0]) <= {m.parts[0].id for m in old}
    for page in (1, 2, 3, 4):
        store.cache.invalidate(session.id)
        got = await prune_run.walk(store, session, CFG, page=page)
        assert (got.part_ids, got.tokens_saved) == want
