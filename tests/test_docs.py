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
    assert ROOT / "PROTOCOL.md" in files and ROOT / "sidecar" / "cli" / "__init__.py" in files
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


def _cells(line: str) -> list[str]:
    """A table row's cells (a ``\\|`` inside a cell is not a separator)."""
    return re.split(r"(?<!\\)\|", line)


def _table_rows() -> dict[str, str]:
    """PROTOCOL.md's method table: each method's row (a row may name two methods)."""
    rows: dict[str, str] = {}
    for line in (ROOT / "PROTOCOL.md").read_text(encoding="utf-8").splitlines():
        if not line.startswith("| `"):
            continue
        first = _cells(line)[1]
        for name in re.findall(r"`([a-z$/]+)`", first):
            rows[name] = line
    return rows


def test_the_method_table_lists_every_param_and_result_field() -> None:
    """Issue 36 item 6: a row names every param of its method (``since`` included), and a row
    whose result is an object literal names every field of the result."""
    import msgspec

    from sidecar.protocol.methods import REQUESTS

    rows = _table_rows()
    missing: list[str] = []
    for spec in REQUESTS:
        if spec.direction != "client->daemon":
            continue
        row = rows.get(spec.method)
        if row is None:
            missing.append(f"{spec.method}: no row")
            continue
        cells = _cells(row)
        params, result = cells[2], "|".join(cells[3:])
        for field in msgspec.structs.fields(spec.params):
            if not re.search(rf"\b{re.escape(field.encode_name)}\b", params):
                missing.append(f"{spec.method}: param {field.encode_name}")
        kind = spec.result
        if result.strip().startswith("`{") and isinstance(kind, type):
            for field in msgspec.structs.fields(kind):
                if not re.search(rf"\b{re.escape(field.encode_name)}\b", result):
                    missing.append(f"{spec.method}: result {field.encode_name}")
    assert not missing, "PROTOCOL.md's method table lacks:\n" + "\n".join(missing)
