"""Command-line polish (issue 12 item 4): versions, log options, argument errors up front,
``demo --db`` and a closed output pipe. Argument errors run ``main`` in-process; the demo runs
as a real process."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from sidecar import __version__
from sidecar.cli import main

GUARD = 120


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"compaction-sidecar {__version__}"


def test_log_level_has_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["serve", "--log-level", "verbose"])
    assert info.value.code == 2
    assert "invalid choice: 'VERBOSE'" in capsys.readouterr().err


def test_log_level_from_the_environment_is_checked(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SIDECAR_LOG", "chatty")
    assert main(["serve", "--db", os.devnull]) == 2
    assert "SIDECAR_LOG='CHATTY'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["serve"], ["connect"]])
def test_a_missing_config_file_is_an_error(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing.json"
    assert main([*command, "--config", str(missing)]) == 2
    assert f"--config {missing}: no such file" in capsys.readouterr().err


def test_idle_exit_needs_a_listener(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--idle-exit", "5"]) == 2
    assert "--idle-exit needs --listen" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5"])
@pytest.mark.parametrize("command", [["demo"], ["replay", "t.jsonl"]])
def test_context_must_be_positive(
    command: list[str], value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*command, f"--context={value}"])
    assert info.value.code == 2
    assert f"must be a positive number, not {value}" in capsys.readouterr().err


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_remote_summarizer_without_a_model_fails_up_front(
    provider: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    transcript = tmp_path / "t.jsonl"  # never read: the error comes first
    assert main(["replay", str(transcript), "--summarizer", provider]) == 2
    err = capsys.readouterr().err
    assert err.count("error") == 1
    assert f"--summarizer {provider} needs --model" in err


def test_replay_help_promises_no_environment_variables(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["replay", "--help"])
    assert "SIDECAR_SUMMARIZER" not in capsys.readouterr().out


def _demo(*args: str) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_", "SIDECAR_"))}
    return subprocess.Popen(
        [sys.executable, "-m", "sidecar", "demo", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def test_demo_db_keeps_the_replayed_session(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    proc = _demo("--quiet", "--db", str(db))
    out, err = proc.communicate(timeout=GUARD)
    assert proc.returncode == 0, err.decode()
    with sqlite3.connect(db) as conn:
        ((session_id,),) = conn.execute("SELECT id FROM sessions").fetchall()
        (count,) = conn.execute("SELECT count(*) FROM messages").fetchone()
    assert f"session {session_id} kept in {db}" in out.decode()
    assert count > 54  # the transcript plus the daemon's compaction messages
    # and it shows the latest summary, the offline writer's narrative and the ledger
    text = out.decode()
    assert "latest summary:" in text and "## Goal\nCreate the main page layout" in text
    assert "## Artifact ledger" in text


def test_demo_into_a_closed_pipe_ends_quietly() -> None:
    proc = _demo()
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"compaction-sidecar demo")
    proc.stdout.close()  # `demo | head -1`
    err = proc.stderr.read()
    assert proc.wait(timeout=GUARD) == 141
    assert err == b"", err.decode()
