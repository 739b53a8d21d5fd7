"""``--format auto``: tell the formats apart by their shape, then read with the right module.

Every file is read through ``common.read_file``: regular files only (a FIFO would block, a
device never ends) and at most ``max_bytes`` each, so what an import reads is bounded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from sidecar.tools.importers import claude_code, opencode, pi, transcript
from sidecar.tools.importers.common import (
    DEFAULT_MAX_BYTES,
    Imported,
    ImportFailure,
    parse_json,
    read_file,
    read_head,
)

Format = Literal["auto", "opencode", "claude-code", "pi", "transcript"]
FORMATS: tuple[Format, ...] = ("auto", "opencode", "claude-code", "pi", "transcript")
_SQLITE = b"SQLite format 3\x00"


def _first_line(data: bytes) -> tuple[int, bytes] | None:
    for n, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            return n, line
    return None


def _is_opencode_dir(path: Path) -> bool:
    return bool(opencode.storage_root(path) or opencode.sqlite_path(path))


def detect(path: Path, max_bytes: int = DEFAULT_MAX_BYTES) -> Format:
    """Which format ``path`` is in; an error says what was seen when none fits."""
    if path.is_dir():
        if _is_opencode_dir(path):
            return "opencode"
        raise ImportFailure(
            f"{path}: a folder without OpenCode storage, opencode.db or *.jsonl sessions"
        )
    if read_head(path, 16) == _SQLITE:
        return "opencode"
    return _detect(path, read_file(path, max_bytes))


def _detect(path: Path, data: bytes) -> Format:
    found = _first_line(data)
    if found is None:
        raise ImportFailure(f"{path}: empty file")
    n, line = found
    try:
        first = parse_json(line, f"{path}:{n}")
    except ImportFailure:
        # Not a JSON line: a whole (pretty-printed) export, or a bad JSONL line.
        stripped = line.strip()
        if stripped.startswith(b"{") and stripped.endswith(b"}"):
            raise  # a JSONL line: the error names it
        whole = parse_json(data, str(path), document=True)
        if opencode.looks_like_export(whole):
            return "opencode"
        raise ImportFailure(
            f"{path}:1: not JSON or JSONL of a known format; give --format"
        ) from None
    if not isinstance(first, dict):
        raise ImportFailure(f"{path}:{n}: expected a JSON object, got {type(first).__name__}")
    if pi.looks_like(first):
        return "pi"
    if claude_code.looks_like(first):
        return "claude-code"
    if transcript.looks_like(first):
        return "transcript"
    if opencode.looks_like_export(first):
        return "opencode"
    keys = [k[:40] for k in sorted(first)[:8]]
    raise ImportFailure(f"{path}:1: unknown format (keys {keys}); give --format")


def units(path: Path) -> list[Path]:
    """What ``read`` reads one by one for ``path``: a folder that is not OpenCode storage is
    its ``*.jsonl`` files (a Claude Code project folder, pi's sessions folder)."""
    if path.is_dir() and not _is_opencode_dir(path):
        files = sorted(path.glob("*.jsonl"))
        if files:
            return files
    return [path]


def read(path: Path, fmt: Format = "auto", max_bytes: int = DEFAULT_MAX_BYTES) -> list[Imported]:
    """Every session in ``path``, fully read and validated (nothing written yet); each file
    at most ``max_bytes``."""
    found = units(path)
    if found != [path]:
        return [imp for f in found for imp in read(f, fmt, max_bytes)]
    if path.is_dir():
        if fmt not in ("auto", "opencode"):
            raise ImportFailure(f"{path}: a folder, not a {fmt} file")
        if not _is_opencode_dir(path):
            detect(path)  # raises: says what the folder lacks
        # A data dir upgraded from 1.1 to 1.2 may hold both: the database is the live one.
        if opencode.sqlite_path(path):
            return opencode.read_sqlite(path)
        return opencode.read_storage(path, max_bytes)
    if read_head(path, 16) == _SQLITE:
        if fmt not in ("auto", "opencode"):
            raise ImportFailure(f"{path}: an SQLite database, not a {fmt} file")
        return opencode.read_sqlite(path)
    data = read_file(path, max_bytes)
    if fmt == "auto":
        fmt = _detect(path, data)
    if fmt == "opencode":
        return opencode.read_export(path, data)
    if fmt == "pi":
        return pi.read(path, data)
    if fmt == "claude-code":
        return claude_code.read(path, data)
    return transcript.read(path, data)
