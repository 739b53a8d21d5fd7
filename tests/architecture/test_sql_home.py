"""SQL lives in the store package only, each statement once (issue 33).

A string constant of ``sidecar/`` (a docstring aside) is SQL when it starts, in any case,
with a statement's keyword followed by what SQL puts after it: ``SELECT`` with a ``FROM``
or a function call, ``INSERT INTO``, ``UPDATE <table> SET``, ``DELETE FROM``, ``CREATE
TABLE|INDEX|TRIGGER|...``, ``WITH <name> AS (``. An f-string is read with its holes empty.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = ROOT / "sidecar"
STORE = SIDECAR / "store"

SQL = re.compile(
    r"""^\s*(
        select\s+(.*\bfrom\b|[\w.]+\s*\(|\d)
      | insert\s+(or\s+\w+\s+)?into\s
      | update\s+\w+\s+set\s
      | delete\s+from\s
      | create\s+(or\s+replace\s+|unique\s+|virtual\s+|temp\w*\s+)*
          (table|index|trigger|function|view|extension)\b
      | with\s+(recursive\s+)?\w+\s+as\s*\(
    )""",
    re.IGNORECASE | re.VERBOSE | re.DOTALL,
)


def _docstrings(tree: ast.AST) -> set[int]:
    """Ids of the docstring nodes of a module, its classes and functions."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every string constant but the docstrings; an f-string's holes
    empty, its pieces not counted again on their own."""
    skip = _docstrings(tree)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = ""
            for value in node.values:
                skip.add(id(value))
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    text += value.value
            out.append((node.lineno, text))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out.append((node.lineno, node.value))
    return out


def sql_strings(root: Path) -> dict[str, list[str]]:
    """SQL statements under ``root`` (whitespace collapsed) -> where each one is written."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for line, text in _strings(ast.parse(path.read_text(), str(path))):
            if SQL.match(text):
                found[" ".join(text.split())].append(f"{path.relative_to(ROOT)}:{line}")
    return found


def test_the_detector_knows_sql_from_prose() -> None:
    for sql in (
        "SELECT id FROM parts",
        "select count(*) from x",
        "SELECT pg_notify(?, ?)",
        "INSERT OR IGNORE INTO t (a) VALUES (1)",
        "UPDATE parts SET data = ? WHERE id = ?",
        "delete from pins",
        "CREATE VIRTUAL TABLE t USING fts5 (body)",
        "WITH r AS (INSERT INTO relay (data) VALUES (?) RETURNING id) SELECT 1",
    ):
        assert SQL.match(sql), sql
    for prose in ("create", "insert", "Delete what the armed revert hides", "with --listen: x"):
        assert not SQL.match(prose), prose


def test_the_store_package_holds_the_sql() -> None:
    """The detector sees the store's statements (it would pass vacuously otherwise)."""
    assert len(sql_strings(STORE)) > 50


def test_no_sql_outside_the_store_package() -> None:
    outside = {
        sql: [w for w in where if not w.startswith("sidecar/store/")]
        for sql, where in sql_strings(SIDECAR).items()
    }
    assert {sql: where for sql, where in outside.items() if where} == {}


def test_each_statement_is_written_once() -> None:
    twice = {sql: where for sql, where in sql_strings(STORE).items() if len(where) > 1}
    assert twice == {}


def test_the_store_face_holds_no_sql() -> None:
    """``Store`` delegates to the feature modules; the statements are theirs."""
    face = [w for where in sql_strings(STORE).values() for w in where]
    assert [w for w in face if w.startswith("sidecar/store/store.py:")] == []
