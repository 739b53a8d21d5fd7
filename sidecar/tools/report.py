"""``report``: one self-contained HTML page for a session (no scripts, fonts or links to fetch).

An inline SVG chart plots the context per turn (the engine's estimate, and what the provider
reported when it did) against the model window, with a marker at each compaction and prune;
tables and the summaries follow. Everything is escaped: session text is untrusted.
"""

from __future__ import annotations

import datetime as dt
from html import escape

from sidecar.model.inspect import Inspection
from sidecar.model.rpc import Diagnostics

WIDTH, HEIGHT = 960, 380
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 44, 50

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;
max-width:1000px;color:#1d2330;background:#fff;padding:0 16px}
h1{font-size:1.4em;margin:0 0 4px}h2{font-size:1.1em;margin:28px 0 8px}
.meta{color:#596273;font-size:.9em;margin:0 0 16px}
.meta span{margin-right:18px;white-space:nowrap;display:inline-block}
table{border-collapse:collapse;font-size:.88em}
td,th{padding:3px 10px;border-bottom:1px solid #e3e6eb;text-align:right}
th{background:#f4f6f9}td.l,th.l{text-align:left}
.summary{white-space:pre-wrap;background:#f7f8fa;border-left:4px solid #7b57c9;padding:10px 14px;
font-size:.88em;margin:8px 0 18px;overflow-wrap:anywhere}
svg text{font-size:11px;fill:#596273}.legend text{font-size:12px;fill:#1d2330}
"""

COLORS = {
    "context": "#2f6fd6",
    "reported": "#8a94a6",
    "window": "#d64545",
    "usable": "#e09a2f",
    "compaction": "#7b57c9",
    "prune": "#2a9d6a",
}


def _fmt(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


def _when(ms: int) -> str:
    if not ms:
        return "—"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _nice_max(v: int) -> int:
    """A round top for the y axis at or above ``v`` (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 x 10^k),
    so the highest point uses most of the chart's height."""
    v = max(v, 1)
    step = 1
    while True:
        for m in (10, 12, 15, 20, 25, 30, 40, 50, 60, 80):
            if step * m >= v * 10:
                return step * m // 10 if step * m % 10 == 0 else -(-step * m // 10)
        step *= 10


def chart(ins: Inspection) -> str:
    """The SVG: one polyline per series, one ``<g class="marker ...">`` per event."""
    turns = ins.turns
    n = max(len(turns), 1)
    values = [t.context_tokens for t in turns]
    values += [t.reported_tokens for t in turns if t.reported_tokens is not None]
    values += [c.before for c in ins.compactions]
    if ins.window:
        values.append(ins.window)
    top = _nice_max(int(max(values, default=1) * 1.05))
    pw, ph = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(turn: float) -> float:
        return LEFT + (pw * (turn - 1) / (n - 1) if n > 1 else pw / 2)

    def y(v: float) -> float:
        return TOP + ph - ph * v / top

    out: list[str] = [
        f'<svg width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="context tokens per turn">',
        f'<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="#fbfcfd" stroke="#d5d9e0"/>',
    ]
    for i in range(6):
        v = top * i / 5
        out.append(
            f'<line x1="{LEFT}" x2="{LEFT + pw}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#eceef2"/>'
            f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{int(v):,}</text>'
        )
    every = max(1, n // 10)
    ticks = list(range(1, n + 1, every))
    if n - ticks[-1] >= max(1, every // 2):
        ticks.append(n)
    for t in ticks:
        out.append(f'<text x="{x(t):.1f}" y="{TOP + ph + 16}" text-anchor="middle">{t}</text>')
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{HEIGHT - 8}" text-anchor="middle">turn (model call)</text>'
    )
    for name, limit in (("window", ins.window), ("usable", ins.usable)):
        if limit:
            dash = "8 4" if name == "window" else "3 3"
            out.append(
                f'<line class="limit {name}" x1="{LEFT}" x2="{LEFT + pw}" y1="{y(limit):.1f}" '
                f'y2="{y(limit):.1f}" stroke="{COLORS[name]}" stroke-dasharray="{dash}"/>'
            )
    for c_i, c in enumerate(ins.compactions, 1):
        cx = x(min(max(c.turn + 0.5, 1), n))
        out.append(
            f'<g class="marker compaction" data-id="{escape(c.marker_id)}">'
            f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{TOP}" y2="{TOP + ph}" '
            f'stroke="{COLORS["compaction"]}" stroke-width="1.5"/>'
            f'<circle cx="{cx:.1f}" cy="{y(c.before):.1f}" r="4" fill="{COLORS["compaction"]}"/>'
            f'<circle cx="{cx:.1f}" cy="{y(c.after):.1f}" r="4" fill="#fff" '
            f'stroke="{COLORS["compaction"]}" stroke-width="2"/>'
            f'<text x="{cx + 4:.1f}" y="{TOP + 12}" fill="{COLORS["compaction"]}">C{c_i}</text>'
            f"<title>compaction {c_i}{' (auto)' if c.auto else ''}: "
            f"{c.before:,} -&gt; {c.after:,} tokens</title></g>"
        )
    for p in ins.prunes:
        px = x(min(max(p.turn + 0.5, 1), n))
        py = TOP + ph - 8
        out.append(
            f'<g class="marker prune" data-time="{p.time}">'
            f'<path d="M{px:.1f} {py - 6:.1f} L{px + 6:.1f} {py:.1f} L{px:.1f} {py + 6:.1f} '
            f'L{px - 6:.1f} {py:.1f} Z" fill="{COLORS["prune"]}"/>'
            f"<title>prune: {len(p.part_ids)} tool outputs, {p.tokens_saved:,} tokens</title></g>"
        )
    series = [("context", [(t.turn, t.context_tokens) for t in turns])]
    reported = [(t.turn, t.reported_tokens) for t in turns if t.reported_tokens is not None]
    if reported:
        series.append(("reported", reported))
    for name, pts in series:
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        dash = ' stroke-dasharray="5 3"' if name == "reported" else ""
        out.append(
            f'<polyline class="series {name}" fill="none" stroke="{COLORS[name]}" '
            f'stroke-width="2"{dash} points="{coords}"/>'
        )
    out.append(_legend(ins, bool(reported)))
    out.append("</svg>")
    return "".join(out)


def _legend(ins: Inspection, reported: bool) -> str:
    items = [("context", "context (estimate)", "line")]
    if reported:
        items.append(("reported", "reported by provider", "line"))
    if ins.window:
        items.append(("window", "model window", "line"))
    if ins.usable:
        items.append(("usable", "usable input", "line"))
    if ins.compactions:
        items.append(("compaction", "compaction (filled: before, hollow: after)", "dot"))
    if ins.prunes:
        items.append(("prune", "prune", "dot"))
    parts = ['<g class="legend">']
    lx = LEFT
    ly = TOP - 16
    for key, label, kind in items:
        color = COLORS[key]
        if kind == "line":
            parts.append(
                f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" stroke="{color}" '
                f'stroke-width="2"/>'
            )
        else:
            parts.append(f'<circle cx="{lx + 9}" cy="{ly - 4}" r="4" fill="{color}"/>')
        parts.append(f'<text x="{lx + 24}" y="{ly}">{escape(label)}</text>')
        lx += 36 + int(6.8 * len(label))
    parts.append("</g>")
    return "".join(parts)


def render(ins: Inspection) -> str:
    s = ins.session
    title = escape(s.title or s.id)
    current = s.estimated_tokens
    meta = [
        ("session", escape(s.id)),
        ("model", escape(ins.model or "unknown")),
        ("window", _fmt(ins.window)),
        ("current context", _fmt(current)),
        ("messages", _fmt(s.messages)),
        ("last activity", _when(s.last_activity)),
    ]
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title} — compaction-sidecar report</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        '<p class="meta">' + "".join(f"<span><b>{k}</b> {v}</span>" for k, v in meta) + "</p>",
        '<h2>Context per turn</h2><div class="chart">',
        chart(ins) if ins.turns else "<p>No model calls in this session yet.</p>",
        "</div>",
        _compaction_table(ins),
        _prune_table(ins),
        _summaries(ins),
        "</body></html>",
    ]
    return "\n".join(body) + "\n"


def _compaction_table(ins: Inspection) -> str:
    rows = [
        f"<tr><td>C{i}</td><td>{c.turn}</td><td class='l'>{'auto' if c.auto else 'manual'}</td>"
        f"<td>{c.before:,}</td><td>{c.after:,}</td><td>{len(c.replaced_ids)}</td>"
        f"<td class='l'>{escape(c.writer or '—')}</td>"
        + _diagnostic_cells(c.diagnostics)
        + f"<td class='l'>{_when(c.time)}</td></tr>"
        for i, c in enumerate(ins.compactions, 1)
    ]
    intro = (
        "<p class='meta'>before / after: the engine's estimate of the window "
        "a frontend sends, in tokens, just before the compaction and right after its summary "
        "(the figures <code>demo</code> and <code>inspect</code> print); recorded: what the "
        "daemon measured and stored at the compaction (<code>session/compactions</code>).</p>"
    )
    head = (
        "<th>#</th><th>after turn</th><th class='l'>kind</th>"
        "<th>before</th><th>after</th><th>messages replaced</th><th class='l'>written by</th>"
        "<th>recorded before</th><th>recorded after</th><th>summary tokens</th>"
        "<th>pruned outputs</th><th>ms</th><th class='l'>time</th>"
    )
    return _table("Compactions", rows, head, intro)


def _diagnostic_cells(d: Diagnostics | None) -> str:
    """What the daemon measured at the compaction (``session/compactions``), if stored."""
    if d is None:
        return "<td>-</td>" * 5
    return (
        f"<td>{d.tokens_before:,}</td><td>{d.tokens_after:,}</td><td>{d.summary_tokens:,}</td>"
        f"<td>{d.parts_pruned}</td><td>{d.duration_ms:,}</td>"
    )


def _prune_table(ins: Inspection) -> str:
    rows = [
        f"<tr><td>{p.turn}</td><td>{len(p.part_ids)}</td><td>{p.tokens_saved:,}</td>"
        f"<td class='l'>{_when(p.time)}</td></tr>"
        for p in ins.prunes
    ]
    head = "<th>after turn</th><th>tool outputs</th><th>tokens saved</th><th class='l'>time</th>"
    return _table("Prunes", rows, head)


def _table(title: str, rows: list[str], head: str, intro: str = "") -> str:
    """A section: its title, then ``None.`` or the intro and a table of ``rows``."""
    if not rows:
        return f"<h2>{title}</h2><p>None.</p>"
    return f"<h2>{title}</h2>{intro}<table><tr>{head}</tr>" + "".join(rows) + "</table>"


def _summaries(ins: Inspection) -> str:
    if not ins.compactions:
        return ""
    out = ["<h2>Summaries</h2><p>The latest is open; it is what the model reads now.</p>"]
    last = len(ins.compactions)
    for i, c in enumerate(ins.compactions, 1):
        out.append(
            f"<details{' open' if i == last else ''}><summary>C{i} · after turn {c.turn} · "
            f"{c.before:,} -&gt; {c.after:,} tokens</summary>"
            f"<p>Replaced {len(c.replaced_ids)} messages: "
            f"{escape(', '.join(c.replaced_ids))}</p>"
            f'<div class="summary">{escape(c.summary) or "(empty)"}</div></details>'
        )
    return "".join(out)
