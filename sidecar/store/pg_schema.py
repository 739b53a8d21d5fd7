"""The PostgreSQL schema: ``schema.py``'s tables and rules in PostgreSQL's dialect.

Same version numbers, same forward-only migrations (each in its own transaction, under an
advisory lock so that daemons starting together migrate once). Ids compare in the ``"C"``
collation so that every ordering (``(created, id)``, parts by id) is byte order, as in SQLite
and in the daemon's window cache, whatever the database's locale. ``data`` is ``text``, not
``jsonb``: the client's JSON is kept byte for byte.

Beyond SQLite's schema: every change to a session's rows sends ``NOTIFY sidecar_changed``
with the session id (delivered at commit), which is how a daemon learns that another one
changed a session it caches; and ``relay`` holds notifications too large for a ``NOTIFY``.
"""

from __future__ import annotations

from sidecar.store.schema import INDEX_CHARS, SCHEMA_VERSION

# A fixed key for ``pg_advisory_xact_lock`` while migrating ("sidecar" in ASCII).
MIGRATION_LOCK = 0x73696465636172


def _history_function(body: str) -> str:
    """The trigger's function: a part's indexed text (``body``, SQL over ``NEW``) into
    ``history``; its upsert skips a row whose text is unchanged, so a prune's mark
    (``time.compacted``) leaves the row, its tsvector and its trigram entries alone."""
    return f"""
    CREATE OR REPLACE FUNCTION sidecar_history() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        b TEXT;
    BEGIN
        b := {body};
        IF b IS NULL THEN
            IF TG_OP = 'UPDATE' THEN
                DELETE FROM history WHERE part_id = NEW.id;
            END IF;
        ELSE
            INSERT INTO history (part_id, session_id, body) VALUES (NEW.id, NEW.session_id, b)
            ON CONFLICT (part_id) DO UPDATE SET body = excluded.body
            WHERE history.body IS DISTINCT FROM excluded.body;
        END IF;
        RETURN NULL;
    END $$;
"""


# As migrations 4 and 5 made it (the whole text: a 1 MB output failed its write).
HISTORY_FUNCTION = _history_function("sidecar_history_body(NEW.type, NEW.data)")
# Since migration 6: the first ``INDEX_CHARS`` characters (``schema.INDEX_CHARS``: a
# ``tsvector`` holds at most 1 MB, and a 2 MB output failed its write).
HISTORY_FUNCTION_BOUNDED = _history_function(
    f"left(sidecar_history_body(NEW.type, NEW.data), {INDEX_CHARS})"
)

# History search (``history/search``): each indexed part's text in ``history``, written by
# the indexer's batch (since migration 7; a search runs it first, so an acknowledged write is
# searchable at once; before, by triggers in the part's own transaction) and deleted with it
# (a foreign key, cascading from sessions and messages too). Words go through
# a ``simple`` tsvector with a GIN index (ranked by ``ts_rank``); where words are not enough
# (part of a path or an identifier, a term the parser keeps whole) a trigram GIN index
# (pg_trgm, shipped with PostgreSQL's own package) answers ``ILIKE '%term%'``. The session id
# is indexed too, so a one-session search ANDs the two bitmaps. Parts stored before are
# indexed after the upgrade (``BACKFILL_CHUNK``).
HISTORY_INDEX = (
    """
    CREATE EXTENSION IF NOT EXISTS pg_trgm;

    CREATE TABLE history (
        part_id TEXT COLLATE "C" PRIMARY KEY REFERENCES parts (id) ON DELETE CASCADE,
        session_id TEXT COLLATE "C" NOT NULL,
        body TEXT NOT NULL,
        tsv TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED
    );
    CREATE INDEX history_words ON history USING gin (tsv);
    CREATE INDEX history_by_session ON history (session_id);
    CREATE INDEX history_trigrams ON history USING gin (body gin_trgm_ops);

    CREATE FUNCTION sidecar_history_body(p_type TEXT, p_data TEXT) RETURNS TEXT
    LANGUAGE plpgsql IMMUTABLE AS $$
    DECLARE
        d JSONB;
    BEGIN
        IF p_type NOT IN ('text', 'reasoning', 'tool') THEN
            RETURN NULL;
        END IF;
        d := p_data::jsonb;
        IF p_type <> 'tool' THEN
            RETURN coalesce(d->>'text', '');
        END IF;
        RETURN concat_ws(E'\n', d->>'tool',
            (SELECT string_agg(v, ' ') FROM jsonb_each_text(
                CASE WHEN jsonb_typeof(d->'state'->'input') = 'object'
                THEN d->'state'->'input' ELSE '{}'::jsonb END) AS e(k, v)),
            d->'state'->>'title', d->'state'->>'output', d->'state'->>'error');
    END $$;

"""
    + HISTORY_FUNCTION
    + """

    CREATE TRIGGER parts_history AFTER INSERT OR UPDATE OF data, type ON parts
    FOR EACH ROW EXECUTE FUNCTION sidecar_history();

    CREATE TABLE history_backfill (
        done TEXT COLLATE "C" NOT NULL,
        upto TEXT COLLATE "C" NOT NULL
    );
    INSERT INTO history_backfill (done, upto)
    SELECT '', id FROM parts ORDER BY id DESC LIMIT 1;
"""
)

# ``schema.BACKFILL_CHUNK`` for PostgreSQL: the parts whose id is in ``(?, ?]``.
BACKFILL_CHUNK = f"""
    INSERT INTO history (part_id, session_id, body)
    SELECT id, session_id, left(sidecar_history_body(type, data), {INDEX_CHARS}) FROM parts
    WHERE id > ? AND id <= ? AND type IN ('text', 'reasoning', 'tool')
    ON CONFLICT (part_id) DO UPDATE SET body = excluded.body
"""


# Since migration 7 (as ``schema.HISTORY_BATCHED``): the trigger only notes the part in
# ``history_dirty`` (no foreign key: a removed part's ``history`` row goes by its own
# cascade), and ``HISTORY_BATCH`` brings ``history`` up to date in a transaction of its own.
HISTORY_BATCHED = """
    CREATE TABLE history_dirty (part_id TEXT COLLATE "C" PRIMARY KEY);
    CREATE OR REPLACE FUNCTION sidecar_history() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.type IN ('text', 'reasoning', 'tool')
            OR (TG_OP = 'UPDATE' AND OLD.type IN ('text', 'reasoning', 'tool')) THEN
            INSERT INTO history_dirty (part_id) VALUES (NEW.id) ON CONFLICT DO NOTHING;
        END IF;
        RETURN NULL;
    END $$;
"""

#: One statement (so every part of it sees one snapshot, whatever other daemons on the
#: database do meanwhile): the first ``?`` noted parts (others' batches skip those locked),
#: their current text into ``history`` (an unchanged text leaves its row and index entries
#: alone), the rows of parts no longer of an indexed kind out, the notes dropped; its count
#: is how many.
HISTORY_BATCH = (
    f"""
    WITH d AS (
        SELECT part_id FROM history_dirty ORDER BY part_id LIMIT ? FOR UPDATE SKIP LOCKED
    ), up AS (
        INSERT INTO history (part_id, session_id, body)
        SELECT p.id, p.session_id, left(sidecar_history_body(p.type, p.data), {INDEX_CHARS})
        FROM d JOIN parts p ON p.id = d.part_id
        WHERE p.type IN ('text', 'reasoning', 'tool')
        ON CONFLICT (part_id) DO UPDATE SET body = excluded.body
        WHERE history.body IS DISTINCT FROM excluded.body
    ), gone AS (
        DELETE FROM history h USING d, parts p
        WHERE h.part_id = d.part_id AND p.id = d.part_id
        AND p.type NOT IN ('text', 'reasoning', 'tool')
    )
    DELETE FROM history_dirty WHERE part_id IN (SELECT part_id FROM d)
    """,
)

#: Is any part noted for the batch (``indexer.Indexer``)?
HISTORY_NOTED = "SELECT 1 FROM history_dirty LIMIT 1"

MIGRATIONS: list[str] = [
    # 1: sessions, messages, parts
    """
    CREATE TABLE sessions (
        id TEXT COLLATE "C" PRIMARY KEY,
        parent_id TEXT COLLATE "C",
        created BIGINT NOT NULL,
        updated BIGINT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX sessions_by_updated ON sessions (updated, id);
    CREATE INDEX sessions_by_created ON sessions (created, id);

    CREATE TABLE messages (
        id TEXT COLLATE "C" PRIMARY KEY,
        session_id TEXT COLLATE "C" NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
        created BIGINT NOT NULL,
        role TEXT NOT NULL,
        parent_id TEXT COLLATE "C",
        summary_ok INTEGER NOT NULL DEFAULT 0,
        data TEXT NOT NULL
    );
    CREATE INDEX messages_by_time ON messages (session_id, created, id);
    CREATE INDEX messages_summaries ON messages (parent_id) WHERE summary_ok = 1;

    CREATE TABLE parts (
        id TEXT COLLATE "C" PRIMARY KEY,
        message_id TEXT COLLATE "C" NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT COLLATE "C" NOT NULL,
        type TEXT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX parts_by_message ON parts (message_id, id);
    CREATE INDEX parts_compaction ON parts (session_id) WHERE type = 'compaction';
    """,
    # 2: integrity (PROTOCOL.md, "Integrity"), leases, and what lets daemons share the database.
    """
    CREATE FUNCTION sidecar_integrity() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        bad TEXT;
    BEGIN
        IF TG_TABLE_NAME = 'messages' THEN
            IF NEW.session_id IS DISTINCT FROM OLD.session_id THEN
                bad := 'sidecar:message-session';
            END IF;
        ELSIF TG_OP = 'UPDATE' THEN
            IF NEW.message_id IS DISTINCT FROM OLD.message_id THEN
                bad := 'sidecar:part-message';
            END IF;
        ELSIF NEW.session_id <> (SELECT session_id FROM messages WHERE id = NEW.message_id) THEN
            bad := 'sidecar:part-session';
        END IF;
        IF bad IS NOT NULL THEN
            RAISE EXCEPTION '%', bad USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END $$;

    CREATE TRIGGER messages_one_session BEFORE UPDATE OF session_id ON messages
    FOR EACH ROW EXECUTE FUNCTION sidecar_integrity();
    CREATE TRIGGER parts_one_message BEFORE UPDATE OF message_id ON parts
    FOR EACH ROW EXECUTE FUNCTION sidecar_integrity();
    CREATE TRIGGER parts_session_is_message_session BEFORE INSERT ON parts
    FOR EACH ROW EXECUTE FUNCTION sidecar_integrity();

    CREATE TABLE leases (
        name TEXT COLLATE "C" PRIMARY KEY,
        owner TEXT NOT NULL,
        expires BIGINT NOT NULL
    );

    CREATE FUNCTION sidecar_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE
        sid TEXT;
    BEGIN
        IF TG_TABLE_NAME = 'sessions' THEN
            sid := CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END;
        ELSE
            sid := CASE WHEN TG_OP = 'DELETE' THEN OLD.session_id ELSE NEW.session_id END;
        END IF;
        PERFORM pg_notify('sidecar_changed', sid);
        RETURN NULL;
    END $$;

    CREATE TRIGGER sessions_changed AFTER INSERT OR UPDATE OR DELETE ON sessions
    FOR EACH ROW EXECUTE FUNCTION sidecar_changed();
    CREATE TRIGGER messages_changed AFTER INSERT OR UPDATE OR DELETE ON messages
    FOR EACH ROW EXECUTE FUNCTION sidecar_changed();
    CREATE TRIGGER parts_changed AFTER INSERT OR UPDATE OR DELETE ON parts
    FOR EACH ROW EXECUTE FUNCTION sidecar_changed();

    CREATE TABLE relay (
        id BIGSERIAL PRIMARY KEY,
        created BIGINT NOT NULL,
        data TEXT NOT NULL
    );

    -- The store's three ingest statements (message upsert, session touch, part upsert) as
    -- one call, so a batch alternating messages and their parts goes to the server as one
    -- pipelined executemany, in order, instead of a round trip per statement.
    CREATE FUNCTION sidecar_write(
        w_kind TEXT, w_id TEXT, w_session TEXT, w_message TEXT, w_created BIGINT,
        w_role TEXT, w_parent TEXT, w_summary_ok INTEGER, w_type TEXT, w_data TEXT
    ) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        IF w_kind = 'part' THEN
            INSERT INTO parts (id, message_id, session_id, type, data)
            VALUES (w_id, w_message, w_session, w_type, w_data)
            ON CONFLICT (id) DO UPDATE SET type = excluded.type, data = excluded.data,
                message_id = excluded.message_id, session_id = excluded.session_id;
        ELSIF w_kind = 'message' THEN
            INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data)
            VALUES (w_id, w_session, w_created, w_role, w_parent, w_summary_ok, w_data)
            ON CONFLICT (id) DO UPDATE SET created = excluded.created, role = excluded.role,
                parent_id = excluded.parent_id, summary_ok = excluded.summary_ok,
                data = excluded.data, session_id = excluded.session_id;
        ELSE
            UPDATE sessions SET updated = w_created WHERE id = w_session AND updated < w_created;
        END IF;
    END $$;
    """,
    # 3: pins and compaction diagnostics (schema.py, migration 3).
    """
    CREATE TABLE pins (
        part_id TEXT COLLATE "C" PRIMARY KEY REFERENCES parts (id) ON DELETE CASCADE,
        message_id TEXT COLLATE "C" NOT NULL,
        session_id TEXT COLLATE "C" NOT NULL,
        created BIGINT NOT NULL
    );
    CREATE INDEX pins_by_session ON pins (session_id);

    CREATE TABLE compactions (
        message_id TEXT COLLATE "C" PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
        session_id TEXT COLLATE "C" NOT NULL,
        created BIGINT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX compactions_by_session ON compactions (session_id, created, message_id);
    """,
    # 4: the history search index
    HISTORY_INDEX,
    # 5: a rewrite that leaves a part's indexed text as it was (a prune's ``compacted`` mark)
    # no longer rewrites its ``history`` row and that row's index entries
    HISTORY_FUNCTION,
    # 6: a part's first ``INDEX_CHARS`` characters are indexed, so no text is too large for
    # the tsvector (the write failed); rows indexed before were all short enough
    HISTORY_FUNCTION_BOUNDED,
    # 7: the index brought up to date by a background batch, not inside each write
    HISTORY_BATCHED,
    # 8: reads of a part's JSON go through ``part_json``, as on SQLite (where a large tool
    # output is stored deflated, ``packed``); PostgreSQL compresses such a value itself (TOAST)
    "CREATE VIEW part_json AS SELECT id, message_id, session_id, type, data FROM parts",
    # 9: nothing here: SQLite's update trigger tests a rewrite at less cost; PostgreSQL's
    # batch compares a part's indexed text once, when it indexes it
    "SELECT 9",
    # 10: nothing here: SQLite's new parts go to its batch without a note; PostgreSQL's
    # trigger notes every write (its batch reads the notes by part id)
    "SELECT 10",
]

assert len(MIGRATIONS) == SCHEMA_VERSION, "a migration is missing from one backend"
