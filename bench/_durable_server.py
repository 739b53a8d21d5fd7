"""The durable floor for bench/ingest.py: the raw echo server plus what makes an answer mean
"stored", and nothing more.

Each ``part/update`` (``message/update``) is validated into a msgspec Struct of the fields a
row needs, upserted into SQLite (WAL, ``synchronous=NORMAL``, one table per kind with its
primary key and one index, no triggers), and answered, like the daemon, with the part
echoed in the reply and in one ``part/updated`` (``message/updated``) notification. The
frames of one read share one commit, made before any of their answers is written (the
daemon's group commit). Everything else gets ``{}``; ``exit`` or end of input ends it.

    python bench/_durable_server.py DB_PATH
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys

import msgspec
from _framed import FramedProtocol, frame, serve_stdio


class _Envelope(msgspec.Struct):
    id: int | str | None = None
    method: str = ""
    params: msgspec.Raw = msgspec.Raw(b"null")


class _PartParams(msgspec.Struct):
    part: msgspec.Raw


class _MessageParams(msgspec.Struct):
    message: msgspec.Raw


class _Part(msgspec.Struct):
    id: str
    sessionID: str
    messageID: str
    type: str


class _Time(msgspec.Struct):
    created: int


class _Message(msgspec.Struct):
    id: str
    sessionID: str
    role: str
    time: _Time


_envelope = msgspec.json.Decoder(_Envelope)
_part_params = msgspec.json.Decoder(_PartParams)
_message_params = msgspec.json.Decoder(_MessageParams)
_part = msgspec.json.Decoder(_Part)
_message = msgspec.json.Decoder(_Message)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, "
    "created INTEGER NOT NULL, role TEXT NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS messages_by_time ON messages (session_id, created, id)",
    "CREATE TABLE IF NOT EXISTS parts (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, "
    "session_id TEXT NOT NULL, type TEXT NOT NULL, data TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS parts_by_message ON parts (message_id, id)",
)
_UPSERT_PART = (
    "INSERT INTO parts (id, message_id, session_id, type, data) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET type = excluded.type, data = excluded.data"
)
_UPSERT_MESSAGE = (
    "INSERT INTO messages (id, session_id, created, role, data) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET created = excluded.created, role = excluded.role, "
    "data = excluded.data"
)


class DurableProtocol(FramedProtocol):
    def __init__(self, out: asyncio.WriteTransport, done: asyncio.Future[None]) -> None:
        super().__init__(out, done)
        self._db = sqlite3.connect(sys.argv[1], isolation_level="DEFERRED")
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL"):
            self._db.execute(f"PRAGMA {pragma}")
        for statement in _SCHEMA:
            self._db.execute(statement)
        self._db.commit()

    def read_done(self) -> None:
        self._db.commit()

    def on_frame(self, body: bytes) -> bytes:
        env = _envelope.decode(body)
        if env.method == "exit":
            self.finish()
            return b""
        if env.id is None:
            return b""  # a notification
        rid = msgspec.json.encode(env.id)
        if env.method == "part/update":
            raw = bytes(_part_params.decode(env.params).part)
            p = _part.decode(raw)
            self._db.execute(_UPSERT_PART, (p.id, p.messageID, p.sessionID, p.type, raw.decode()))
            note = b'{"jsonrpc":"2.0","method":"part/updated","params":{"part":%b}}' % raw
        elif env.method == "message/update":
            raw = bytes(_message_params.decode(env.params).message)
            m = _message.decode(raw)
            row = (m.id, m.sessionID, m.time.created, m.role, raw.decode())
            self._db.execute(_UPSERT_MESSAGE, row)
            note = b'{"jsonrpc":"2.0","method":"message/updated","params":{"message":%b}}' % raw
        else:
            return frame(b'{"jsonrpc":"2.0","id":%b,"result":{}}' % rid)
        reply = b'{"jsonrpc":"2.0","id":%b,"result":%b}' % (rid, raw)
        return frame(note) + frame(reply)


if __name__ == "__main__":
    asyncio.run(serve_stdio(DurableProtocol))
