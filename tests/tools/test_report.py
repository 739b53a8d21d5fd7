"""``report``: one self-contained HTML page whose SVG has a series per line and a marker per
compaction and prune."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli import main
from sidecar.model.inspect import (
    CompactionEvent,
    Inspection,
    ReplacedMessage,
    SessionSummary,
    TurnPoint,
)
from sidecar.tools.inspect import inspect
from sidecar.tools.readdb import find_session, load_history, open_ro
from sidecar.tools.report import render


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.svg_text = ""
        self._depth = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def of(self, tag: str, cls: str | None = None) -> list[dict[str, str | None]]:
        return [
            a
            for t, a in self.tags
            if t == tag and (cls is None or set(cls.split()) <= set((a.get("class") or "").split()))
        ]


def _parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def _assert_self_contained(html: str, page: _Page) -> None:
    assert not re.search(r"(https?:)?//[\w.-]+\.\w", html), "no URL of any kind"
    for tag in ("script", "link", "img", "iframe", "object", "embed"):
        assert not page.of(tag), f"no <{tag}>"
    for _, attrs in page.tags:
        for name in ("src", "href"):
            assert name not in attrs


def _session(
    title: str, *, messages: int, estimated_tokens: int = 0, compactions: int = 0
) -> SessionSummary:
    """The header of a hand-made inspection (id ``ses_1``, no last activity)."""
    return SessionSummary(
        id="ses_1",
        title=title,
        messages=messages,
        estimated_tokens=estimated_tokens,
        compactions=compactions,
        last_activity=0,
    )


def _compaction(summary: str, marker_id: str = "k", **fields: Any) -> CompactionEvent:
    """A hand-made automatic compaction after turn 1 (60 -> 15 tokens) with ``summary``."""
    return CompactionEvent(
        turn=1,
        marker_id=marker_id,
        summary_id="s",
        auto=True,
        before=60,
        after=15,
        time=2,
        summary=summary,
        **fields,
    )


def test_report_structure(compacted: tuple[Path, str], tmp_path: Path) -> None:
    db, sid = compacted
    out = tmp_path / "r.html"
    assert main(["report", sid, "--db", str(db), "-o", str(out), "--context", "4000"]) == 0
    html = out.read_text(encoding="utf-8")
    page = _parse(html)
    conn = open_ro(db)
    session = find_session(conn, sid)
    ins = inspect(session, load_history(conn, session), context=4_000)
    conn.close()
    assert len(page.of("svg")) == 2  # the context per turn, and what fills it per turn
    assert len(page.of("g", "bar")) == len(ins.turns)
    series = page.of("polyline", "series")
    names = {(a.get("class") or "").split()[1] for a in series}
    assert names == {"context", "reported"}
    context = page.of("polyline", "series context")[0]
    points = (context.get("points") or "").split()
    # Each turn, and each compaction's drop from before to after: its markers are on the curve.
    assert len(points) == len(ins.turns) + 2 * len(ins.compactions)
    for c in page.of("g", "marker compaction"):
        assert c.get("data-id")
    dots = re.findall(r'<circle cx="([\d.]+)" cy="([\d.]+)"', html)
    assert dots and all(f"{cx},{cy}" in points for cx, cy in dots)
    assert len(page.of("g", "marker compaction")) == len(ins.compactions) >= 1
    assert len(page.of("g", "marker prune")) == len(ins.prunes) >= 1
    assert page.of("line", "limit window"), "the model window is drawn"
    _assert_self_contained(html, page)
    svg = html[html.index("<svg") : html.index("</svg>") + len("</svg>")]
    assert page.of("ul", "legend"), "a legend says what each line and mark is"
    root = ET.fromstring(svg)  # well-formed XML on its own
    assert root.tag == "svg"
    assert page.of("div", "summary") and page.of("ul", "replaced")


def test_untrusted_text_is_escaped() -> None:
    evil = '<script>alert("x")</script>'
    ins = Inspection(
        session=_session(evil, messages=2, estimated_tokens=10, compactions=1),
        window=100,
        turns=[
            TurnPoint(turn=1, message_id="m1", time=1, context_tokens=50),
            TurnPoint(turn=2, message_id="m2", time=3, context_tokens=20),
        ],
        compactions=[_compaction(evil, marker_id='x"><script>')],
    )
    html = render(ins)
    page = _parse(html)
    assert not page.of("script")
    assert "&lt;script&gt;" in html
    _assert_self_contained(html, page)


def test_a_summary_renders_from_markdown_and_stays_inert() -> None:
    """Headings, lists and code become markup; HTML, links and images in it do not."""
    summary = (
        "## Goal\n\n- fix the **parser**\n- keep `tokens.py`\n\n```\nraise Bad\n```\n\n"
        '<img src="http://evil.example/x.png" onerror="alert(1)">\n\n'
        "[click](javascript:alert(1)) ![i](http://evil.example/i.png) <http://evil.example/>"
    )
    ins = Inspection(
        session=_session("s", messages=2, compactions=1),
        turns=[TurnPoint(turn=1, message_id="m1", time=1, context_tokens=50)],
        compactions=[
            _compaction(
                summary,
                replaced_ids=["m0"],
                replaced=[ReplacedMessage(id="m0", role="user", words="fix the parser please")],
            )
        ],
    )
    html = render(ins)
    page = _parse(html)
    assert page.of("h2") and page.of("li") and page.of("strong") and page.of("pre")
    assert "&lt;img" in html and not page.of("img") and not page.of("a")
    assert "user</span> fix the parser please" in html and "title='m0'" in html
    _assert_self_contained(html.replace("evil.example", "evil"), page)


@pytest.mark.parametrize("turns", [0, 1])
def test_tiny_sessions_render(turns: int) -> None:
    ins = Inspection(
        session=_session("t", messages=turns),
        turns=[TurnPoint(turn=1, message_id="m", time=1, context_tokens=5)][:turns],
    )
    page = _parse(render(ins))
    assert len(page.of("svg")) == turns
