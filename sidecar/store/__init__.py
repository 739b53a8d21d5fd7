"""The session store: one set of queries over SQLite (embedded default) or PostgreSQL (many
daemons on one database). No compaction logic here.

Callers import what they use from this package, never from its modules, so the store can
rearrange its modules without touching them. The backends' own modules (``sqlite``,
``postgres``, ...) are not imported here: a SQLite daemon never loads asyncpg.
"""

from sidecar.model.buffers import LARGE_BYTES
from sidecar.store import history, holder, opencode_db, steer
from sidecar.store.backend import Done, ReadOnlyStore, part_ref
from sidecar.store.cache import Decoded, Key, PageCursor, WindowCache
from sidecar.store.compaction import Boundary
from sidecar.store.history import part_content, terms_of
from sidecar.store.rows import (
    PartKey,
    damage_of,
    decode_stored,
    may_keep_prune_mark,
    message_error,
    message_row,
    part_key,
)
from sidecar.store.schema import SCHEMA_VERSION
from sidecar.store.sessions import Tally
from sidecar.store.statements import UPSERT_PART
from sidecar.store.store import Store
from sidecar.store.url import (
    CannotOpen,
    UnsupportedDatabase,
    is_postgres,
    redact,
    sqlite_path,
    unreachable,
)
from sidecar.store.windows import PAGE, LightMessage, LightPart, Streamed

__all__ = [
    "LARGE_BYTES",
    "PAGE",
    "SCHEMA_VERSION",
    "UPSERT_PART",
    "Boundary",
    "CannotOpen",
    "Decoded",
    "Done",
    "Key",
    "LightMessage",
    "LightPart",
    "PageCursor",
    "PartKey",
    "ReadOnlyStore",
    "Store",
    "Streamed",
    "Tally",
    "UnsupportedDatabase",
    "WindowCache",
    "damage_of",
    "decode_stored",
    "history",
    "holder",
    "is_postgres",
    "may_keep_prune_mark",
    "message_error",
    "message_row",
    "opencode_db",
    "part_content",
    "part_key",
    "part_ref",
    "redact",
    "sqlite_path",
    "steer",
    "terms_of",
    "unreachable",
]
