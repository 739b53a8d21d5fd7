"""The session store: one set of queries over SQLite (embedded default) or PostgreSQL (many
daemons on one database). No compaction logic here."""

from sidecar.store.cache import Key
from sidecar.store.store import Boundary, Store

__all__ = ["Boundary", "Key", "Store"]
