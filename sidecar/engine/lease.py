"""The compaction lease: one compaction (or undo) of a session at a time, across daemons.

A compaction holds a lease row in the database (other daemons may share it), renewed while
it runs, so only a daemon that died holding one leaves it, for ``LEASE_MS`` at most (on its
own machine it is taken over at once: ``store.holder.gone``).
"""

from __future__ import annotations

import asyncio

from sidecar.engine.ports import StorePort

LEASE_MS = 60_000


def name(session_id: str) -> str:
    return f"compact:{session_id}"


async def keep(store: StorePort, lease: str, owner: str) -> None:
    """Renew ``lease`` until cancelled."""
    while True:
        await asyncio.sleep(LEASE_MS / 3000)
        await store.acquire_lease(lease, owner, LEASE_MS)
