"""Run prune (the pure plan in ``prune.py``) against the store.

The walk reads the session backwards a page at a time and stops reading as soon as a page
holds what ends the walk (a summary message or an already-compacted output), so its cost
follows the recent window, not the length of the history.
"""

from __future__ import annotations

from sidecar.engine import prune_plan
from sidecar.engine.window import cut_reverted, revert_key
from sidecar.model.config import CompactionConfig
from sidecar.model.ids import now_ms
from sidecar.model.messages import AssistantMessage, WithParts
from sidecar.model.parts import ToolCompleted, ToolPart
from sidecar.model.session import Session
from sidecar.store import Key, Store, steer


def _ends_walk(msg: WithParts) -> bool:
    if isinstance(msg.info, AssistantMessage) and msg.info.summary:
        return True
    return any(
        isinstance(p, ToolPart)
        and isinstance(p.state, ToolCompleted)
        and p.state.time.compacted is not None
        for p in msg.parts
    )


async def run(
    store: Store,
    session: Session,
    cfg: CompactionConfig,
    *,
    cutoff: Key | None = None,
    ts: int | None = None,
) -> tuple[prune_plan.PrunePlan, list[str]]:
    """Plan and commit a prune; returns the plan and the updated parts' stored JSON.

    ``cutoff``: walk only messages up to it (what a turn-end prune saw when its turn ended,
    whatever the frontend has written since); ``ts``: the ``time.compacted`` to set."""
    if not cfg.prune:
        return prune_plan.PrunePlan(part_ids=[], tokens_saved=0, commit=False), []
    rkey = await revert_key(store, session)
    newest_first: list[WithParts] = []
    async for page in store.newest_first(session.id):
        visible = cut_reverted(list(reversed(page)), session, rkey)
        if cutoff is not None:
            visible = [m for m in visible if Key(m.info.time.created, m.info.id) <= cutoff]
        newest_first.extend(reversed(visible))
        if any(_ends_walk(m) for m in visible):
            break
    plan = prune_plan.plan(newest_first, cfg, await steer.pinned_ids(store, session.id))
    if not plan.commit:
        return plan, []
    updated = await store.mark_compacted(plan.part_ids, ts if ts is not None else now_ms())
    return plan, updated
