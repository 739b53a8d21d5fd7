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

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from sidecar.errors import Unavailable
from sidecar.store.backend import Backend, Statement
from sidecar.store.cache import Key
from sidecar.store.pg_schema import BACKFILL_CHUNK as PG_CHUNK
from sidecar.store.schema import BACKFILL_CHUNK as SQLITE_CHUNK

log = logging.getLogger("sidecar.store")

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

#: Candidates fetched per requested hit before the verbatim re-ranking (at least ``POOL_MIN``):
#: on SQLite the newest matches, ranked here rather than by ``bm25``, which weighs every
#: match of a term in the whole database; reading a candidate's text is what a search costs
#: (2,000 candidates of a common word across every session took half a second).
POOL_FACTOR = 4
POOL_MIN = 50
#: Characters of a candidate's text read for ranking and its snippet: a 64 MB output is
#: neither copied out of the database whole nor scanned on the loop.
RANK_CHARS = 20_000
#: The recall tools, whatever a frontend prefixes them with (``compaction-sidecar_``, an MCP
#: client's ``mcp__server__``): a tool whose name ends with one, any case, any one character
#: between its two words (SQL ``LIKE``).
RECALL_TOOLS = ("%history_search", "%history_expand")


def verbatim_of(query: str) -> str:
    """The query as typed, for the verbatim boost: blanks collapsed, lower case, and without
    the quotes around a query that is one quoted phrase."""
    text = query.strip()
    if len(text) > 1 and text[0] == text[-1] == '"' and text.count('"') == 2:
        text = text[1:-1]
    return " ".join(text.split()).lower()


@dataclass(frozen=True)
class Found:
    """A search's best hits; ``partial`` when it ran out of time before it had looked at
    every candidate."""

    hits: list[Hit]
    partial: bool = False


async def search(
    db: Backend,
    session_id: str | None,
    query: str,
    limit: int,
    before: Key | None,
    kinds: Sequence[str] | None,
    *,
    include_recall: bool = False,
    budget: float = 2.0,
) -> Found:
    """The best ``limit`` parts matching every term of ``query`` (``session_id`` None: every
    session), found within ``budget`` seconds.

    Candidates (``POOL_FACTOR`` per hit): on PostgreSQL the index's best (``ts_rank``); on
    SQLite the newest matches of the whole query as one phrase, then, if too few, of its
    terms, scored here (``bm25`` ranks every match, which for a common word over every
    session is most of the database). Then the parts that hold the query verbatim (blanks
    collapsed, any case) move to the front: someone pasting an error line or a command wants
    the part that has exactly that. Unless ``include_recall``, the recall tools' own calls and
    each session's open turn (``open_turn``) are left out. Every query runs on a reader and
    stops at the budget's end; the hits are then the best of what it had, ``partial``.
    """
    terms = terms_of(query)
    if not terms:
        return Found([])
    deadline = time.monotonic() + budget
    scope = _Scope(session_id, before, kinds, include_recall)
    if session_id is not None and not include_recall:
        cut = await open_turn(db, session_id)
        if cut is not None and (before is None or cut < before):
            scope = _Scope(session_id, cut, kinds, include_recall)
    pool = max(limit * POOL_FACTOR, POOL_MIN)
    if db.kind == "postgresql":
        got = await _search_pg(db, scope, terms, pool, deadline)
        rows, partial = got or [], got is None
    else:
        span = None
        if session_id is not None:
            span = await _rowid_span(db, session_id)
            if span is None:
                return Found([])
        rows, partial = await _pool_sqlite(db, scope, terms, pool, span, deadline)
    verbatim = verbatim_of(query)
    quoted = await _in_summaries(db, [r[2] for r in rows], deadline)
    ranked = await asyncio.to_thread(
        _ranked, rows, verbatim, terms, db.kind != "postgresql", quoted
    )
    # Across sessions each one's open turn is left out here (one session's was cut above).
    skip_open = session_id is None and not include_recall
    hits = await _best(db, ranked, limit, [verbatim, *terms], skip_open)
    return Found(hits, partial)


async def _pool_sqlite(
    db: Backend,
    scope: _Scope,
    terms: Sequence[str],
    pool: int,
    span: tuple[int, int] | None,
    deadline: float,
) -> tuple[list[Row], bool]:
    """Up to ``pool`` candidates: the whole query as a phrase, then, if too few, its terms;
    and whether the budget ran out first."""
    rows: list[Row] = []
    for group in ([" ".join(terms)], terms) if len(terms) > 1 else ([" ".join(terms)],):
        if len(rows) >= pool:
            break  # the whole query as a phrase filled the pool: its words alone rank lower
        got = await _search_sqlite(db, scope, group, pool, span, deadline)
        if got is None:
            return rows, True
        seen = {r[2] for r in rows}
        rows += [r for r in got if r[2] not in seen]
    return rows, False


async def _best(
    db: Backend, ranked: list[Row], limit: int, terms: Sequence[str], skip_open: bool
) -> list[Hit]:
    """The first ``limit`` of ``ranked`` as hits, with their snippets; ``skip_open``: not in
    their session's open turn (``open_turn``)."""
    hits: list[Hit] = []
    cuts: dict[str, Key | None] = {}
    for r in ranked:
        if len(hits) == limit:
            break
        if skip_open:
            if r[0] not in cuts:
                cuts[r[0]] = await open_turn(db, r[0])
            cut = cuts[r[0]]
            if cut is not None and Key(r[5], r[1]) >= cut:
                continue
        hits.append((*r[:6], snippet_of(r[6], terms), r[7]))
    return hits


async def _in_summaries(db: Backend, part_ids: Sequence[str], deadline: float) -> frozenset[str]:
    """Which of ``part_ids`` belong to a compaction's summary: a summary quotes what it
    summarized (an error line, a command), and the original is what a search for it wants."""
    if not part_ids:
        return frozenset()
    marks = ", ".join("?" for _ in part_ids)
    rows = await db.query_within(
        "SELECT p.id FROM parts p JOIN messages m ON m.id = p.message_id "
        f"WHERE m.summary_ok = 1 AND p.id IN ({marks})",
        list(part_ids),
        deadline,
    )
    return frozenset(str(r[0]) for r in rows or ())


def _ranked(
    rows: list[Row],
    verbatim: str,
    terms: Sequence[str],
    score: bool,
    quoted: frozenset[str] = frozenset(),
) -> list[Row]:
    """Candidates best first: the verbatim holders, originals before the summaries that quote
    them (``quoted``), then by score. Off the loop: it reads up to ``RANK_CHARS`` of each
    candidate's text."""
    if score:
        rows = _scored(rows, terms)
    return sorted(
        rows,
        key=lambda r: (verbatim not in " ".join(r[6].split()).lower(), r[2] in quoted, -r[7]),
    )


class _Step(msgspec.Struct):
    finish: str | None = None
    error: Any = None


async def open_turn(db: Backend, session_id: str) -> Key | None:
    """Where the session's open turn starts (its latest user message), or ``None`` when that
    turn is over: an assistant step after it finished (a ``finish`` other than a tool call's,
    the rule the daemon's turn end uses) or failed. From there on is the message being
    answered, which recall leaves out."""
    rows = await db.query_point(
        "SELECT created, id FROM messages WHERE session_id = ? AND role = 'user' "
        "ORDER BY created DESC, id DESC LIMIT 1",
        (session_id,),
    )
    if not rows:
        return None
    start = Key(int(rows[0][0]), str(rows[0][1]))
    steps = await db.query_point(
        "SELECT data FROM messages WHERE session_id = ? AND role = 'assistant' "
        "AND (created > ? OR (created = ? AND id > ?))",
        (session_id, start.created, start.created, start.id),
    )
    for (data,) in steps:
        step = msgspec.json.decode(data, type=_Step)
        if step.error is not None or step.finish not in (None, "tool-calls", "unknown"):
            return None
    return start


Row = tuple[str, str, str, str, str | None, int, str, float]
"""``Hit`` with (the start of) the part's indexed text in place of the snippet."""


@dataclass(frozen=True)
class _Scope:
    """The parts a search may return: one session's (None: every session's), older than
    ``before``, of ``kinds`` (None: all), the recall tools' own unless left out."""

    session_id: str | None
    before: Key | None
    kinds: Sequence[str] | None
    include_recall: bool

    def where(
        self, sql: str, args: list[Any], tool: str, session_column: str = "p.session_id"
    ) -> tuple[str, list[Any]]:
        """``sql`` and ``args`` narrowed to the scope (``tool``: the part's tool name in SQL)."""
        if self.session_id is not None:
            sql += f" AND {session_column} = ?"
            args.append(self.session_id)
        if self.kinds:
            sql += " AND p.type IN (" + ",".join("?" * len(self.kinds)) + ")"
            args.extend(self.kinds)
        if self.before is not None:
            sql += " AND (m.created < ? OR (m.created = ? AND m.id < ?))"
            args += [self.before.created, self.before.created, self.before.id]
        if not self.include_recall:
            name = f"lower(coalesce({tool}, ''))"
            sql += (
                " AND NOT (p.type = 'tool' AND ("
                + " OR ".join(f"{name} LIKE ?" for _ in RECALL_TOOLS)
                + "))"
            )
            args.extend(RECALL_TOOLS)
        return sql, args


#: The columns of a ``Row`` up to its text, given how a backend reads a tool part's name.
_HIT = (
    "SELECT p.session_id, p.message_id, p.id, m.role, "
    "CASE WHEN p.type = 'tool' THEN {tool} END, m.created, "
)

#: A tool part's name: the first line of its indexed text (``schema.history_body``), read
#: with it; SQLite parses a part's JSON again for every ``json_extract``.
_LITE_TOOL = "substr(history_fts.body, 1, instr(history_fts.body, char(10)) - 1)"


async def _search_sqlite(
    db: Backend,
    scope: _Scope,
    terms: Sequence[str],
    limit: int,
    span: tuple[int, int] | None,
    deadline: float,
) -> list[Row] | None:
    """The newest ``limit`` matches (FTS5 walks the index backwards by rowid and stops)."""
    sql = (
        _HIT.format(tool=_LITE_TOOL) + f"substr(history_fts.body, 1, {RANK_CHARS}), 0 "
        "FROM history_fts JOIN parts p ON p.rowid = history_fts.rowid "
        "JOIN messages m ON m.id = p.message_id WHERE history_fts MATCH ?"
    )
    match = _fts_query(terms)
    if scope.session_id is not None:
        match = f"sid : {scope.session_id.encode().hex().upper()} AND ({match})"
    args: list[Any] = [match]
    if span is not None:
        sql += " AND history_fts.rowid BETWEEN ? AND ?"
        args += list(span)
    sql, args = scope.where(sql, args, _LITE_TOOL)
    sql += " ORDER BY history_fts.rowid DESC LIMIT ?"
    args.append(limit)
    rows = await db.query_within(sql, args, deadline)
    if rows is None:
        return None
    return [(*r[:7], 0.0) for r in rows]


def _scored(rows: list[Row], terms: Sequence[str]) -> list[Row]:
    """``bm25``'s term-frequency part over the candidates (each term's occurrences, saturating,
    shorter parts first)."""
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


#: A tool part's name: the first line of its indexed text (``sidecar_history_body``), so the
#: part's JSON, a 64 MB output perhaps, is not parsed for it.
_PG_TOOL = "split_part(h.body, E'\\n', 1)"


async def _search_pg(
    db: Backend, scope: _Scope, terms: Sequence[str], limit: int, deadline: float
) -> list[Row] | None:
    # One tsquery of every term's phrase; substrings (ILIKE ALL) for the trigram index, taken
    # only when every term is long enough for trigrams to narrow the scan.
    words = " && ".join(["phraseto_tsquery('simple', ?)"] * len(terms))
    patterns = [_like(t) for t in terms]
    substr = all(len(t) >= 3 for t in terms)
    match = "h.tsv @@ q.q" + (" OR h.body ILIKE ALL (?::text[])" if substr else "")
    sql = (
        _HIT.format(tool=_PG_TOOL) + f"left(h.body, {RANK_CHARS}), "
        "ts_rank(h.tsv, q.q) + CASE WHEN h.body ILIKE ALL (?::text[]) THEN 1 ELSE 0 END "
        f"FROM (SELECT {words} AS q) q, history h JOIN parts p ON p.id = h.part_id "
        f"JOIN messages m ON m.id = p.message_id WHERE ({match})"
    )
    args: list[Any] = [patterns, *terms]
    if substr:
        args.append(patterns)
    sql, args = scope.where(sql, args, _PG_TOOL, "h.session_id")
    sql += " ORDER BY 8 DESC, m.created DESC LIMIT ?"
    args.append(limit)
    rows = await db.query_within(sql, args, deadline)
    if rows is None:
        return None
    return [(*r[:7], float(r[7])) for r in rows]


# -- the first open by a version with the index --------------------------------------------------

#: Parts indexed per op: one chunk is a few milliseconds of the writer's time, so writes
#: queued meanwhile wait no longer than that.
CHUNK_PARTS = 500
#: ``(indexed, total)`` after each chunk (``indexed == total`` at the end).
BackfillReport = Callable[[int, int], None]


async def run_backfill(db: Backend, report: BackfillReport) -> None:
    """``backfill``, logged: how many parts it indexed and how long it took, or why it
    stopped (how far it got is stored: the next open resumes there)."""
    started = time.monotonic()
    try:
        total = await backfill(db, report)
    except Exception as exc:
        if isinstance(exc, Unavailable):
            log.warning("history index: backfill stopped (%s); the next open resumes", exc)
        else:
            log.exception("history index: backfill failed; the next open resumes")
        return
    if total:
        log.warning(
            "history index: indexed %d stored parts in %.1f s", total, time.monotonic() - started
        )


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
