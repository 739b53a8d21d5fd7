"""Issue 20 item 6: the command line's rough edges, each through the real CLI (a real process;
the import progress bar in-process, with its bar recorded).

Exit statuses: 2 for a usage or config error (a bad option or value, a file or database that
cannot be used), 1 for a command that ran and failed."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from daemon_env import cli_env, run_cli

GUARD = 120
EXPORT = Path(__file__).parent / "fixtures" / "opencode-1.1.53" / "export.json"


def _run(
    args: list[str], tmp_path: Path, stdin: Any = subprocess.DEVNULL
) -> subprocess.CompletedProcess[str]:
    return run_cli(args, tmp_path, timeout=GUARD, stdin=stdin)


def test_demo_and_inspect_print_the_same_figures_and_say_what_they_measure(
    tmp_path: Path,
) -> None:
    db = tmp_path / "demo.db"
    demo = _run(["demo", "--db", str(db), "--quiet"], tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    shown = re.findall(r"#\d+ after turn (\d+) \((\w+)\): ([\d,]+) -> ([\d,]+) tokens", demo.stdout)
    assert shown, demo.stdout
    sid = re.search(r"session (\S+) kept in", demo.stdout)
    assert sid is not None
    ins = _run(["inspect", sid.group(1), "--db", str(db), "--json"], tmp_path)
    data = json.loads(ins.stdout)
    expected = [
        (str(c["turn"]), "auto" if c["auto"] else "manual", f"{c['before']:,}", f"{c['after']:,}")
        for c in data["compactions"]
    ]
    assert shown == expected
    text = _run(["inspect", sid.group(1), "--db", str(db)], tmp_path).stdout
    for _, _, before, after in shown:
        assert f"{before} -> {after} tokens" in text
    html = tmp_path / "r.html"
    assert (
        _run(["report", sid.group(1), "--db", str(db), "-o", str(html)], tmp_path).returncode == 0
    )
    page = html.read_text()
    for out in (demo.stdout, text, page):
        assert "before" in out and "estimate of the window" in out
    for _, _, before, after in shown:
        assert f"<td>{before}</td><td>{after}</td>" in page
    assert "<td class='l'>extractive</td>" in page  # who wrote each summary


def test_connect_help_gives_the_real_log_file_default(tmp_path: Path) -> None:
    out = _run(["connect", "--help"], tmp_path).stdout
    flat = " ".join(out.split())
    assert "default: stderr" not in flat
    assert str(tmp_path / "state" / "compaction-sidecar" / "daemon.log") in flat.replace(" ", "")


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--db", "{missing}"],
        ["sessions", "--db", "{missing}"],
        ["inspect", "ses_x", "--db", "{missing}"],
        ["report", "ses_x", "--db", "{missing}", "-o", "{tmp}/r.html"],
        ["import", "{tmp}/nothing-here.json", "--db", "{tmp}/ok.db"],
    ],
)
def test_an_unusable_database_or_file_is_exit_2_everywhere(tmp_path: Path, args: list[str]) -> None:
    # A directory where the database file should be: no command can use it.
    missing = tmp_path / "a-directory.db"
    missing.mkdir()
    argv = [a.format(missing=missing, tmp=tmp_path) for a in args]
    done = _run(argv, tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr


def test_a_runtime_failure_is_exit_1(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    assert _run(["import", str(EXPORT), "--db", str(db)], tmp_path).returncode == 0
    done = _run(["inspect", "ses_no_such_session", "--db", str(db)], tmp_path)
    assert done.returncode == 1 and "ses_no_such_session" in done.stderr


@pytest.mark.parametrize("name", ["-", "/dev/stdin"])
def test_import_reads_standard_input(tmp_path: Path, name: str) -> None:
    db = tmp_path / "x.db"
    with EXPORT.open("rb") as f:
        done = subprocess.run(
            [sys.executable, "-m", "sidecar", "import", name, "--db", str(db), "--json"],
            env=cli_env(tmp_path),
            stdin=f,
            capture_output=True,
            timeout=GUARD,
        )
    assert done.returncode == 0, done.stderr
    [row] = json.loads(done.stdout)
    assert row["sessionID"] == "ses_df644fef5ffeZsiRcGW0Bq4QE6" and row["messages"] == 18
    # A broken input names standard input, not a temporary file.
    bad = subprocess.run(
        [sys.executable, "-m", "sidecar", "import", "-", "--db", str(db)],
        env=cli_env(tmp_path),
        input=b"not json at all\n",
        capture_output=True,
        timeout=GUARD,
    )
    assert bad.returncode != 0
    err = bad.stderr.decode()
    assert "<stdin>" in err and "/tmp" not in err and len(err.strip().splitlines()) == 1


def test_a_wrong_postgres_socket_directory_is_named(tmp_path: Path) -> None:
    url = f"postgresql:///sidecar?host={tmp_path}/no-such-dir"
    for argv in (["serve", "--db", url], ["sessions", "--db", url]):
        done = _run(argv, tmp_path)
        assert done.returncode == 2, done.stderr
        assert f"{tmp_path}/no-such-dir/.s.PGSQL.5432" in done.stderr


def test_the_sessions_table_stays_aligned_with_long_ids(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    assert _run(["import", str(EXPORT), "--db", str(db)], tmp_path).returncode == 0
    conn = sqlite3.connect(db)
    row = conn.execute("SELECT data FROM sessions").fetchone()
    data = json.loads(row[0])
    data["id"] = "ses_" + "L" * 60
    data["title"] = "long one"
    conn.execute(
        "INSERT INTO sessions (id, parent_id, created, updated, data) VALUES (?, NULL, 1, 1, ?)",
        (data["id"], json.dumps(data)),
    )
    conn.commit()
    conn.close()
    out = _run(["sessions", "--db", str(db)], tmp_path).stdout.splitlines()
    header, rows = out[0], out[1:]
    assert len(rows) == 2
    col = header.index("messages")
    for line in rows:
        # Every row's message count ends where the header's "messages" ends.
        assert line[col + len("messages") - 1].isdigit(), out
        assert line[col + len("messages")] == " ", out


def test_serve_on_a_terminal_says_it_waits_for_json_rpc(tmp_path: Path) -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "serve", "--db", str(tmp_path / "x.db")],
        env=cli_env(tmp_path),
        stdin=slave,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], GUARD)
        assert ready, "serve printed nothing on a terminal"
        line = proc.stderr.readline().decode()
        assert "JSON-RPC" in line and "stdin" in line and "Ctrl-D" in line
        os.write(master, b"\x04")  # end of input, as a person would type it
        assert proc.wait(timeout=GUARD) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def test_listening_is_said_once_and_not_as_a_warning(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "d.sock"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sidecar",
            "serve",
            "--db",
            str(tmp_path / "x.db"),
            "--listen",
            f"unix:{sock}",
        ],
        env=cli_env(tmp_path),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline().decode()
        assert f"listening on unix:{sock}" in line
        assert "WARNING" not in line
    finally:
        proc.terminate()
        proc.wait(timeout=GUARD)


@pytest.mark.parametrize("command", [["demo"], ["replay", str(EXPORT)]])
def test_a_window_too_small_to_work_is_refused(tmp_path: Path, command: list[str]) -> None:
    done = _run([*command, "--context", "10"], tmp_path)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--context" in lines[0] and "4096" in lines[0].replace(",", "")
    assert done.stdout == ""


def test_import_progress_moves_per_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from sidecar.cli import main
    from sidecar.tools import cli as tools_cli

    updates: list[int] = []

    class Bar:
        def update(self, n: int) -> None:
            updates.append(n)

        def close(self) -> None:
            return None

    bars: dict[str, Bar] = {}

    def progress(total: int, unit: str = "msg", minimum: int = 500) -> Bar:
        return bars.setdefault(unit, Bar())

    monkeypatch.setattr(tools_cli, "_progress", progress)
    assert main(["import", str(EXPORT), "--db", str(tmp_path / "x.db")]) == 0
    # One step per file read (here one), then one per message checked and written.
    assert updates == [1] + [1] * 18


def test_connect_passes_on_the_daemons_usage_error_status(tmp_path: Path) -> None:
    """The same unusable ``--db`` is exit 2 from ``connect`` too, with the daemon's reason."""
    missing = tmp_path / "a-directory.db"
    missing.mkdir()
    done = _run(
        ["connect", "--socket", str(tmp_path / "run" / "s.sock"), "--db", str(missing)], tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert f"cannot open the database {missing}" in done.stderr
