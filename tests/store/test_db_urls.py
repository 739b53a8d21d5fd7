"""``--db`` as users write it: files, ``sqlite:///`` URLs and PostgreSQL URLs; anything else,
or a server that cannot be reached, is a one-line error and exit 2, never a directory named
after the scheme (``serve --db postgresql://...`` used to create ``./postgresql:/``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pgcluster import Cluster, new_pg_database, run_async

from sidecar.store import UnsupportedDatabase, is_postgres, redact, sqlite_path


def _serve(cwd: Path, db: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--db", db],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("db", "says"),
    [
        ("mysql://u:pw@localhost/db", "unsupported database 'mysql'"),
        ("sqlite://host/x.db", "a sqlite URL has no host"),
        ("postgresql://nobody:pw@127.0.0.1:1/none", "cannot open the database"),
        ("postgresql://nobody:pw@/none?host=/nonexistent-dir", "cannot open the database"),
    ],
)
def test_an_unusable_db_is_a_clear_error_and_nothing_is_created(
    tmp_path: Path, db: str, says: str
) -> None:
    done = _serve(tmp_path, db)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "pw" not in done.stderr  # the password is never shown
    assert list(tmp_path.iterdir()) == [], "a directory or file was created"


def test_libpq_unix_socket_url_serves(pg_cluster: Cluster, tmp_path: Path) -> None:
    """``postgresql://user@/db?host=/socket/dir``: the daemon starts, migrates, and answers."""
    url = run_async(new_pg_database(pg_cluster))
    assert "@/" in url and "?host=/" in url
    body = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{}}}'
    frames = b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    done = subprocess.run(
        [sys.executable, "-m", "sidecar", "serve", "--db", url],
        cwd=tmp_path,
        input=frames,
        capture_output=True,
        timeout=60,
    )
    assert b'"id":1,"result"' in done.stdout, done.stderr
    assert list(tmp_path.iterdir()) == []


def test_what_each_form_names() -> None:
    assert is_postgres("postgresql://u@/db?host=/run/postgresql")
    assert is_postgres("postgres://u@h:5432/db")
    assert not is_postgres("sessions.db") and not is_postgres(Path("postgresql://x"))
    assert sqlite_path("sqlite:///var/lib/s.db") == "/var/lib/s.db"
    assert sqlite_path("sqlite:relative.db") == "relative.db"
    assert sqlite_path("notes:v2.db") == "notes:v2.db"  # a colon in a file name
    assert sqlite_path("C:\\data\\s.db") == "C:\\data\\s.db"
    with pytest.raises(UnsupportedDatabase, match="PostgreSQL URL"):
        sqlite_path("postgresql://u@h/db")
    assert redact("postgresql://u:secret@h:5432/db?sslmode=require") == (
        "postgresql://u:***@h:5432/db?sslmode=require"
    )
    assert redact("postgresql://u@/db?host=/run/postgresql") == (
        "postgresql://u@/db?host=/run/postgresql"
    )


def test_a_server_that_refuses_is_a_clear_error(pg_cluster: Cluster, tmp_path: Path) -> None:
    """An unknown database on a running server: the server's own reason, exit 2."""
    done = _serve(tmp_path, pg_cluster.url("no_such_database"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot open the database" in lines[0], done.stderr
    assert 'database "no_such_database" does not exist' in lines[0]
    assert list(tmp_path.iterdir()) == []
