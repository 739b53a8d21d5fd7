"""Which SQLite errors say the store holds what the daemon did not write (``damage_of``:
-32049), and which stay what they are (a lock, a too-large value, a bad query: not the data's
fault). Each error is SQLite's own, raised by a real statement."""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from sidecar.errors import StoreDamaged
from sidecar.store import damage_of, packed


def _raised(
    run: Callable[[sqlite3.Connection], object], db: str | Path = ":memory:"
) -> BaseException:
    """The error ``run`` meets on a connection to ``db`` (the daemon's SQL functions given)."""
    conn = sqlite3.connect(db)
    packed.register(conn)
    try:
        run(conn)
    except sqlite3.Error as exc:
        return exc
    finally:
        conn.close()
    raise AssertionError("the statement did not fail")


def _not_a_database(tmp: Path) -> BaseException:
    file = tmp / "not.db"
    file.write_bytes(b"hello " * 1000)
    return _raised(lambda c: c.execute("SELECT * FROM sqlite_master").fetchall(), file)


def test_what_the_daemon_did_not_write_is_damage(tmp_path: Path) -> None:
    bad_json = _raised(lambda c: c.execute("SELECT json_extract(?, '$.a')", ("{",)).fetchall())
    no_inflate = _raised(lambda c: c.execute("SELECT sidecar_inflate(?)", (b"\xff" * 40,)))
    bomb = zlib.compress(b" " * (64 << 20), 9)
    too_much = _raised(lambda c: c.execute("SELECT sidecar_inflate(?)", (bomb,)).fetchall())
    for exc in (bad_json, no_inflate, too_much, _not_a_database(tmp_path)):
        assert isinstance(damage_of(exc), StoreDamaged), exc
    assert "inflate" in str(damage_of(no_inflate))
    assert "file is not a database" in str(damage_of(_not_a_database(tmp_path)))


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT zeroblob(2000000000)",  # too big: a client's value, not damage
        "SELECT * FROM nowhere",  # a bad query: a bug
        "CREATE TABLE t (a UNIQUE); INSERT INTO t VALUES (1); INSERT INTO t VALUES (1)",
    ],
)
def test_other_errors_are_not_damage(statement: str) -> None:
    exc = _raised(lambda c: c.executescript(statement))
    assert damage_of(exc) is None, exc


def test_a_match_the_index_cannot_parse_is_not_damage() -> None:
    def run(c: sqlite3.Connection) -> None:
        c.execute("CREATE VIRTUAL TABLE f USING fts5 (a)")
        c.execute("SELECT * FROM f WHERE f MATCH ?", ('"',)).fetchall()

    assert damage_of(_raised(run)) is None
