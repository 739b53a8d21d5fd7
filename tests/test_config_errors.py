"""Issue 20 item 3: a broken config file is one line that names the file, the key path and the
problem, with exit status 2, from ``serve`` and from ``connect`` (real processes); and
``compaction-sidecar config`` shows the files loaded and the effective config, secrets
redacted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from daemon_env import run_cli

GUARD = 60


def _user_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config" / "compaction-sidecar" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(args, tmp_path, timeout=GUARD)


CASES = [
    (
        '{"compaction": {"atuo": false}}',
        ["compaction.atuo", "unknown", "did you mean `auto`?"],
    ),
    ('{"compaction": {"summaryMaxTokens": 0}}', ["compaction.summaryMaxTokens", ">= 1"]),
    ('{"compaction": {"auto": tru}}', ["line 1", "malformed"]),
    ("[1, 2]", ["must be a JSON object"]),
]


@pytest.mark.parametrize(("text", "says"), CASES)
@pytest.mark.parametrize("where", ["user", "--config"])
def test_serve_names_the_file_key_and_problem(
    tmp_path: Path, text: str, says: list[str], where: str
) -> None:
    if where == "user":
        path = _user_config(tmp_path, text)
        extra: list[str] = []
    else:
        path = tmp_path / "workspace.json"
        path.write_text(text)
        extra = ["--config", str(path)]
    done = _run(["serve", "--db", str(tmp_path / "s.db"), *extra], tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert str(path) in lines[0]
    for word in says:
        assert word in lines[0]


def test_connect_reports_the_config_error_with_status_2(tmp_path: Path) -> None:
    bad = tmp_path / "workspace.json"
    bad.write_text('{"summarizer": {"timeout": -1}}')
    done = _run(
        ["connect", "--socket", str(tmp_path / "run" / "d.sock"), "--config", str(bad)],
        tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert str(bad) in lines[0] and "summarizer.timeout" in lines[0]
    assert "exited with status" not in done.stderr


def test_config_command_shows_files_and_effective_config(tmp_path: Path) -> None:
    user = _user_config(tmp_path, '{"compaction": {"auto": false}}')
    ws = tmp_path / "workspace.json"
    ws.write_text(
        json.dumps(
            {
                "summarizer": {
                    "provider": "openai",
                    "model": "m",
                    "baseURL": "https://me:hunter2-secret@llm.example/v1",
                    "apiKeyEnv": "MY_KEY",
                    "headers": {"Authorization": "Bearer sk-verysecretvalue123"},
                }
            }
        )
    )
    done = _run(["config", "--config", str(ws), "--json"], tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [f["path"] for f in out["files"]] == [str(user), str(ws)]
    assert all(f["loaded"] for f in out["files"])
    cfg = out["config"]
    assert cfg["compaction"]["auto"] is False
    assert cfg["summarizer"]["provider"] == "openai"
    assert cfg["summarizer"]["apiKeyEnv"] == "MY_KEY"
    assert "sk-verysecretvalue123" not in done.stdout
    assert cfg["summarizer"]["headers"]["Authorization"] == "<redacted>"
    assert cfg["summarizer"]["baseURL"] == "https://<redacted>@llm.example/v1"
    assert "hunter2" not in done.stdout
    # The human form says the same, and a missing user file is listed as not found.
    user.unlink()
    text = _run(["config", "--config", str(ws)], tmp_path)
    assert text.returncode == 0, text.stderr
    assert f"{user} (not found)" in text.stdout
    assert f"{ws} (loaded)" in text.stdout
    assert "sk-verysecretvalue123" not in text.stdout


def test_config_command_reports_a_broken_file(tmp_path: Path) -> None:
    path = _user_config(tmp_path, '{"models": {"x/y": {"context": "big"}}}')
    done = _run(["config"], tmp_path)
    assert done.returncode == 2
    assert str(path) in done.stderr and "models.x/y.context" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_demo_reports_a_broken_user_config_in_one_line(tmp_path: Path) -> None:
    path = _user_config(tmp_path, '{"compaction": {"atuo": false}}')
    done = _run(["demo", "--quiet"], tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "compaction.atuo" in lines[0]
