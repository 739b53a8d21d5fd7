"""SQLite's history index keeps no copy of the text, so it must be told exactly what to forget:
whatever mix of writes, rewrites that leave the text alone (a prune's mark), kind changes,
deletions (by cascade too), rolled-back transactions and a first-open backfill running
between them, the index ends equal to the parts (FTS5's own check against its content), and
a search finds each part by its current text only."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest

from sidecar.store import UPSERT_PART, packed, schema
from sidecar.store.sqlite import index_noted, split_script

KINDS = ("text", "reasoning", "tool", "step-start")


def _open(path: Path, version: int) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    packed.register(conn)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    have = conn.execute("SELECT version FROM schema_version").fetchone()
    start = have[0] if have else 0
    if not have:
        conn.execute("INSERT INTO schema_version VALUES (0)")
    for target in range(start + 1, version + 1):
        conn.execute("BEGIN")
        for stmt in split_script(schema.MIGRATIONS[target - 1]):
            conn.execute(stmt)
        conn.execute("UPDATE schema_version SET version = ?", (target,))
        conn.execute("COMMIT")
    return conn


# Enough of an output to be stored deflated (``packed.PACK_BYTES``) once the schema has ``z``.
_LONG = " lorem ipsum dolor" * 400


def _data(kind: str, word: str, compacted: int | None = None, *, long: bool = False) -> str:
    if kind == "tool":
        output = f"out {word}" + (_LONG if long else "")
        state = {"status": "completed", "input": {"cmd": f"run {word}"}, "output": output}
        if compacted is not None:
            state["time"] = {"compacted": compacted}
        return json.dumps({"type": "tool", "tool": "bash", "state": state})
    if kind == "step-start":
        return json.dumps({"type": kind})
    return json.dumps({"type": kind, "text": f"said {word}"})


class World:
    """The parts as the test believes them to be, beside the database."""

    def __init__(self, conn: sqlite3.Connection, rng: random.Random) -> None:
        self.conn = conn
        self.rng = rng
        self.serial = 0
        self.messages: dict[str, str] = {}  # message id -> session id
        self.can_hold = False  # the schema has ``history_hold`` (the index's current form)

    def word(self) -> str:
        self.serial += 1
        return f"w{self.serial:05d}z"

    def message(self) -> str:
        session = f"ses_{self.rng.randrange(3)}"
        mid = f"msg_{self.serial:05d}"
        self.serial += 1
        self.conn.execute("INSERT OR IGNORE INTO sessions VALUES (?, NULL, 1, 1, '{}')", (session,))
        self.conn.execute(
            "INSERT INTO messages (id, session_id, created, role, parent_id, summary_ok, data) "
            "VALUES (?, ?, ?, 'assistant', NULL, 0, '{}')",
            (mid, session, self.serial),
        )
        self.messages[mid] = session
        return mid

    def parts(self) -> list[tuple[str, str, str, str]]:
        return self.conn.execute("SELECT id, message_id, session_id, type FROM parts").fetchall()

    def write(self, pid: str, mid: str, kind: str, data: str) -> None:
        row = (pid, mid, self.messages[mid], kind, data)
        if not self.can_hold:  # a schema before ``z``: as that version's store wrote it
            self.conn.execute(UPSERT_PART, row)
            return
        # As the writer runs it: a long tool output deflated, the rest plain.
        self.conn.executemany(*packed.pack_rows(UPSERT_PART, [row]))

    def data(self, kind: str) -> str:
        """New JSON of ``kind``: a tool's output now and then long enough to be deflated."""
        long = self.can_hold and kind == "tool" and self.rng.random() < 0.6
        return _data(kind, self.word(), long=long)

    def step(self) -> None:
        rng = self.rng
        parts = self.parts()
        op = rng.random()
        if op < 0.35 or not parts:
            mid = rng.choice(list(self.messages)) if self.messages and rng.random() < 0.7 else None
            mid = mid or self.message()
            kind = rng.choice(KINDS)
            self.write(f"prt_{self.word()}", mid, kind, self.data(kind))
            return
        pid, mid, _, kind = rng.choice(parts)
        if op < 0.5:  # new text, same kind
            self.write(pid, mid, kind, self.data(kind))
        elif op < 0.55 and self.can_hold:  # the client sends the part again, marked pruned
            (data,) = self.conn.execute(
                "SELECT data FROM part_json WHERE id = ?", (pid,)
            ).fetchone()
            marked = self.conn.execute(
                "SELECT json_set(?, '$.state.time.compacted', ?)", (data, self.serial)
            ).fetchone()[0]
            self.write(pid, mid, kind, marked)
        elif op < 0.7:  # a prune's mark: the indexed text stays as it is
            held = self.can_hold and rng.random() < 0.5  # as the store marks it, or not
            if held:
                self.conn.execute(schema.HISTORY_HOLD)
            self.conn.execute(
                "UPDATE parts SET data = json_set(data, '$.state.time.compacted', ?) WHERE id = ?",
                (self.serial, pid),
            )
            if held:
                self.conn.execute(schema.HISTORY_RELEASE)
        elif op < 0.8:  # another kind, maybe one not indexed
            new = rng.choice(KINDS)
            self.write(pid, mid, new, self.data(new))
        elif op < 0.9:
            self.conn.execute("DELETE FROM parts WHERE id = ?", (pid,))
        elif op < 0.95:
            self.conn.execute("DELETE FROM messages WHERE id = ?", (mid,))
            self.messages.pop(mid, None)
        else:
            session = self.messages[mid]
            self.conn.execute("DELETE FROM sessions WHERE id = ?", (session,))
            self.messages = {m: s for m, s in self.messages.items() if s != session}

    def backfill_chunk(self) -> bool:
        """One chunk of the first-open backfill, as ``history.backfill`` runs it."""
        row = self.conn.execute("SELECT done, upto FROM history_backfill").fetchone()
        if row is None:
            return False
        done, upto = row
        end = min(upto, done + self.rng.randrange(1, 8))
        self.conn.execute(schema.BACKFILL_CHUNK, (done, end))
        if end == upto:
            self.conn.execute("DELETE FROM history_backfill")
        else:
            self.conn.execute("UPDATE history_backfill SET done = ?", (end,))
        return True


def _commit_and_index(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")
    _index(conn)


def _index(conn: sqlite3.Connection, rows: int = 1 << 30) -> None:
    """The indexer's batch (``schema.HISTORY_BATCH``) in a transaction of its own over the
    first ``rows`` noted parts, as ``indexer.Indexer`` runs it."""
    conn.execute("BEGIN")
    index_noted(conn, rows)
    conn.execute("COMMIT")


def _check(conn: sqlite3.Connection) -> None:
    conn.execute("INSERT INTO history_fts (history_fts, rank) VALUES ('integrity-check', 1)")
    rows = conn.execute(
        "SELECT p.rowid, p.type, j.data, p.session_id FROM parts p JOIN part_json j ON j.id = p.id"
    ).fetchall()
    for rowid, kind, data, session in rows:
        if kind == "step-start":
            continue
        found = conn.execute(
            "SELECT rowid FROM history_fts WHERE history_fts MATCH ?",
            ('"' + _word_of(data) + '"',),
        ).fetchall()
        assert found == [(rowid,)], (rowid, kind, data)
        hexsid = session.encode().hex().upper()
        hits = conn.execute(
            "SELECT count(*) FROM history_fts WHERE history_fts MATCH ?",
            (f'sid : {hexsid} AND "{_word_of(data)}"',),
        ).fetchone()
        assert hits == (1,)


def _word_of(data: str) -> str:
    return next(w for w in data.replace('"', " ").replace("}", " ").split() if w.endswith("z"))


@pytest.mark.parametrize("seed", range(12))
def test_the_index_stays_equal_to_the_parts(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    path = tmp_path / "h.db"
    # Parts stored by a version before the index's current form (v4, its first form, holds
    # entries of its own), then upgraded: the backfill runs between the later writes.
    conn = _open(path, schema.MIGRATIONS.index(schema._HISTORY_INDEX_4) + 1)
    world = World(conn, rng)
    conn.execute("BEGIN")
    for _ in range(40):
        world.step()
    # (Not flushed: that index, of the first form, is dropped by the upgrade.)
    conn.execute("COMMIT")
    conn.close()
    conn = _open(path, schema.SCHEMA_VERSION)
    world.conn = conn
    world.can_hold = True
    assert conn.execute("SELECT count(*) FROM history_backfill").fetchone() == (1,)
    for _ in range(60):  # transactions
        conn.execute("BEGIN")
        for _ in range(rng.randrange(1, 6)):
            world.step()
            if rng.random() < 0.2:
                world.backfill_chunk()
        if rng.random() < 0.15:
            conn.execute("ROLLBACK")
            world.messages = dict(conn.execute("SELECT id, session_id FROM messages").fetchall())
            continue
        conn.execute("COMMIT")
        if rng.random() < 0.4:  # the batch runs now and then, over some of what is noted
            _index(conn, rng.randrange(1, 6))
    conn.execute("BEGIN")
    while world.backfill_chunk():
        pass
    _commit_and_index(conn)
    _check(conn)
    conn.close()


def _json_extract(real: sqlite3.Connection, data: str, *paths: str) -> object:
    """SQLite's own ``json_extract`` (on ``real``), for a counting stand-in to hand over to."""
    marks = ", ".join("?" * (1 + len(paths)))
    return real.execute(f"SELECT json_extract({marks})", (data, *paths)).fetchone()[0]


def _one_tool_part(tmp_path: Path) -> tuple[sqlite3.Connection, World, str]:
    """A database at the current schema holding one indexed tool part, ``prt_a``."""
    conn = _open(tmp_path / "h.db", schema.SCHEMA_VERSION)
    world = World(conn, random.Random(0))
    conn.execute("BEGIN")
    mid = world.message()
    world.write("prt_a", mid, "tool", _data("tool", "alpha1z"))
    _commit_and_index(conn)
    return conn, world, mid


def test_a_rewrite_that_leaves_the_text_alone_does_not_touch_the_index(tmp_path: Path) -> None:
    conn, world, mid = _one_tool_part(tmp_path)
    changes = conn.total_changes
    conn.execute("BEGIN")
    world.write("prt_a", mid, "tool", _data("tool", "alpha1z", compacted=5))
    assert conn.execute("SELECT count(*) FROM history_dirty").fetchone() == (0,)
    # The upsert itself, and nothing in the index's tables.
    assert conn.total_changes == changes + 1
    _commit_and_index(conn)
    _check(conn)


def test_a_held_rewrite_does_not_even_compare_the_texts(tmp_path: Path) -> None:
    """Between ``HISTORY_HOLD`` and ``HISTORY_RELEASE`` (the store's prune mark) the update
    trigger's condition is not evaluated: neither version of a 60 KB row is parsed."""
    conn, _, _ = _one_tool_part(tmp_path)
    calls: list[str] = []

    real = sqlite3.connect(":memory:")

    def counting(data: str, *paths: str) -> object:
        calls.extend(paths)
        return _json_extract(real, data, *paths)

    conn.create_function("json_extract", -1, counting)
    mark = "UPDATE parts SET data = json_set(data, '$.state.time.compacted', ?) WHERE id = ?"
    conn.execute("BEGIN")
    conn.execute(mark, (1, "prt_a"))
    conn.execute("ROLLBACK")
    assert calls, "the plain rewrite compares the indexed texts"
    calls.clear()
    conn.execute("BEGIN")
    conn.execute(schema.HISTORY_HOLD)
    conn.execute(mark, (1, "prt_a"))
    conn.execute(schema.HISTORY_RELEASE)
    _commit_and_index(conn)
    assert calls == []
    _check(conn)


def test_a_tool_completing_with_a_deflated_output_is_noted_without_reading_that_output(
    tmp_path: Path,
) -> None:
    """The common rewrite of an indexed part: a running tool (short, plain) completing with a
    long output (deflated). The update trigger notes it from how the row is stored, without
    inflating or parsing the new JSON (the batch reads it once, when it indexes it); only the
    old entry's text, a few bytes, is read for the note. Sent again marked pruned, the
    deflated part is compared and left alone."""
    conn = _open(tmp_path / "h.db", schema.SCHEMA_VERSION)
    world = World(conn, random.Random(0))
    world.can_hold = True
    conn.execute("BEGIN")
    mid = world.message()
    running = json.dumps(
        {"type": "tool", "tool": "read", "state": {"status": "running", "input": {"p": "a1z"}}}
    )
    world.write("prt_t", mid, "tool", running)
    _commit_and_index(conn)
    calls: list[str] = []
    real = sqlite3.connect(":memory:")
    packed.register(real)

    def inflate(z: bytes) -> str:
        calls.append("inflate")
        text: str = real.execute("SELECT sidecar_inflate(?)", (z,)).fetchone()[0]
        return text

    def extract(data: str, *paths: str) -> object:
        calls.append(f"json_extract of {len(data)} characters")
        return _json_extract(real, data, *paths)

    conn.create_function("sidecar_inflate", 1, inflate, deterministic=True)
    conn.create_function("json_extract", -1, extract)
    completed = _data("tool", "b2z", long=True)
    conn.execute("BEGIN")
    world.write("prt_t", mid, "tool", completed)
    assert conn.execute("SELECT z IS NOT NULL FROM parts").fetchone() == (1,)
    assert "inflate" not in calls
    assert all(int(c.split()[2]) < 200 for c in calls), calls  # the old, running JSON only
    (gone,) = conn.execute("SELECT gone FROM history_dirty").fetchone()
    assert "a1z" in gone
    _commit_and_index(conn)
    _check(conn)

    marked = conn.execute(
        "SELECT json_set(data, '$.state.time.compacted', 7) FROM part_json"
    ).fetchone()[0]
    conn.execute("BEGIN")
    world.write("prt_t", mid, "tool", marked)
    assert conn.execute("SELECT count(*) FROM history_dirty").fetchone() == (0,)
    _commit_and_index(conn)
    _check(conn)


def test_a_new_part_goes_to_the_batch_unnoted_and_a_reused_rowid_is_noted(
    tmp_path: Path,
) -> None:
    """Since migration 10 a new part is not noted: the batch takes every part above its mark.
    When the highest parts are removed, the next insert reuses a rowid at or below the mark,
    which the batch would not look at again: that insert is noted."""
    conn = _open(tmp_path / "h.db", schema.SCHEMA_VERSION)
    world = World(conn, random.Random(0))
    world.can_hold = True
    conn.execute("BEGIN")
    mid = world.message()
    world.write("prt_a", mid, "text", _data("text", "alpha1z"))
    world.write("prt_b", mid, "text", _data("text", "beta1z"))
    assert conn.execute("SELECT count(*) FROM history_dirty").fetchone() == (0,)
    _commit_and_index(conn)
    (mark,) = conn.execute("SELECT upto FROM history_mark").fetchone()
    (b_rowid,) = conn.execute("SELECT rowid FROM parts WHERE id = 'prt_b'").fetchone()
    assert mark == b_rowid
    conn.execute("BEGIN")
    conn.execute("DELETE FROM parts WHERE id = 'prt_b'")
    _commit_and_index(conn)
    conn.execute("BEGIN")
    world.write("prt_c", mid, "text", _data("text", "gamma1z"))
    assert conn.execute("SELECT rowid FROM parts WHERE id = 'prt_c'").fetchone() == (b_rowid,)
    assert conn.execute("SELECT rid FROM history_dirty WHERE gone IS NULL").fetchall() == [
        (b_rowid,)
    ]
    _commit_and_index(conn)
    _check(conn)
    for word, found in (("beta1z", 0), ("gamma1z", 1), ("alpha1z", 1)):
        got = conn.execute(
            "SELECT count(*) FROM history_fts WHERE history_fts MATCH ?", (f'"{word}"',)
        ).fetchone()
        assert got == (found,), word
