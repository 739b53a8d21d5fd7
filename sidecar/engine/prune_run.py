"""Run prune (the pure plan in ``prune_plan.py``) against the store.

The walk goes newest to oldest and stops reading as soon as the plan stops (a summary
message or an already-compacted output past the protected turns), so its cost follows the
recent window, not the length of the history. It starts from the window cache (the window a
frontend reads every step is held there, so the newest messages cost no query) and goes on
with the store's light pages (``Store.light_newest_first``), which bring only what the
decision reads: never an output already pruned.
"""

from __future__ import annotations

from sidecar.engine import prune_plan
from sidecar.engine.ports import StorePort
from sidecar.engine.window import cut_reverted, revert_key
from sidecar.engine.writes import PRUNE, WriteDoor
from sidecar.model.config import CompactionConfig
from sidecar.model.ids import now_ms
from sidecar.model.rpc import PRUNED_PER_EVENT, PrunedEvent, PruneResult
from sidecar.model.session import Session
from sidecar.store import PAGE, Key, LightMessage


def _visible(
    msg: LightMessage, session: Session, rkey: Key | None, cutoff: Key | None
) -> prune_plan.Step | None:
    """``msg`` as the walk sees it, or None when the revert point or ``cutoff`` hides it
    (``cut_reverted``'s rule on light rows)."""
    if cutoff is not None and msg.key > cutoff:
        return None
    parts = msg.parts
    if session.revert is not None and rkey is not None and msg.key >= rkey:
        part_id = session.revert.part_id
        if msg.key > rkey or part_id is None:
            return None
        parts = [p for p in parts if p.id < part_id]
        if not parts:
            return None
    tools = [
        prune_plan.ToolOutput(p.id, p.tool, p.compacted, p.output, p.tokens)
        for p in parts
        if p.tool is not None
    ]
    return prune_plan.Step(msg.user, msg.summary, tools)


async def walk(
    store: StorePort,
    session: Session,
    cfg: CompactionConfig,
    cutoff: Key | None = None,
    page: int = PAGE,
    pinned: frozenset[str] | set[str] = frozenset(),
) -> prune_plan.PrunePlan:
    """The prune plan (the candidates' ``parts`` are left empty: only ids are read);
    ``page``: messages per query behind the cached window; ``pinned`` parts are never
    pruned."""
    if not cfg.prune:
        return prune_plan.PrunePlan(part_ids=[], tokens_saved=0, commit=False)
    rkey = await revert_key(store, session)
    plan = prune_plan.Walk(cfg, pinned)
    end: Key | None = None
    await store.fresh(session.id)
    cached = store.cached_newest_first(session.id)
    if cached is not None:
        start, msgs = cached
        for msg in msgs:  # no await in this loop: the cache stays as it was read
            visible = cut_reverted([msg], session, rkey)
            if not visible:
                continue
            if cutoff is not None and (msg.info.time.created, msg.info.id) > cutoff:
                continue
            if not plan.feed(prune_plan.step_of(visible[0])):
                return plan.plan()
        if start is None:  # the cache held the whole session
            return plan.plan()
        end = start
    async for rows in store.light_newest_first(session.id, end, page):
        for light in rows:
            step = _visible(light, session, rkey, cutoff)
            if step is not None and not plan.feed(step):
                return plan.plan()
    return plan.plan()


async def run(
    store: StorePort,
    session: Session,
    cfg: CompactionConfig,
    *,
    cutoff: Key | None = None,
    ts: int | None = None,
) -> tuple[prune_plan.PrunePlan, list[str]]:
    """Plan and commit a prune; returns the plan and the updated parts' stored JSON.

    ``cutoff``: walk only messages up to it (what a turn-end prune saw when its turn ended,
    whatever the frontend has written since); ``ts``: the ``time.compacted`` to set."""
    plan = await walk(store, session, cfg, cutoff, pinned=await store.pinned_ids(session.id))
    if not plan.commit:
        return plan, []
    updated = await store.mark_compacted(plan.part_ids, ts if ts is not None else now_ms())
    return plan, updated


async def prune(
    store: StorePort,
    writes: WriteDoor,
    session: Session,
    cfg: CompactionConfig,
    *,
    cutoff: Key | None,
    ts: int,
) -> PruneResult:
    """``run``, then what follows the write (``writes.PRUNE``): no ``part/updated`` per
    pruned part, which would carry the very output the prune cleared (126 MB for a long
    imported session's first prune, in one burst), but ``session/pruned`` events naming the
    parts and their ``time.compacted``, a bounded number of ids each."""
    plan, _updated = await run(store, session, cfg, cutoff=cutoff, ts=ts)
    if not plan.commit:
        return PruneResult(part_ids=[], tokens_saved=0)
    events = [
        PrunedEvent(
            session_id=session.id,
            part_ids=plan.part_ids[start : start + PRUNED_PER_EVENT],
            tokens_saved=sum(plan.saved[start : start + PRUNED_PER_EVENT]),
            compacted=ts,
        )
        for start in range(0, len(plan.part_ids), PRUNED_PER_EVENT)
    ]
    writes.after(PRUNE, session.id, events)
    return PruneResult(part_ids=plan.part_ids, tokens_saved=plan.tokens_saved)
