"""``--format auto``: tell the formats apart by their shape, then read with the right module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from sidecar.tools.importers import claude_code, opencode, pi, transcript
from sidecar.tools.importers.common import Imported, ImportFailure

Format = Literal["auto", "opencode", "claude-code", "pi", "transcript"]
FORMATS: tuple[Format, ...] = ("auto", "opencode", "claude-code", "pi", "transcript")


def _first_object(path: Path) -> dict[str, object] | None:
    with path.open("rb") as f:
        for line in f:
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    return None
                return obj if isinstance(obj, dict) else None
    return None


def detect(path: Path) -> Format:
    """Which format ``path`` is in; an error says what was seen when none fits."""
    if path.is_dir():
        if opencode.storage_root(path) or opencode.sqlite_path(path):
            return "opencode"
        raise ImportFailure(
            f"{path}: a folder without OpenCode storage, opencode.db or *.jsonl sessions"
        )
    if not path.is_file():
        raise ImportFailure(f"{path}: no such file")
    if opencode.looks_like_sqlite(path):
        return "opencode"
    first = _first_object(path)
    if first is None:
        try:
            whole = json.loads(path.read_bytes())
        except ValueError:
            whole = None
        if opencode.looks_like_export(whole):
            return "opencode"
        raise ImportFailure(f"{path}:1: not JSON or JSONL of a known format; give --format")
    if pi.looks_like(first):
        return "pi"
    if claude_code.looks_like(first):
        return "claude-code"
    if transcript.looks_like(first):
        return "transcript"
    if opencode.looks_like_export(first):
        return "opencode"
    raise ImportFailure(f"{path}:1: unknown format (keys {sorted(first)[:8]}); give --format")


def read(path: Path, fmt: Format = "auto") -> list[Imported]:
    """Every session in ``path``, fully read and validated (nothing written yet). A folder
    that is not OpenCode storage is read as its ``*.jsonl`` files (a Claude Code project
    folder, pi's sessions folder), each detected on its own."""
    if path.is_dir() and not (opencode.storage_root(path) or opencode.sqlite_path(path)):
        files = sorted(path.glob("*.jsonl"))
        if files:
            return [imp for f in files for imp in read(f, fmt)]
    if fmt == "auto":
        fmt = detect(path)
    if fmt == "opencode":
        if path.is_dir():
            # A data dir upgraded from 1.1 to 1.2 may hold both: the database is the live one.
            if opencode.sqlite_path(path):
                return opencode.read_sqlite(path)
            return opencode.read_storage(path)
        if opencode.looks_like_sqlite(path):
            return opencode.read_sqlite(path)
        return opencode.read_export(path)
    if fmt == "pi":
        return pi.read(path)
    if fmt == "claude-code":
        return claude_code.read(path)
    return transcript.read(path)
