"""Every shared transcript, replayed through a real daemon with auto compaction on a small
window: every compaction makes the context smaller, and none fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sidecar.model.transcript import load
from sidecar.replay.runner import replay

# ../shared beside the clone (CI has it); SIDECAR_SHARED points elsewhere, e.g. from a worktree.
SHARED = Path(
    os.environ.get("SIDECAR_SHARED") or Path(__file__).resolve().parents[2].parent / "shared"
)
TRANSCRIPTS = SHARED / "transcripts"
FILES = sorted(TRANSCRIPTS.glob("*.jsonl"))
WINDOW = 16_000

pytestmark = pytest.mark.skipif(
    not SHARED.is_dir(),
    reason=f"the shared transcripts are not here ({SHARED}); set SIDECAR_SHARED to their parent",
)


def test_the_shared_transcripts_are_present() -> None:
    # With ../shared present, all of them must be: fewer would make the replay tests vacuous.
    assert len(FILES) >= 13, f"expected the shared transcripts in {TRANSCRIPTS}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
@pytest.mark.parametrize("method", ["standard", "collapse"])
async def test_replay_compacts_without_failing(path: Path, method: str) -> None:
    transcript = load(path)
    lines: list[str] = []
    report = await replay(transcript, context=WINDOW, method=method, echo=lines.append)
    assert report.errors == [], report.errors
    for c in report.compactions:
        assert c.after < c.before, (c, lines)
    total_chars = sum(len(p.text) + len(p.output) for m in transcript.messages for p in m.parts)
    if total_chars > 8 * WINDOW:  # far more than the window holds: it must have compacted
        assert report.compactions, lines
        assert report.summary.strip()
