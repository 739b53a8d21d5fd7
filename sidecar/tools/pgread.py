"""The inspection commands' read-only connection on PostgreSQL.

``readdb`` is written against ``sqlite3``'s small synchronous surface (``execute`` then
``fetchall``/``fetchone``/iteration); this gives the same surface over asyncpg on a private
event loop, so the look-at commands read a shared PostgreSQL database with the same queries.
The session is ``default_transaction_read_only``: looking can never change the database.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator, Sequence
from typing import Any, cast

import asyncpg

from sidecar.store.pg_commit import pg_sql

# SQLite's ``json_extract(col, '$.key')`` as PostgreSQL's ``(col::json ->> 'key')``.
_JSON_EXTRACT = re.compile(r"json_extract\(([\w.]+), '\$\.(\w+)'\)")


class Rows:
    def __init__(self, rows: list[Sequence[Any]]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Sequence[Any]]:
        return self._rows

    def fetchone(self) -> Sequence[Any] | None:
        return self._rows[0] if self._rows else None

    def __iter__(self) -> Iterator[Sequence[Any]]:
        return iter(self._rows)


class PgReader:
    def __init__(self, url: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._conn: asyncpg.Connection = self._loop.run_until_complete(
            asyncpg.connect(
                url, timeout=10, server_settings={"default_transaction_read_only": "on"}
            )
        )

    def execute(self, sql: str, args: Sequence[Any] = ()) -> Rows:
        query = pg_sql(_JSON_EXTRACT.sub(r"(\1::json ->> '\2')", sql))
        rows = self._loop.run_until_complete(self._conn.fetch(query, *args))
        return Rows(cast(list[Sequence[Any]], rows))

    def close(self) -> None:
        try:
            self._loop.run_until_complete(self._conn.close())
        finally:
            self._loop.close()
