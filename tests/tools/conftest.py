"""A session the real daemon compacted and pruned, made once by replaying the demo transcript."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from daemon_env import isolated_env
from sidecar_client import Client, spawn

from sidecar.model.transcript import load

FIXTURES = Path(__file__).parent.parent / "fixtures"


async def daemon(db: Path, home: Path) -> Client:
    return await spawn(db, env=isolated_env(home))


def _transcript(path: Path, turns: int = 16) -> Path:
    """A neutral transcript with one tool call per user turn: ~600 tokens each (they get
    pruned), ~3,200 from turn 11 on: each alone is over the 4k window's usable input, which
    pruning cannot help (a window that prunes down to fit is served without compacting), so
    they compact."""
    lines = [{"session": "tools-fixture", "source": "generated", "license": "MIT"}]
    for i in range(1, turns + 1):
        body = "\n".join(
            f"{i:02d}:{j:03d} " + "lorem ipsum dolor sit amet " * 3
            for j in range(27 if i <= 10 else 140)
        )
        lines.append({"role": "user", "parts": [{"type": "text", "text": f"Turn {i}: read f{i}"}]})
        lines.append(
            {
                "role": "assistant",
                "parts": [
                    {"type": "text", "text": f"Reading f{i}."},
                    {
                        "type": "tool",
                        "tool": "read",
                        "callID": f"call_{i}",
                        "input": {"path": f"f{i}"},
                        "output": body,
                    },
                    {"type": "text", "text": f"f{i} holds {len(body)} characters of lorem ipsum."},
                ],
            }
        )
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path


def _replayed(factory: pytest.TempPathFactory, method: str) -> tuple[Path, str]:
    from sidecar.replay.runner import replay

    home = factory.mktemp("home")
    (home / "config" / "compaction-sidecar").mkdir(parents=True)
    (home / "config" / "compaction-sidecar" / "config.json").write_text(
        json.dumps({"compaction": {"pruneProtect": 1200, "pruneMinimum": 300}})
    )
    db = home / "sessions.db"
    report = asyncio.run(
        replay(
            load(_transcript(home / "t.jsonl")),
            context=4_000,
            method=method,
            db=db,
            echo=lambda _s: None,
            verbose=False,
            env=isolated_env(home),
        )
    )
    assert report.compactions and report.prunes, "the fixture must compact and prune"
    with sqlite3.connect(db) as conn:
        (sid,) = conn.execute("SELECT id FROM sessions").fetchone()
    return db, str(sid)


@pytest.fixture(scope="session")
def compacted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(db, session id): a generated transcript replayed by the real daemon against a
    4,000-token window, with prune thresholds low enough (user config file) that prunes
    happen too. The replay runner sends each call's ``session/context`` estimate as that
    message's ``tokens.input``, which lets tests check ``inspect`` turn by turn."""
    return _replayed(tmp_path_factory, "standard")


@pytest.fixture(scope="session")
def collapsed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The same with collapse compaction (markers point back at a kept tail)."""
    return _replayed(tmp_path_factory, "collapse")
