"""History search and expand: the queries behind ``history/search`` and ``history/expand``.

The index itself is schema (``schema.HISTORY_INDEX``, ``pg_schema.HISTORY_INDEX``): triggers
keep it in the part's own transaction. Here a query is split into *terms* (a ``"quoted
phrase"`` is one term, otherwise each blank-separated word), every term must match, and the
best hits come first:

* SQLite: each term is an FTS5 phrase of its words (``src/pkg/mod.py`` is the phrase
  ``src pkg mod py``), ranked by ``bm25``; the snippet is FTS5's.
* PostgreSQL: each term is a ``phraseto_tsquery('simple', term)`` over the GIN-indexed
  tsvector, or, where words are not enough (the parser keeps ``src/pkg/mod.py`` whole, so
  ``mod.py`` is not one of its words), a case-insensitive substring through the trigram index;
  ranked by ``ts_rank`` with exact substrings first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from sidecar.store.backend import Backend, Statement
from sidecar.store.cache import Key
from sidecar.store.pg_schema import BACKFILL_CHUNK as PG_CHUNK
from sidecar.store.schema import BACKFILL_CHUNK as SQLITE_CHUNK

SNIPPET_CHARS = 160
_TERMS = re.compile(r'"([^"]*)"|(\S+)')


def terms_of(query: str) -> list[str]:
    """The terms of a query: quoted phrases whole, other words one by one; terms without a
    letter or digit (they could match nothing) are dropped."""
    out: list[str] = []
    for quoted, word in _TERMS.findall(query):
        term = (quoted or word).strip()
        if any(ch.isalnum() for ch in term):
            out.append(term)
    return out


def _fts_query(terms: Sequence[str]) -> str:
    return " ".join('"' + t.replace('"', '""') + '"' for t in terms)


def _like(term: str) -> str:
    return "%" + term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def snippet_of(body: str, terms: Sequence[str]) -> str:
    """About ``SNIPPET_CHARS`` characters of ``body`` around the first term found in it."""
    low = body.lower()
    at = -1
    for term in terms:
        at = low.find(term.lower())
        if at >= 0:
            break
    start = max(0, at - SNIPPET_CHARS // 3) if at >= 0 else 0
    text = body[start : start + SNIPPET_CHARS]
    text = " ".join(text.split())
    return ("…" if start > 0 else "") + text + ("…" if start + SNIPPET_CHARS < len(body) else "")


Hit = tuple[str, str, str, str, str | None, int, str, float]
"""``(session, message, part, role, tool, time, snippet, score)``."""

#: Candidates fetched per requested hit before the verbatim re-ranking (at least ``POOL_MIN``).
POOL_FACTOR = 4
POOL_MIN = 50
#: Matches of a one-session search ranked (its newest); ``bm25`` is not asked there.
SESSION_CAP = 2000


def verbatim_of(query: str) -> str:
    """The query as typed, for the verbatim boost: blanks collapsed, lower case, and without
    the quotes around a query that is one quoted phrase."""
    text = query.strip()
    if len(text) > 1 and text[0] == text[-1] == '"' and text.count('"') == 2:
        text = text[1:-1]
    return " ".join(text.split()).lower()


async def search(
    db: Backend,
    session_id: str | None,
    query: str,
    limit: int,
    before: Key | None,
    kinds: Sequence[str] | None,
) -> list[Hit]:
    """The best ``limit`` parts matching every term of ``query`` (``session_id`` None: every
    session).

    The index ranks the candidates (``bm25`` / ``ts_rank``); then the parts that hold the
    query verbatim (blanks collapsed, any case) move to the front, in that order. Someone
    pasting an error line or a command wants the part that has exactly that, not the one
    where its words are most frequent. On SQLite the candidates also include the best matches
    of the whole query as one phrase, so a verbatim match is not crowded out of the pool by
    parts that only have its words somewhere.
    """
    terms = terms_of(query)
    if not terms:
        return []
    pool = max(limit * POOL_FACTOR, POOL_MIN)
    scope = _Scope(session_id, before, kinds)
    if db.kind == "postgresql":
        rows = await _search_pg(db, scope, terms, pool)
    else:
        span = None
        if session_id is not None:
            span = await _rowid_span(db, session_id)
            if span is None:
                return []
        # One session: its matches, newest first up to SESSION_CAP, ranked here (``bm25``
        # would count each term's matches over the whole database for its weights).
        size = pool if span is None else SESSION_CAP
        rows = await _search_sqlite(db, scope, [" ".join(terms)], size, span)
        if len(terms) > 1 or len(rows) >= size:
            seen = {r[2] for r in rows}
            more = await _search_sqlite(db, scope, terms, size, span)
            rows += [r for r in more if r[2] not in seen]
        if span is not None:
            rows = _scored(rows, terms)
    verbatim = verbatim_of(query)
    ranked = sorted(rows, key=lambda r: (verbatim not in " ".join(r[6].split()).lower(), -r[7]))[
        :limit
    ]
    return [(*r[:6], snippet_of(r[6], [verbatim, *terms]), r[7]) for r in ranked]


Row = tuple[str, str, str, str, str | None, int, str, float]
"""``Hit`` with the part's whole indexed text in place of the snippet."""


@dataclass(frozen=True)
class _Scope:
    """The parts a search may return: one session's (None: every session's), older than
    ``before``, of ``kinds`` (None: all)."""

    session_id: str | None
    before: Key | None
    kinds: Sequence[str] | None

    def where(
        self, sql: str, args: list[Any], session_column: str = "p.session_id"
    ) -> tuple[str, list[Any]]:
        """``sql`` and ``args`` narrowed to the scope."""
        if self.session_id is not None:
            sql += f" AND {session_column} = ?"
            args.append(self.session_id)
        if self.kinds:
            sql += " AND p.type IN (" + ",".join("?" * len(self.kinds)) + ")"
            args.extend(self.kinds)
        if self.before is not None:
            sql += " AND (m.created, m.id) < (?, ?)"
            args += [self.before.created, self.before.id]
        return sql, args


async def _search_sqlite(
    db: Backend, scope: _Scope, terms: Sequence[str], limit: int, span: tuple[int, int] | None
) -> list[Row]:
    sql = (
        "SELECT p.session_id, p.message_id, p.id, m.role, "
        "CASE WHEN p.type = 'tool' THEN json_extract(p.data, '$.tool') END, m.created, "
        "history_fts.body, bm25(history_fts, 1.0, 0.0) "
        "FROM history_fts JOIN parts p ON p.rowid = history_fts.rowid "
        "JOIN messages m ON m.id = p.message_id WHERE history_fts MATCH ?"
    )
    match = _fts_query(terms)
    if scope.session_id is not None:
        match = f"sid : {scope.session_id.encode().hex().upper()} AND ({match})"
    args: list[Any] = [match]
    if span is not None:
        sql = sql.replace("bm25(history_fts, 1.0, 0.0)", "0")
        sql += " AND history_fts.rowid BETWEEN ? AND ?"
        args += list(span)
    sql, args = scope.where(sql, args)
    if span is None:
        sql += " ORDER BY bm25(history_fts, 1.0, 0.0) LIMIT ?"
    else:
        sql += " ORDER BY history_fts.rowid DESC LIMIT ?"
    args.append(limit)
    rows = await db.query(sql, args)
    return [(*r[:7], -float(r[7])) for r in rows]


def _scored(rows: list[Row], terms: Sequence[str]) -> list[Row]:
    """``bm25``'s term-frequency part over the candidates (each term's occurrences, saturating,
    shorter parts first), for a one-session search that skipped ``bm25``."""
    if not rows:
        return rows
    lows = [r[6].lower() for r in rows]
    average = sum(len(b) for b in lows) / len(lows) or 1.0
    wanted = [t.lower() for t in terms]
    out: list[Row] = []
    for r, body in zip(rows, lows, strict=True):
        norm = 1.2 * (0.25 + 0.75 * len(body) / average)
        score = 0.0
        for term in wanted:
            tf = body.count(term)
            score += tf * 2.2 / (tf + norm) if tf else 0.1  # matched by its words only
        out.append((*r[:7], round(score, 6)))
    return out


async def _rowid_span(db: Backend, session_id: str) -> tuple[int, int] | None:
    """The first and last rowid of a session's parts. FTS5 walks a term's entries in rowid
    order and can start and stop at given rowids, so a one-session search reads only the
    stretch of the index its session was written in, not every session's entries of a common
    word (its ``sid`` token alone does not narrow the walk)."""
    rows = await db.query(
        "SELECT min(p.rowid), max(p.rowid) FROM messages m JOIN parts p ON p.message_id = m.id "
        "WHERE m.session_id = ?",
        (session_id,),
    )
    if not rows or rows[0][0] is None:
        return None
    return int(rows[0][0]), int(rows[0][1])


async def _search_pg(db: Backend, scope: _Scope, terms: Sequence[str], limit: int) -> list[Row]:
    # One tsquery of every term's phrase; substrings (ILIKE ALL) for the trigram index, taken
    # only when every term is long enough for trigrams to narrow the scan.
    words = " && ".join(["phraseto_tsquery('simple', ?)"] * len(terms))
    patterns = [_like(t) for t in terms]
    substr = all(len(t) >= 3 for t in terms)
    match = "h.tsv @@ q.q" + (" OR h.body ILIKE ALL (?::text[])" if substr else "")
    sql = (
        "SELECT p.session_id, p.message_id, p.id, m.role, "
        "CASE WHEN p.type = 'tool' THEN p.data::jsonb->>'tool' END, m.created, h.body, "
        "ts_rank(h.tsv, q.q) + CASE WHEN h.body ILIKE ALL (?::text[]) THEN 1 ELSE 0 END "
        f"FROM (SELECT {words} AS q) q, history h JOIN parts p ON p.id = h.part_id "
        f"JOIN messages m ON m.id = p.message_id WHERE ({match})"
    )
    args: list[Any] = [patterns, *terms]
    if substr:
        args.append(patterns)
    sql, args = scope.where(sql, args, "h.session_id")
    sql += " ORDER BY 8 DESC, m.created DESC LIMIT ?"
    args.append(limit)
    rows = await db.query(sql, args)
    return [(*r[:7], float(r[7])) for r in rows]


# -- the first open by a version with the index --------------------------------------------------

#: Parts indexed per op: one chunk is a few milliseconds of the writer's time, so writes
#: queued meanwhile wait no longer than that.
CHUNK_PARTS = 500
#: ``(indexed, total)`` after each chunk (``indexed == total`` at the end).
BackfillReport = Callable[[int, int], None]


async def backfill(db: Backend, report: BackfillReport) -> int:
    """Index the parts stored before the index existed (``history_backfill`` says which);
    returns how many were left to index (0: nothing to do). Chunk by chunk, each one op of the
    group commit that also records how far it got, so an interrupted backfill resumes."""
    rows = await db.query("SELECT done, upto FROM history_backfill")
    if not rows:
        return 0
    done, upto = rows[0]
    pg = db.kind == "postgresql"
    key = "id" if pg else "rowid"
    chunk_sql = PG_CHUNK if pg else SQLITE_CHUNK
    count = await db.query(
        f"SELECT count(*) FROM parts WHERE {key} > ? AND {key} <= ?", (done, upto)
    )
    total = int(count[0][0])
    indexed = 0
    report(indexed, total)
    while True:
        nxt = await db.query(
            f"SELECT {key} FROM parts WHERE {key} > ? AND {key} <= ? ORDER BY {key} "
            "LIMIT 1 OFFSET ?",
            (done, upto, CHUNK_PARTS - 1),
        )
        end = nxt[0][0] if nxt else upto
        last = end == upto
        statements: list[Statement] = [(chunk_sql, [(done, end)])]
        if last:
            statements.append(("DELETE FROM history_backfill WHERE upto = ?", [(upto,)]))
        else:
            statements.append(("UPDATE history_backfill SET done = ?", [(end,)]))
        await db.submit(statements)
        indexed = total if last else min(total, indexed + CHUNK_PARTS)
        report(indexed, total)
        if last:
            return total
        done = end


# -- expand --------------------------------------------------------------------------------------


def part_content(data: str) -> str | None:
    """What ``history/expand`` shows of a stored part: a text or reasoning part's text; a tool
    call's name, input (JSON), title, and output or error in full (pruned or not). ``None``
    for kinds that hold no searchable content."""
    doc = msgspec.json.decode(data)
    if not isinstance(doc, dict):
        return None
    kind = doc.get("type")
    if kind in ("text", "reasoning"):
        text = doc.get("text")
        return text if isinstance(text, str) else ""
    if kind != "tool":
        return None
    raw_state = doc.get("state")
    state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
    lines = [f"tool: {doc.get('tool', '')}"]
    if "input" in state:
        lines.append("input: " + msgspec.json.encode(state["input"]).decode())
    if isinstance(state.get("title"), str) and state["title"]:
        lines.append(f"title: {state['title']}")
    if isinstance(state.get("output"), str):
        lines.append("output:\n" + state["output"])
    if isinstance(state.get("error"), str):
        lines.append("error:\n" + state["error"])
    return "\n".join(lines)
