"""OpenCode sessions: ``opencode export`` JSON, the 1.1.x JSON file tree, the >= 1.2 SQLite db.

OpenCode's MessageV2 is the store's own data model (PROTOCOL.md), so messages and parts are
stored as OpenCode wrote them: ids, times, tool states, compaction markers and summaries
unchanged, which is what makes the imported session's ``session/context`` the window
OpenCode would send next. Only the 1.2 database keeps ids outside the JSON; they are put back.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from sidecar.store import opencode_db
from sidecar.tools.importers.common import (
    Imported,
    ImportFailure,
    decode_session,
    line_of,
    parse_json,
    read_file,
    read_head,
)

SOURCE_EXPORT = "opencode-export"
SOURCE_STORAGE = "opencode-storage"
SOURCE_SQLITE = "opencode-sqlite"


class _ExportMessage(msgspec.Struct):
    info: msgspec.Raw
    parts: list[msgspec.Raw] = msgspec.field(default_factory=list)


class _Export(msgspec.Struct):
    info: msgspec.Raw
    messages: list[_ExportMessage]


_export = msgspec.json.Decoder(_Export)


def looks_like_export(head: Any) -> bool:
    return (
        isinstance(head, dict)
        and isinstance(head.get("info"), dict)
        and isinstance(head.get("messages"), list)
        and str(head["info"].get("id", "")).startswith("ses")
    )


def read_export(path: Path, data: bytes) -> list[Imported]:
    """``opencode export SESSION`` output (1.1.x): ``{info, messages: [{info, parts}]}``."""
    parse_json(data, str(path), document=True)  # depth, UTF-8, syntax first: msgspec recurses
    try:
        doc = _export.decode(data)
    except msgspec.ValidationError as exc:
        raise ImportFailure(f"{path}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ImportFailure(f"{path}: {line_of(data, exc)}") from None
    out = Imported(SOURCE_EXPORT, decode_session(bytes(doc.info), f"{path}: info"))
    for i, m in enumerate(doc.messages):
        where = f"{path}: messages[{i}]"
        out.add_message(bytes(m.info), f"{where}.info")
        for j, p in enumerate(m.parts):
            out.add_part(bytes(p), f"{where}.parts[{j}]")
    out.check(str(path))
    return [out]


# -- 1.1.x storage tree --------------------------------------------------------------------------


def storage_root(path: Path) -> Path | None:
    """``.../storage`` for a 1.1.x data dir, its ``storage`` folder, or None."""
    for root in (path, path / "storage", path / "opencode" / "storage"):
        if (root / "session").is_dir() and (root / "message").is_dir():
            return root
    return None


def _read_json(path: Path, limit: int) -> bytes:
    data = read_file(path, limit)
    parse_json(data, str(path), document=True)
    return data


def _file_name(value: str, where: Path, what: str) -> str:
    """An id used as a folder name must be one: no separators, no ``..``."""
    if not value or value in (".", "..") or "/" in value or "\\" in value or "\x00" in value:
        raise ImportFailure(f"{where}: {what}: field 'id': {value[:60]!r} is not a valid id")
    return value


def read_storage(path: Path, limit: int) -> list[Imported]:
    """Every session under a 1.1.x ``storage`` tree: ``session/<project>/<id>.json``,
    ``message/<session>/<id>.json``, ``part/<message>/<id>.json``."""
    root = storage_root(path)
    if root is None:
        raise ImportFailure(f"{path}: not an OpenCode storage folder (no session/ and message/)")
    out: list[Imported] = []
    for file in sorted(root.glob("session/*/*.json")):
        session = decode_session(_read_json(file, limit), str(file))
        imp = Imported(SOURCE_STORAGE, session)
        sid = _file_name(session.id, file, "session")
        for mfile in sorted((root / "message" / sid).glob("*.json")):
            msg = imp.add_message(_read_json(mfile, limit), str(mfile))
            for pfile in sorted(
                (root / "part" / _file_name(msg.id, mfile, "message")).glob("*.json")
            ):
                imp.add_part(_read_json(pfile, limit), str(pfile))
        out.append(imp)
    if not out:
        raise ImportFailure(f"{path}: no sessions in {root}/session/")
    return out


# -- >= 1.2 SQLite ------------------------------------------------------------------------------


def looks_like_sqlite(path: Path) -> bool:
    return read_head(path, 16) == b"SQLite format 3\x00"


def sqlite_path(path: Path) -> Path | None:
    """``opencode.db`` itself, or the data dir holding it."""
    for candidate in (path, path / "opencode.db", path / "opencode" / "opencode.db"):
        if candidate.is_file() and looks_like_sqlite(candidate):
            return candidate
    return None


def _rows(rows: Iterator[Any]) -> Iterator[Any]:
    try:
        yield from rows
    except sqlite3.DatabaseError as exc:
        raise ImportFailure(f"not an OpenCode >= 1.2 database: {exc}") from None


def _with_ids(data: Any, where: str, **ids: str) -> dict[str, Any]:
    if not isinstance(data, str | bytes):
        raise ImportFailure(f"{where}: data: expected JSON text")
    obj = parse_json(data.encode() if isinstance(data, str) else data, f"{where}: data")
    if not isinstance(obj, dict):
        raise ImportFailure(f"{where}: data: expected an object")
    return {**ids, **obj}


def read_sqlite(path: Path) -> list[Imported]:
    """Every session of an OpenCode >= 1.2 ``opencode.db`` (tables session, message, part;
    ids in columns, the rest of MessageV2 in ``data``). Opened read-only."""
    db = sqlite_path(path)
    if db is None:
        raise ImportFailure(f"{path}: not an SQLite database")
    conn = opencode_db.open_readonly(db)
    try:
        out: list[Imported] = []
        sessions = list(_rows(opencode_db.sessions(conn)))
        for sid, parent, title, directory, revert, created, updated in sessions:
            where = f"{db}: session {sid}"
            info: dict[str, Any] = {
                "id": sid,
                "title": title,
                "directory": directory,
                "time": {"created": created, "updated": updated},
            }
            if parent:
                info["parentID"] = parent
            if revert:
                info["revert"] = _with_ids(revert, f"{where}: revert")
            imp = Imported(SOURCE_SQLITE, decode_session(info, where))
            for mid, data in _rows(opencode_db.messages(conn, sid)):
                imp.add_message(
                    _with_ids(data, f"{db}: message {mid}", id=mid, sessionID=sid),
                    f"{db}: message {mid}",
                )
            for pid, mid, data in _rows(opencode_db.parts(conn, sid)):
                imp.add_part(
                    _with_ids(data, f"{db}: part {pid}", id=pid, sessionID=sid, messageID=mid),
                    f"{db}: part {pid}",
                )
            imp.check(str(db))
            out.append(imp)
        return out
    finally:
        conn.close()
