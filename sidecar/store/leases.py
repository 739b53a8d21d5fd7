"""Named leases: what keeps two daemons on one database from compacting a session twice
(``Store`` delegates here; ``holder.py`` says whether a lease's owner still runs)."""

from __future__ import annotations

import logging

import sidecar.store.holder as holder
from sidecar.store.backend import Backend

log = logging.getLogger("sidecar.store")

_TAKE = (
    "INSERT INTO leases (name, owner, expires) VALUES (?, ?, ?) "
    "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
    "expires = excluded.expires "
    "WHERE leases.expires < ? OR leases.owner = excluded.owner"
)
_OWNER = "SELECT owner FROM leases WHERE name = ?"
_TAKE_OVER = "UPDATE leases SET owner = ?, expires = ? WHERE name = ? AND owner = ?"
_RELEASE = "DELETE FROM leases WHERE name = ? AND owner = ?"


async def acquire(db: Backend, name: str, owner: str, ttl_ms: int) -> bool:
    """Take (or renew) the lease unless another owner holds one that has not expired, or
    that provably no longer runs (``holder.gone``)."""
    now = await db.now_ms()
    counts = await db.submit([(_TAKE, [(name, owner, now + ttl_ms, now)])], needs_counts=True)
    if counts[0] > 0:
        return True
    # Held by another owner: take it over at once if that holder provably no longer runs
    # (killed mid-compaction), rather than blocking the session until the row expires.
    rows = await db.query(_OWNER, [name])
    if not rows or not holder.gone(str(rows[0][0])):
        return False
    counts = await db.submit(
        [(_TAKE_OVER, [(owner, now + ttl_ms, name, rows[0][0])])], needs_counts=True
    )
    if counts[0] > 0:
        log.info("lease %s taken over from %s, which no longer runs", name, rows[0][0])
    return counts[0] > 0


async def release(db: Backend, name: str, owner: str) -> None:
    await db.submit([(_RELEASE, [(name, owner)])])
