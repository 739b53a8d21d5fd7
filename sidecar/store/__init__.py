"""SQLite session store (aiosqlite, WAL, group commit). No compaction logic here."""

from sidecar.store.cache import Key
from sidecar.store.store import Boundary, Store

__all__ = ["Boundary", "Key", "Store"]
