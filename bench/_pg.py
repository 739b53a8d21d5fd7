"""PostgreSQL databases for the benchmarks: a fresh one per measurement, dropped at the end.

``--db postgresql://...`` names a server (any database on it, a role allowed to create
databases): each measured daemon gets a new, empty database there, as the SQLite runs get a new
file. Start a scratch server for it with ``python bench/_pg.py`` (prints its URL; Ctrl-C
stops it): ``initdb`` + ``pg_ctl`` from Debian's packages, PostgreSQL's default durability
(``fsync`` and ``synchronous_commit`` on), a unix socket only.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

_names = itertools.count()


class Databases:
    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.made: list[str] = []

    async def fresh(self, label: str) -> str:
        name = f"bench_{os.getpid()}_{label}_{next(_names)}"
        conn = await asyncpg.connect(self.server_url)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        self.made.append(name)
        return with_database(self.server_url, name)

    async def drop_all(self) -> None:
        conn = await asyncpg.connect(self.server_url)
        try:
            for name in self.made:
                await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


COMMIT_WRAPPER = """
import atexit, sys
import sidecar.store.commit as _w
import sidecar.store.pg_commit as _pw
_writers = []
for _cls in (_w.GroupCommit, _pw.PgCommit):
    def _record(self, *a, _init=_cls.__init__, **k):
        _init(self, *a, **k)
        if getattr(self, "role", "writer") == "writer":  # not PostgreSQL's event relay
            _writers.append(self)
    _cls.__init__ = _record
atexit.register(
    lambda: sys.stderr.write("BENCH_COMMITS %d\\n" % sum(w.commits for w in _writers))
)
from sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""


def main() -> None:
    """A scratch server for the benchmarks, with PostgreSQL's default durability."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from pgcluster import Cluster

    cluster = Cluster(durable=True)
    cluster.start()
    print(cluster.url(), flush=True)
    try:
        sys.stdin.read() if not sys.stdin.isatty() else input()
    except (KeyboardInterrupt, EOFError):
        pass
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
