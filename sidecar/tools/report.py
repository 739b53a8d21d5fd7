"""``report``: one self-contained HTML page for a session (no scripts, fonts or links to fetch).

An inline SVG chart plots the context per turn (the engine's estimate, and what the provider
reported when it did) against the model window; a compaction is a drop on the context curve
itself, from its before to its after figure, and a prune a mark below it. A second chart stacks
each turn's window by what fills it (``session/breakdown``'s categories), then come the largest
parts of the current window, the tables and the summaries, rendered from their markdown.
Everything is escaped: session text is untrusted (the markdown renderer takes no HTML, links or
images, so a summary cannot add markup or make the page fetch anything).
"""

from __future__ import annotations

import datetime as dt
from html import escape

from markdown_it import MarkdownIt

from sidecar.model.inspect import CompactionEvent, Inspection
from sidecar.model.rpc import Diagnostics
from sidecar.tools.inspect import CATEGORY_LABELS

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
.summary{background:#f7f8fa;border-left:4px solid #7b57c9;padding:4px 14px;
font-size:.88em;margin:8px 0 18px;overflow-wrap:anywhere}
.summary pre{white-space:pre-wrap;background:#eef0f4;padding:6px 8px}
.summary h1,.summary h2,.summary h3{font-size:1.05em;margin:12px 0 4px}
ul.replaced{font-size:.85em;color:#3b4250;margin:4px 0 8px;padding-left:20px}
ul.replaced .role{display:inline-block;min-width:70px;color:#596273}
.legend{list-style:none;padding:0;margin:6px 0 0 60px;font-size:.85em}
.legend li{display:inline-block;margin-right:16px}
.sw{display:inline-block;width:18px;height:10px;margin-right:6px;vertical-align:middle}
svg text{font-size:11px;fill:#596273}
"""

# markdown-it-py, CommonMark without raw HTML (escaped instead), links, images or autolinks:
# a summary renders as text structure only and the page stays self-contained.
_MD = MarkdownIt("commonmark", {"html": False}).disable(["link", "image", "autolink"])

REPLACED_SHOWN = 40  # the replaced messages listed per compaction; the rest are counted

CATEGORY_COLORS = {
    "summary": "#7b57c9",
    "keptVerbatim": "#b79be8",
    "userText": "#2f6fd6",
    "assistantText": "#7fb0f0",
    "reasoning": "#a9c9f5",
    "toolCalls": "#e09a2f",
    "toolOutputs": "#d64545",
    "toolOutputsPruned": "#f0b3b3",
    "pinned": "#2a9d6a",
    "other": "#c5cad3",
}

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
    series: list[tuple[str, list[tuple[float, int]]]] = [("context", _context_points(ins, n))]
    reported = [(float(t.turn), r) for t in turns if (r := t.reported_tokens) is not None]
    if reported:
        series.append(("reported", reported))
    for name, pts in series:
        coords = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
        dash = ' stroke-dasharray="5 3"' if name == "reported" else ""
        out.append(
            f'<polyline class="series {name}" fill="none" stroke="{COLORS[name]}" '
            f'stroke-width="2"{dash} points="{coords}"/>'
        )
    out.append("</svg>")
    return "".join(out) + _legend(ins, bool(reported))


def _context_points(ins: Inspection, n: int) -> list[tuple[float, int]]:
    """The context curve: each turn's window, and at each compaction a drop from its before to
    its after figure between the turns it came between, so its markers sit on the curve."""
    by_turn: dict[int, list[CompactionEvent]] = {}
    for c in ins.compactions:
        by_turn.setdefault(c.turn, []).append(c)
    pts: list[tuple[float, int]] = []

    def drop(turn: int) -> None:
        for c in by_turn.get(turn, ()):
            cx = min(max(c.turn + 0.5, 1), n)
            pts.extend(((cx, c.before), (cx, c.after)))

    drop(0)
    for t in ins.turns:
        pts.append((float(t.turn), t.context_tokens))
        drop(t.turn)
    return pts


def _swatch(color: str, kind: str) -> str:
    if kind == "line":
        return f'<span class="sw" style="height:0;border-top:3px solid {color}"></span>'
    if kind == "dashed":
        return f'<span class="sw" style="height:0;border-top:3px dashed {color}"></span>'
    if kind == "dot":
        return f'<span class="sw" style="background:{color};border-radius:5px;width:10px"></span>'
    return f'<span class="sw" style="background:{color}"></span>'


def _legend(ins: Inspection, reported: bool) -> str:
    """What each line and mark of the context chart means, as a list under it."""
    items = [("context", "context sent to the model (estimate)", "line")]
    if reported:
        items.append(("reported", "tokens the provider reported", "dashed"))
    if ins.window:
        items.append(("window", "model window", "dashed"))
    if ins.usable:
        items.append(("usable", "usable input (window less the output reserve)", "dashed"))
    if ins.compactions:
        items.append(("compaction", "compaction: ● window before, ○ window after", "dot"))
    if ins.prunes:
        items.append(("prune", "prune: old tool outputs cleared", "dot"))
    return (
        '<ul class="legend">'
        + "".join(f"<li>{_swatch(COLORS[k], kind)}{escape(label)}</li>" for k, label, kind in items)
        + "</ul>"
    )


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
        _breakdown_chart(ins),
        _largest_table(ins),
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
        "<p class='meta'>before / after: the estimate of the window a frontend sends, in "
        "tokens, just before the compaction and right after it (the figures "
        "<code>session/compacted</code>, <code>demo</code> and <code>inspect</code> show); "
        "reported: the turn's tokens as the provider counted them, which triggered an "
        "automatic compaction.</p>"
    )
    head = (
        "<th>#</th><th>after turn</th><th class='l'>kind</th>"
        "<th>before</th><th>after</th><th>messages replaced</th><th class='l'>written by</th>"
        "<th>reported</th><th>summary tokens</th><th>pruned outputs</th><th>ms</th>"
        "<th class='l'>time</th>"
    )
    return _table("Compactions", rows, head, intro)


def _diagnostic_cells(d: Diagnostics | None) -> str:
    """What the daemon measured at the compaction (``session/compactions``), if stored."""
    if d is None:
        return "<td>-</td>" * 4
    return (
        f"<td>{_fmt(d.reported_tokens)}</td><td>{d.summary_tokens:,}</td>"
        f"<td>{d.parts_pruned}</td><td>{d.duration_ms:,}</td>"
    )


def _breakdown_chart(ins: Inspection) -> str:
    """Each turn's window stacked by what fills it (``session/breakdown``'s categories)."""
    turns = [t for t in ins.turns if t.categories]
    if not turns:
        return ""
    names = [k for k in CATEGORY_COLORS if any(t.categories.get(k) for t in turns)]
    ph = 170
    height = TOP - 30 + ph + 36
    pw = WIDTH - LEFT - RIGHT
    top = _nice_max(int(max(t.context_tokens for t in turns) * 1.05))
    if ins.usable:
        top = max(top, _nice_max(ins.usable))
    bw = pw / len(turns)
    out = [
        f'<svg class="breakdown" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="what fills the window per turn">',
        f'<rect x="{LEFT}" y="{TOP - 30}" width="{pw}" height="{ph}" fill="#fbfcfd" '
        'stroke="#d5d9e0"/>',
    ]
    base = TOP - 30 + ph

    def y(v: float) -> float:
        return base - ph * v / top

    for i in range(5):
        v = top * i / 4
        out.append(f'<text x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{int(v):,}</text>')
    for i, t in enumerate(turns):
        x0 = LEFT + i * bw
        acc = 0
        cells = []
        for k in names:
            v = t.categories.get(k, 0)
            if v <= 0:
                continue
            cells.append(
                f'<rect x="{x0 + bw * 0.1:.1f}" y="{y(acc + v):.1f}" width="{bw * 0.8:.1f}" '
                f'height="{y(acc) - y(acc + v):.1f}" fill="{CATEGORY_COLORS[k]}"/>'
            )
            acc += v
        detail = ", ".join(
            f"{CATEGORY_LABELS[k]} {t.categories.get(k, 0):,}" for k in names if t.categories.get(k)
        )
        out.append(
            f'<g class="bar" data-turn="{t.turn}">{"".join(cells)}'
            f"<title>turn {t.turn}: {t.context_tokens:,} tokens ({escape(detail)})</title></g>"
        )
    out.append(
        f'<text x="{LEFT + pw / 2}" y="{height - 8}" text-anchor="middle">turn (model call), '
        "each bar the window sent to the model</text>"
    )
    if ins.usable:
        out.append(
            f'<line class="limit usable" x1="{LEFT}" x2="{LEFT + pw}" y1="{y(ins.usable):.1f}" '
            f'y2="{y(ins.usable):.1f}" stroke="{COLORS["usable"]}" stroke-dasharray="3 3"/>'
        )
    out.append("</svg>")
    legend = (
        '<ul class="legend">'
        + "".join(
            f"<li>{_swatch(CATEGORY_COLORS[k], 'box')}{escape(CATEGORY_LABELS[k])}</li>"
            for k in names
        )
        + "</ul>"
    )
    return "<h2>What fills the window, per turn</h2>" + "".join(out) + legend


def _largest_table(ins: Inspection) -> str:
    b = ins.breakdown
    if b is None:
        return ""
    cats = "".join(
        f"<tr><td class='l'>{escape(CATEGORY_LABELS[c.name])}</td><td>{c.tokens:,}</td>"
        f"<td>{'—' if c.share is None else f'{100 * c.share:.1f}%'}</td></tr>"
        for c in b.categories
        if c.tokens
    )
    free = (
        f"<tr><td class='l'>free</td><td>{b.free:,}</td>"
        f"<td>{100 * b.free / b.usable_input:.1f}%</td></tr>"
        if b.free is not None and b.usable_input
        else ""
    )
    rows = [
        f"<tr><td>{i.tokens:,}</td><td class='l'>{escape(CATEGORY_LABELS.get(i.kind, i.kind))}"
        f"</td><td class='l'>{escape(i.tool or '—')}</td><td class='l'><code>"
        f"{escape(i.message_id)}</code> / <code>{escape(i.part_id)}</code></td></tr>"
        for i in b.largest
    ]
    head = "<th>tokens</th><th class='l'>kind</th><th class='l'>tool</th><th class='l'>where</th>"
    return (
        "<h2>The current window</h2><table><tr><th class='l'>what</th><th>tokens</th>"
        f"<th>of usable input</th></tr>{cats}{free}</table>" + _table("Largest parts", rows, head)
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
        replaced = "".join(
            f"<li title='{escape(r.id)}'><span class='role'>{escape(r.role)}</span> "
            f"{escape(r.words) or '(no text)'}</li>"
            for r in c.replaced[:REPLACED_SHOWN]
        )
        if len(c.replaced) > REPLACED_SHOWN:
            replaced += f"<li>… and {len(c.replaced) - REPLACED_SHOWN:,} more</li>"
        out.append(
            f"<details{' open' if i == last else ''}><summary>C{i} · after turn {c.turn} · "
            f"{c.before:,} -&gt; {c.after:,} tokens</summary>"
            f"<p>Replaced {len(c.replaced_ids)} messages:</p><ul class='replaced'>{replaced}</ul>"
            f'<div class="summary">{_MD.render(c.summary) if c.summary.strip() else "(empty)"}'
            "</div></details>"
        )
    return "".join(out)
