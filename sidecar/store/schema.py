"""Schema and forward-only migrations.

``schema_version`` holds one row; each migration runs in its own transaction and bumps it, so a
crash mid-upgrade leaves the database at a consistent earlier version.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from sidecar.store.packed import data_of, json_of, served_json
from sidecar.store.statements import upsert_part
from sidecar.store.url import CannotOpen


# The text of a part that ``history/search`` finds (text, reasoning, a tool's name, input,
# title, output and error), as SQL over a ``parts`` row named ``row``: the view the index reads
# (``history_src``) and the triggers' removals compute it the same way. A tool's input is its
# JSON text with the escapes ``\n``, ``\t`` and ``\"`` turned back into what they stand for,
# so an escaped newline in a command does not glue two words (a ``json_tree`` walk did the
# same at several times the cost of the whole insert).
def history_body(
    row: str, limit: int | None = None, *, text: bool = False, packed: bool = False
) -> str:
    """The indexed text of the ``parts`` row ``row`` (``NULL`` for kinds not indexed), its
    first ``limit`` characters (``None``: all of it, as migration 5 indexed). ``text``: the
    JSON read through ``CAST`` (since migration 7, a large part's JSON may be a BLOB, which
    SQLite 3.45 and later would read as JSONB). ``packed``: a part stored deflated is read
    inflated (since migration 8, ``packed``)."""
    data = json_of(row, text=text) if packed else data_of(row, text=text)
    tool_input = f"json_extract({data}, '$.state.input')"
    for escape, plain in (("\\n", "char(10)"), ("\\t", "char(9)"), ('\\"', "'\"'")):
        tool_input = f"replace({tool_input}, '{escape}', {plain})"
    body = (
        f"CASE {row}.type WHEN 'text' THEN json_extract({data}, '$.text') "
        f"WHEN 'reasoning' THEN json_extract({data}, '$.text') "
        f"WHEN 'tool' THEN coalesce(json_extract({data}, '$.tool'), '') || char(10) || "
        f"coalesce({tool_input}, '') || char(10) || "
        f"coalesce(json_extract({data}, '$.state.title'), '') || char(10) || "
        f"coalesce(json_extract({data}, '$.state.output'), '') || "
        f"coalesce(json_extract({data}, '$.state.error'), '') END"
    )
    return body if limit is None else f"substr({body}, 1, {limit})"


#: Characters of a part's text the history index holds, on both backends (its first ones):
#: PostgreSQL's ``tsvector`` holds at most 1 MB, which text of this length cannot exceed (at
#: most ~16 bytes of lexemes and positions per character, hyphenated or URL-like words at
#: their worst); FTS5 has no such limit, but a 64 MB output of distinct words took minutes of
#: the writer's time. A longer text is stored whole and served byte for byte; its index entry
#: is its beginning (an OpenCode tool output is cut at 50 KB anyway).
INDEX_CHARS = 65_536


# History search (``history/search``), first form (migration 4): an FTS5 index holding its own
# copy of every indexed text, re-indexed on every rewrite of a part. Kept as it was run, so a
# database older than it upgrades through it; migration 5 replaces it (``HISTORY_INDEX``).
_HISTORY_INDEX_4 = """
    CREATE VIRTUAL TABLE history_fts USING fts5 (
        body, sid, tokenize = "unicode61 remove_diacritics 2"
    );
    CREATE TABLE history_dirty (rid INTEGER PRIMARY KEY, old INTEGER NOT NULL);
    CREATE TRIGGER history_on_insert AFTER INSERT ON parts
    WHEN NEW.type IN ('text', 'reasoning', 'tool')
    BEGIN
        INSERT INTO history_dirty (rid, old) SELECT NEW.rowid, 0
        WHERE NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = NEW.rowid);
    END;
    CREATE TRIGGER history_on_update AFTER UPDATE OF data, type ON parts
    BEGIN
        INSERT INTO history_dirty (rid, old) SELECT NEW.rowid, 1
        WHERE NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = NEW.rowid);
    END;
    CREATE TRIGGER history_on_delete AFTER DELETE ON parts
    BEGIN
        DELETE FROM history_dirty WHERE rid = OLD.rowid;
        DELETE FROM history_fts WHERE rowid = OLD.rowid;
    END;
    CREATE TABLE history_backfill (done INTEGER NOT NULL, upto INTEGER NOT NULL);
    INSERT INTO history_backfill (done, upto)
    SELECT 0, rowid FROM parts ORDER BY rowid DESC LIMIT 1;
"""

# History search (``history/search``): an FTS5 index over every part's text (its first
# ``INDEX_CHARS`` characters), its rowid the
# part's rowid (an upsert keeps it). The index holds no copy of the text: its content is the
# view ``history_src`` over ``parts`` (an FTS5 "external content" table), so the store is
# not twice its size. Such an index is told what to forget: a part's entry is removed with
# the exact text it was indexed with (the ``'delete'`` command), which is the part's last
# committed text, i.e. ``OLD`` at its first rewrite in a transaction.
#
# When a part is written, triggers note it in ``history_dirty`` (a plain b-tree insert), and
# the indexer (``indexer.Indexer``, since migration 7) indexes what is noted in a batch of its
# own after the writes; a search runs the batch first, so an acknowledged write is
# searchable at once. A rewrite that leaves the indexed text as it was (a prune's
# ``compacted`` mark, a finish time) touches nothing: a 60 KB output is tokenized once.
# Comparing the texts parses both versions of the row; a statement known to leave them alone
# (the prune's ``json_set`` of ``time.compacted``) skips even that by running between
# ``HISTORY_HOLD`` and ``HISTORY_RELEASE`` in its transaction.
#
# Which parts the index holds: those of an indexed kind, minus the ones noted in
# ``history_dirty`` (written since the last batch), minus the ones the
# first-open backfill has still to reach (``history_backfill``: rowids in ``(done, upto]``;
# those are the backfill's alone, whatever is written to them meanwhile). Removing an entry
# the index does not hold would corrupt it (``forget_old`` checks all three). What is indexed
# is always read through ``history_src``, so it is the text a removal gives back.
#
# ``unicode61`` splits at ``_``, ``/``, ``.`` and ``:``, and a search term is matched as a
# phrase of its words, so ``test_parse_header``, ``src/pkg/mod.py`` and
# ``ModuleNotFoundError`` are found as typed. ``sid`` is the part's session id in hex, one
# token whatever the id holds: a search of one session matches it in the index (``sid : <hex>
# AND ...``), so it costs what that session holds, not what the whole database does.
_INDEXED = "('text', 'reasoning', 'tool')"
_NOT_BACKFILL = (
    "NOT EXISTS (SELECT 1 FROM history_backfill WHERE {row}.rowid > done AND {row}.rowid <= upto)"
)
# Since migration 10: every part above this rowid is the next batch's to index, unnoted.
_MARK = "(SELECT upto FROM history_mark)"
# (``NOT EXISTS``, not ``OR IGNORE``: in a trigger fired by an upsert, the upsert's own
# conflict handling overrides the trigger statement's.)
_NOTE = (
    "INSERT INTO history_dirty (rid) SELECT NEW.rowid "
    "WHERE NEW.type IN " + _INDEXED + " AND " + _NOT_BACKFILL.format(row="NEW") + " AND "
    "NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = NEW.rowid);"
)


def _history_index(limit: int | None) -> str:
    """The index over the first ``limit`` characters of each part's text (``None``: all)."""
    # Forget ``OLD``'s entry if the index holds it: an indexed kind, not noted in this
    # transaction, not left to the backfill.
    forget_old = (
        "INSERT INTO history_fts (history_fts, rowid, body, sid) "
        f"SELECT 'delete', OLD.rowid, {history_body('OLD', limit)}, hex(OLD.session_id) "
        f"WHERE OLD.type IN {_INDEXED} "
        "AND NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = OLD.rowid) "
        f"AND {_NOT_BACKFILL.format(row='OLD')};"
    )
    return f"""
    DROP TRIGGER IF EXISTS history_on_insert;
    DROP TRIGGER IF EXISTS history_on_update;
    DROP TRIGGER IF EXISTS history_on_delete;
    DROP TABLE IF EXISTS history_fts;
    DROP TABLE IF EXISTS history_dirty;
    DROP TABLE IF EXISTS history_hold;
    DROP TABLE IF EXISTS history_backfill;
    DROP VIEW IF EXISTS history_src;
    CREATE VIEW history_src AS
    SELECT rowid AS rid, {history_body("parts", limit)} AS body, hex(session_id) AS sid
    FROM parts WHERE type IN {_INDEXED};
    CREATE VIRTUAL TABLE history_fts USING fts5 (
        body, sid, content = 'history_src', content_rowid = 'rid',
        tokenize = "unicode61 remove_diacritics 2"
    );
    INSERT INTO history_fts (history_fts, rank) VALUES ('automerge', 16);
    CREATE TABLE history_dirty (rid INTEGER PRIMARY KEY);
    CREATE TABLE history_hold (held INTEGER PRIMARY KEY);
    CREATE TABLE history_backfill (done INTEGER NOT NULL, upto INTEGER NOT NULL);
    INSERT INTO history_backfill (done, upto)
    SELECT 0, rowid FROM parts ORDER BY rowid DESC LIMIT 1;
    CREATE TRIGGER history_on_insert AFTER INSERT ON parts
    WHEN NEW.type IN {_INDEXED}
    BEGIN
        {_NOTE}
    END;
    CREATE TRIGGER history_on_update AFTER UPDATE OF data, type ON parts
    WHEN NOT EXISTS (SELECT 1 FROM history_hold)
    AND {history_body("OLD", limit)} IS NOT {history_body("NEW", limit)}
    BEGIN
        {forget_old}
        {_NOTE}
    END;
    CREATE TRIGGER history_on_delete AFTER DELETE ON parts
    WHEN OLD.type IN {_INDEXED}
    BEGIN
        {forget_old}
        DELETE FROM history_dirty WHERE rid = OLD.rowid;
    END;
"""


# Migration 5 as it was run (the whole text), then 6: the first ``INDEX_CHARS`` characters,
# indexed anew (in the background at first open, as the backfill does).
_HISTORY_INDEX_5 = _history_index(None)
HISTORY_INDEX = _history_index(INDEX_CHARS)

# Since migration 7 the index is brought up to date by a background batch (``HISTORY_BATCH``,
# run by ``indexer.Indexer`` in a transaction of its own, never in a write's): a write only
# notes its part in ``history_dirty``, with, when the index holds the part's entry, the text
# that entry was made from (``gone``, its first ``INDEX_CHARS`` characters: what the
# ``'delete'`` command needs once ``OLD`` is gone). A part noted already is not compared or
# noted again, so a part streamed in many updates costs each update one probe. A search first
# runs the batch over everything noted (read-your-writes); after a crash the notes are still
# there and the batch catches up at the next start.


def _note_for_index(
    row: str, *, gone: bool, by_id: bool = False, packed: bool = False, marked: bool = False
) -> str:
    """Note the part ``row`` for the indexer, if the index holds (``gone``: held) its entry or
    is to: an indexed kind, not noted since the last batch, not left to the backfill (and,
    ``marked``, since migration 10, at or below the mark: a part above it is the batch's
    anyway). With ``gone``, the text its entry was made from is noted too. ``by_id``: ``row``
    is the part whose id is the statement's ``?`` (else a trigger's ``OLD``/``NEW``)."""
    columns = "rid, gone, gone_sid" if gone else "rid"
    values = f"{row}.rowid"
    if gone:
        body = history_body(row, INDEX_CHARS, text=True, packed=packed)
        values += f", {body}, hex({row}.session_id)"
    source = f"FROM parts {row} WHERE {row}.id = ? AND " if by_id else "WHERE "
    mark = f"AND {row}.rowid <= {_MARK} " if marked else ""
    return (
        f"INSERT INTO history_dirty ({columns}) SELECT {values} "
        f"{source}{row}.type IN {_INDEXED} {mark}AND {_NOT_BACKFILL.format(row=row)} "
        f"AND NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = {row}.rowid)"
    )


def _gone(row: str, packed: bool) -> str:
    """A trigger's note of ``row`` (``OLD``) with the text its index entry was made from."""
    return _note_for_index(row, gone=True, packed=packed) + ";"


def _batched(packed: bool) -> str:
    """The history view and the triggers that note parts for the batch (``packed``: reading
    a part stored deflated, since migration 8)."""
    body = functools.partial(history_body, limit=INDEX_CHARS, text=True, packed=packed)
    return f"""
    DROP TRIGGER IF EXISTS history_on_update;
    DROP TRIGGER IF EXISTS history_on_delete;
    DROP VIEW history_src;
    CREATE VIEW history_src AS
    SELECT rowid AS rid, {body("parts")} AS body,
        hex(session_id) AS sid
    FROM parts WHERE type IN {_INDEXED};{{columns}}
    CREATE TRIGGER history_on_update AFTER UPDATE OF data, type ON parts
    WHEN NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = NEW.rowid)
    AND NOT EXISTS (SELECT 1 FROM history_hold)
    AND {body("OLD")}
        IS NOT {body("NEW")}
    BEGIN
        {_gone("OLD", packed)}
        {_NOTE}
    END;
    CREATE TRIGGER history_on_delete AFTER DELETE ON parts
    WHEN OLD.type IN {_INDEXED}
    BEGIN
        {_gone("OLD", packed)}
    END;
"""


HISTORY_BATCHED = _batched(packed=False).format(
    columns="""
    ALTER TABLE history_dirty ADD COLUMN gone TEXT;
    ALTER TABLE history_dirty ADD COLUMN gone_sid TEXT;"""
)

# Since migration 8, a tool part's JSON of ``packed.PACK_BYTES`` or more is stored deflated in
# ``z``: the view every read of a part's JSON goes through, the history view and triggers
# reading it inflated.
_PART_JSON = f"""
    ALTER TABLE parts ADD COLUMN z BLOB;
    CREATE VIEW part_json AS
    SELECT id, message_id, session_id, type, {served_json("parts")} AS data FROM parts;"""
PACKED_PARTS = _PART_JSON + _batched(packed=True).format(columns="")


# A part of ``backend.LARGE_BYTES`` or more is stored from the buffers it arrived in
# (``SqliteBackend.large_part``): its row is written with a ``zeroblob`` of its size, which
# SQLite never builds in memory, and its JSON then written into that blob in place
# (``commit.WRITE_PIECES``). Such a row holds its JSON as a BLOB: the store reads it as bytes,
# and SQL reads it as text through ``CAST``. The rewrite of a part the index holds is held
# from the update trigger (which would parse the zeros) and noted by these two instead: the
# entry to forget before, the part after.
_LARGE_GONE = _note_for_index("p", gone=True, by_id=True, packed=True, marked=True)
_LARGE_NOTE = _note_for_index("p", gone=False, by_id=True, marked=True)
_LARGE_UPSERT = upsert_part("zeroblob(?)", z="NULL")


def large_part_statements(row: tuple[Any, ...], size: int) -> list[tuple[str, list[Any]]]:
    """The statements before a large part's JSON is written into its row (``row``: the
    part's columns but the JSON; ``size``: the JSON's bytes)."""
    pid = row[0]
    return [
        (_LARGE_GONE, [(pid,)]),
        (HISTORY_HOLD, [()]),
        (_LARGE_UPSERT, [(*row, size)]),
        (HISTORY_RELEASE, [()]),
        (_LARGE_NOTE, [(pid,)]),
    ]


#: The noted parts (the first ``?`` of them by rowid) into the index, in a transaction of
#: their own (``indexer.Indexer``): entries of their old texts removed, their current texts
#: (those still of an indexed kind) added, their notes dropped (the last count: how many).
_UPTO = "(SELECT max(rid) FROM (SELECT rid FROM history_dirty ORDER BY rid LIMIT ?))"
# Since migration 10, first the next ``?`` parts above the mark become notes (an indexed kind;
# nothing of theirs to forget: the index never held them) and the mark moves past them (its
# count: 1 when it moved, so the indexer looks again, ``history_more``).
_ABOVE = (
    "(SELECT max(rowid) FROM (SELECT rowid FROM parts WHERE rowid > "
    f"{_MARK} ORDER BY rowid LIMIT ?))"
)
HISTORY_BATCH = (
    "INSERT OR IGNORE INTO history_dirty (rid) SELECT rowid FROM parts "
    f"WHERE rowid > {_MARK} AND rowid <= {_ABOVE} AND type IN {_INDEXED}",
    f"UPDATE history_mark SET upto = {_ABOVE} "
    "WHERE EXISTS (SELECT 1 FROM parts WHERE rowid > upto)",
    "INSERT INTO history_fts (history_fts, rowid, body, sid) "
    f"SELECT 'delete', rid, gone, gone_sid FROM history_dirty WHERE rid <= {_UPTO} "
    "AND gone IS NOT NULL",
    # CROSS JOIN keeps the noted rows the outer loop: with the view's kind filter on ``parts``
    # the planner would otherwise scan every part.
    "INSERT INTO history_fts (rowid, body, sid) SELECT s.rid, s.body, s.sid "
    f"FROM history_dirty CROSS JOIN history_src s ON s.rid = history_dirty.rid "
    f"WHERE history_dirty.rid <= {_UPTO}",
    f"DELETE FROM history_dirty WHERE rid <= {_UPTO}",
)

#: Is anything for the batch to do: a part noted, or one above the mark (``indexer.Indexer``)?
HISTORY_NOTED = (
    f"SELECT 1 FROM history_dirty UNION ALL SELECT 1 FROM parts WHERE rowid > {_MARK} LIMIT 1"
)


def history_more(counts: Sequence[int]) -> bool:
    """After a batch (its statements' ``counts``) that was not full, is another due? Yes when
    the mark moved: more parts may be above it."""
    return counts[1] > 0


#: Around a statement that changes no part's indexed text (see above).
HISTORY_HOLD = "INSERT OR IGNORE INTO history_hold (held) VALUES (1)"
HISTORY_RELEASE = "DELETE FROM history_hold"
# The parts stored before the index existed: ``Store.backfill_history`` indexes them by rowid
# in chunks (each one op of the group commit, so writes go on meanwhile), recording how far
# it got in ``history_backfill`` and dropping the row at the end. No trigger touches the index
# entry of a part in the range still to do, so a chunk only adds.
BACKFILL_CHUNK = """
    INSERT INTO history_fts (rowid, body, sid)
    SELECT rid, body, sid FROM history_src WHERE rid > ? AND rid <= ?
"""


def _indexed_fields(row: str) -> str:
    """Every field the index's text is made of (``history_body``), as one JSON array: one
    parse of the row's JSON, where the text itself takes one per field."""
    fields = ("text", "tool", "state.input", "state.title", "state.output", "state.error")
    paths = ", ".join(f"'$.{f}'" for f in fields)
    return f"json_extract({json_of(row, text=True)}, {paths})"


# Since migration 9, the update trigger's test of whether a rewrite changed the indexed text.
# The test ran inside every rewrite of an indexed part (the write's own commit): each side's
# text was built from five or six ``json_extract``, each parsing the whole JSON (SQLite before
# 3.45 keeps no parse), and a deflated side inflated: ~0.4 ms for a 70 KB tool output. Now:
# a part whose JSON changes how it is stored (plain <-> deflated: a tool completing with its
# output) or its kind is noted at once; otherwise, if its JSON changed at all, both sides'
# fields are compared as one array each. Noting a part whose text did not change costs only
# a re-index of it; a prune's mark and a client re-sending a pruned part are still told apart.
_REWRITTEN = f"""NOT EXISTS (SELECT 1 FROM history_dirty WHERE rid = NEW.rowid)
    AND NOT EXISTS (SELECT 1 FROM history_hold)
    AND (
        OLD.type IS NOT NEW.type
        OR (OLD.z IS NULL) <> (NEW.z IS NULL)
        OR ((OLD.data IS NOT NEW.data OR OLD.z IS NOT NEW.z)
            AND {_indexed_fields("OLD")} IS NOT {_indexed_fields("NEW")})
    )
    BEGIN
        {_gone("OLD", True)}
        {_NOTE}
    END;"""
HISTORY_UPDATE_TEST = f"""
    DROP TRIGGER IF EXISTS history_on_update;
    CREATE TRIGGER history_on_update AFTER UPDATE OF data, type ON parts
    WHEN {_REWRITTEN}
"""

# Since migration 10, a new part is not noted at all: the index's batch takes every part
# above a mark (``history_mark``: the highest rowid it has looked at) and moves the mark past
# them (``HISTORY_BATCH``), so an insert costs the trigger one comparison instead of a note
# (about half of a part's insert, measured). Parts at or below the mark are noted as before
# when rewritten or removed; one above it has no entry to forget and is the batch's anyway.
# A rowid at or below the mark is reused only when the highest parts were removed: such an
# insert is noted as a rewrite would be.
HISTORY_MARKED = f"""
    CREATE TABLE history_mark (upto INTEGER NOT NULL);
    INSERT INTO history_mark (upto) SELECT coalesce(max(rowid), 0) FROM parts;
    DROP TRIGGER IF EXISTS history_on_insert;
    DROP TRIGGER IF EXISTS history_on_update;
    DROP TRIGGER IF EXISTS history_on_delete;
    CREATE TRIGGER history_on_insert AFTER INSERT ON parts
    WHEN NEW.rowid <= {_MARK}
    BEGIN
        {_NOTE}
    END;
    CREATE TRIGGER history_on_update AFTER UPDATE OF data, type ON parts
    WHEN OLD.rowid <= {_MARK} AND {_REWRITTEN}
    CREATE TRIGGER history_on_delete AFTER DELETE ON parts
    WHEN OLD.type IN {_INDEXED} AND OLD.rowid <= {_MARK}
    BEGIN
        {_gone("OLD", True)}
    END;
"""


MIGRATIONS: list[str] = [
    # 1: sessions, messages, parts
    """
    CREATE TABLE sessions (
        id TEXT PRIMARY KEY,
        parent_id TEXT,
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX sessions_by_updated ON sessions (updated, id);

    CREATE TABLE messages (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        created INTEGER NOT NULL,
        role TEXT NOT NULL,
        parent_id TEXT,
        summary_ok INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    CREATE INDEX messages_by_time ON messages (session_id, created, id);
    CREATE INDEX messages_summaries ON messages (parent_id) WHERE summary_ok = 1;

    CREATE TABLE parts (
        id TEXT PRIMARY KEY,
        message_id TEXT NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX parts_by_message ON parts (message_id, id);
    CREATE INDEX parts_compaction ON parts (session_id) WHERE type = 'compaction';
    """,
    # 2: integrity (PROTOCOL.md): an id belongs to one session, a part to one message, and a
    # part's session is its message's. Raised inside the statement, so the writer fails
    # exactly the offending op (``Store`` maps the messages to wire errors).
    """
    CREATE TRIGGER messages_one_session BEFORE UPDATE OF session_id ON messages
    WHEN NEW.session_id IS NOT OLD.session_id
    BEGIN SELECT RAISE(ABORT, 'sidecar:message-session'); END;

    CREATE TRIGGER parts_one_message BEFORE UPDATE OF message_id ON parts
    WHEN NEW.message_id IS NOT OLD.message_id
    BEGIN SELECT RAISE(ABORT, 'sidecar:part-message'); END;

    CREATE TRIGGER parts_session_is_message_session BEFORE INSERT ON parts
    WHEN NEW.session_id <> (SELECT session_id FROM messages WHERE id = NEW.message_id)
    BEGIN SELECT RAISE(ABORT, 'sidecar:part-session'); END;

    CREATE TABLE leases (
        name TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        expires INTEGER NOT NULL
    );
    """,
    # 3: steering compaction (PROTOCOL.md "Steering compaction"): pins and each compaction's
    # diagnostics are the daemon's own data, not the client's JSON. Both go with the row they
    # belong to (a pin with its part, diagnostics with their summary message).
    """
    CREATE TABLE pins (
        part_id TEXT PRIMARY KEY REFERENCES parts (id) ON DELETE CASCADE,
        message_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        created INTEGER NOT NULL
    );
    CREATE INDEX pins_by_session ON pins (session_id);

    CREATE TABLE compactions (
        message_id TEXT PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT NOT NULL,
        created INTEGER NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX compactions_by_session ON compactions (session_id, created, message_id);
    """,
    # 4: the history search index, first form
    _HISTORY_INDEX_4,
    # 5: the history search index without its own copy of the text (indexed anew)
    _HISTORY_INDEX_5,
    # 6: the index holds the first ``INDEX_CHARS`` characters of a part's text (indexed anew)
    HISTORY_INDEX,
    # 7: the index brought up to date by a background batch, not inside each write
    HISTORY_BATCHED,
    # 8: large tool outputs stored deflated
    PACKED_PARTS,
    # 9: a rewrite tells whether it changed the indexed text at less cost
    HISTORY_UPDATE_TEST,
    # 10: a new part is the index's batch's without a note (a mark, ``history_mark``)
    HISTORY_MARKED,
]

SCHEMA_VERSION = len(MIGRATIONS)

# The version row, as both backends' migrations read and bump it (PostgreSQL's placeholders
# through ``pg_commit.pg_sql``).
VERSION_TABLE = "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)"
READ_VERSION = "SELECT version FROM schema_version"
FIRST_VERSION = "INSERT INTO schema_version (version) VALUES (0)"
SET_VERSION = "UPDATE schema_version SET version = ?"


def check_readable(display: str, version: int | None) -> None:
    """Refuse to read a database at another schema version (``Store.open(readonly=True)``):
    a read-only open cannot migrate it, and reading it as this version's would misread it."""
    if version is None:
        raise CannotOpen(f"{display}: not a compaction-sidecar database (no schema version)")
    if version < SCHEMA_VERSION:
        raise CannotOpen(
            f"{display}: database schema v{version} is older than this version's "
            f"(v{SCHEMA_VERSION}): open it once with `compaction-sidecar serve` to migrate it"
        )
    if version > SCHEMA_VERSION:
        raise CannotOpen(
            f"{display}: database schema v{version} is newer than this version's "
            f"(v{SCHEMA_VERSION}): read it with a newer compaction-sidecar"
        )


async def check_opened(
    display: str,
    version: Callable[[], Awaitable[int | None]],
    close: Callable[[], Awaitable[None]],
    db_error: type[Exception],
) -> None:
    """``check_readable`` on a read-only connection just opened, closing it when the check
    fails; ``db_error`` (the driver's) means the database is not one of ours."""
    try:
        check_readable(display, await version())
    except db_error as exc:
        await close()
        raise CannotOpen(f"{display}: not a compaction-sidecar database ({exc})") from None
    except BaseException:
        await close()
        raise
