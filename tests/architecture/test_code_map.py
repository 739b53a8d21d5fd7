"""Every path ARCHITECTURE.md names exists: the code map's first column, and each backticked
file or folder (``pkg/``, ``name.py``) of the page.

A bare file name in a package's bullet (``- **`store/`**: `store.py` ...``, ``- `store` →``)
or beside a code-map entry is looked for in that package, elsewhere anywhere in ``sidecar/``;
a path with a folder from the repository's root or from ``sidecar/``.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import ROOT

DOC = ROOT / "ARCHITECTURE.md"
_TICKED = re.compile(r"`([A-Za-z0-9_./-]+(?:\.py|/))`")
_BULLET = re.compile(r"^- (?:\*\*`([A-Za-z0-9_]+)/`\*\*|`([A-Za-z0-9_]+)` →)")
_MAP_ENTRY = re.compile(r"^([a-z][A-Za-z0-9_./-]*)\s")


def _exists(path: str, package: Path | None) -> bool:
    if "/" in path:
        bases = (ROOT, ROOT / "sidecar", *([package] if package is not None else []))
        return any((base / path).exists() for base in bases)
    if package is not None:
        return (package / path).exists()
    return any((ROOT / "sidecar").rglob(path))


def named_paths(text: str) -> list[tuple[str, Path | None]]:
    """(path, the package it is relative to, if any) for every path the page names."""
    found: list[tuple[str, Path | None]] = []
    in_map = False
    package: Path | None = None
    for line in text.splitlines():
        if line.startswith("```"):
            in_map = not in_map
            package = None
            continue
        if in_map:
            entry = _MAP_ENTRY.match(line)
            if entry:
                found.append((entry.group(1), None))
                package = ROOT / entry.group(1) if entry.group(1).endswith("/") else None
        elif (bullet := _BULLET.match(line)) is not None:
            package = ROOT / "sidecar" / (bullet.group(1) or bullet.group(2))
        elif not line.startswith("  "):
            package = None
        found += [(path, package) for path in _TICKED.findall(line)]
    return found


def test_the_code_map_names_only_paths_that_exist() -> None:
    text = DOC.read_text(encoding="utf-8")
    names = named_paths(text)
    assert ("sidecar/model/", None) in names  # the map is read
    missing = [path for path, package in names if not _exists(path, package)]
    assert missing == []


def test_a_missing_path_is_found() -> None:
    """The checker can fail: a moved module named in the map is reported."""
    text = "```\nsidecar/gone.py   a module that moved\n```\n- **`store/`**: `nope.py`\n"
    names = named_paths(text)
    assert [p for p, pkg in names if not _exists(p, pkg)] == ["sidecar/gone.py", "nope.py"]
