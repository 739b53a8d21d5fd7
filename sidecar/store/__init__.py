"""SQLite session store (aiosqlite, WAL, group commit). No compaction logic here."""

from sidecar.store.store import Boundary, Key, Store

__all__ = ["Boundary", "Key", "Store"]
