"""A throwaway PostgreSQL cluster from Debian's packages, for the tests that run on PostgreSQL.

``initdb`` in a temporary directory, a unix socket in that directory, no TCP, no docker. As root
(CI containers) the server runs as the ``postgres`` user (``initdb`` refuses root), through
``runuser``. Each test gets a fresh database copied from a migrated template, so tests do not
see each other's sessions. The cluster trades durability against an OS crash for speed
(``fsync=off``): what the tests check is the daemon's behaviour, including surviving ``kill -9``
of the daemon, which PostgreSQL's own commit guarantees.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import asyncpg

T = TypeVar("T")
BACKENDS = ("sqlite", "postgresql")
USER = "sidecar"
TEMPLATE = "sidecar_template"


class Unavailable(Exception):
    """PostgreSQL's server programs are not installed here (the message says what is missing)."""


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]  # the newest installed version
    path = shutil.which(name)
    if path is None:
        raise Unavailable(
            f"{name} not found: install Debian's postgresql package (apt-get install postgresql)"
        )
    return path


class Cluster:
    def __init__(self, *, durable: bool = False) -> None:
        self.durable = durable  # PostgreSQL's defaults (benchmarks), not the tests' shortcuts
        self.initdb, self.pg_ctl = _bin("initdb"), _bin("pg_ctl")
        self.root = Path(tempfile.mkdtemp(prefix="sidecar-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root
        self._as: list[str] = []
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise Unavailable("running as root and there is no postgres user") from None
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        self.root.chmod(0o755)
        self._names = itertools.count()

    def _run(self, *cmd: str) -> None:
        done = subprocess.run(
            [*self._as, *cmd], capture_output=True, text=True, cwd=self.root, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}\n{done.stderr}")

    def start(self) -> None:
        self._run(
            self.initdb,
            "-D",
            str(self.data),
            "-U",
            USER,
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        )
        self.resume()

    def resume(self) -> None:
        """Start the server (again)."""
        options = f"-k {self.socket_dir} -c listen_addresses='' -c max_connections=300"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            self.pg_ctl,
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "server.log"),
            "-w",
            "start",
        )

    def crash(self) -> None:
        """Stop the server as a crash would (``-m immediate``), keeping its data."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def shut_down(self) -> None:
        """Stop the server as ``pg_ctl stop`` does by default (``-m fast``: every session is
        ended, the server shuts down cleanly), keeping its data."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop")

    def stop(self) -> None:
        try:
            self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def url(self, database: str = "postgres") -> str:
        """libpq style, as users write it for a unix socket."""
        return f"postgresql://{USER}@/{database}?host={self.socket_dir}"

    def fresh_name(self) -> str:
        return f"t{os.getpid()}_{next(self._names)}"


def available_reason() -> str | None:
    """Why PostgreSQL tests cannot run here, or ``None``."""
    try:
        _bin("initdb")
        _bin("pg_ctl")
    except Unavailable as exc:
        return str(exc)
    return None


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end from sync code, even while a loop runs on this thread."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


async def make_template(cluster: Cluster) -> None:
    """The migrated database every test's database is copied from."""
    from sidecar.store import Store

    conn = await asyncpg.connect(cluster.url())
    try:
        await conn.execute(f"CREATE DATABASE {TEMPLATE}")
    finally:
        await conn.close()
    store = await Store.open(cluster.url(TEMPLATE))
    await store.close()


async def new_pg_database(cluster: Cluster) -> str:
    """A fresh, migrated database; its URL (libpq style, unix socket)."""
    name = cluster.fresh_name()
    conn = await asyncpg.connect(cluster.url())
    try:
        await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE {TEMPLATE}')
    finally:
        await conn.close()
    return cluster.url(name)


def is_pg(db: str | os.PathLike[str]) -> bool:
    return isinstance(db, str) and db.startswith("postgresql://")


async def execute(db: str | os.PathLike[str], sql: str, args: Sequence[Any]) -> int:
    """Run one statement behind the daemon's back (``?`` placeholders); rows it changed."""
    if is_pg(db):
        from sidecar.store.pg_commit import pg_sql

        conn = await asyncpg.connect(str(db))
        try:
            status = await conn.execute(pg_sql(sql), *args)
        finally:
            await conn.close()
        return int(status.rsplit(" ", 1)[-1])
    import sqlite3

    from sidecar.store.packed import register

    with sqlite3.connect(db) as conn3:
        register(conn3)  # the schema's triggers read a compressed part's JSON through it
        return conn3.execute(sql, tuple(args)).rowcount


async def fresh_database(backend: str, request: Any, sqlite_file: Path) -> str | Path:
    """A fresh database on ``backend``: ``sqlite_file``, or a new database of the run's
    cluster (the ``pg_cluster`` fixture, asked for only when needed; ``request`` is pytest's
    ``FixtureRequest``)."""
    if backend == "sqlite":
        return sqlite_file
    return await new_pg_database(request.getfixturevalue("pg_cluster"))
