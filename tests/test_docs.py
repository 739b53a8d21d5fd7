"""The repository's docs stand on their own (issue 20 #8): no doc, docstring or comment cites
the design document or the notes the project was built from, which live outside the
repository; the contract is written into PROTOCOL.md instead."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import ROOT

#: Citations of material outside the repository.
OUTSIDE = re.compile(r"\bDESIGN\b|\.\./shared\b|opencode-facts")

SKIP = {"node_modules", ".git", "dist", "out", ".venv", ".venv-ci", "build"}


def _files() -> list[Path]:
    found = list(ROOT.rglob("*.md"))
    for folder in ("sidecar", "clients", "bench", "contrib"):
        for ext in ("*.py", "*.ts"):
            found += (ROOT / folder).rglob(ext)
    found.append(ROOT / "pyproject.toml")
    return sorted(p for p in set(found) if not SKIP & set(p.relative_to(ROOT).parts))


def test_docs_and_sources_cite_only_files_in_the_repository() -> None:
    files = _files()
    assert ROOT / "PROTOCOL.md" in files and ROOT / "sidecar" / "cli.py" in files
    hits = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in files
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if OUTSIDE.search(line)
    ]
    assert not hits, "cites material outside the repository:\n" + "\n".join(hits)


def test_protocol_md_holds_the_contract() -> None:
    """Every method of the method table is documented in PROTOCOL.md, and so is a full turn."""
    from sidecar.protocol.methods import NOTIFICATIONS, REQUESTS

    text = (ROOT / "PROTOCOL.md").read_text(encoding="utf-8")
    names = [r.method for r in REQUESTS] + [n.method for n in NOTIFICATIONS]
    missing = [name for name in names if not re.search(f"`{re.escape(name)}[` ]", text)]
    assert not missing, f"methods PROTOCOL.md does not document: {missing}"
    assert "## Worked example: one full turn" in text
