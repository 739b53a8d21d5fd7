"""Issue 19 items 8, 9 and 10 against the real command: another user's socket, ``--listen``
forms, Ctrl-C (SIGINT to the process group, as a terminal sends it) and unwritable paths.

Every refusal is one line on stderr and the documented exit status, never a traceback.
The other-user cases need root (to chown and to run a daemon as ``nobody`` with runuser).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import sysconfig
import tempfile
import termios
from collections.abc import Iterator
from pathlib import Path

import pytest

import sidecar

FIXTURES = Path(__file__).parent.parent / "fixtures"
GUARD = 120  # seconds: only a hung command reaches it
PROG = [sys.executable, "-m", "sidecar"]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE_", "SIDECAR_"))}
    env["XDG_CONFIG_HOME"] = str(home / "config")
    env["XDG_DATA_HOME"] = str(home / "data")
    env["XDG_STATE_HOME"] = str(home / "state")
    env["XDG_RUNTIME_DIR"] = str(home / "run")
    return env


def _run(*args: str, env: dict[str, str], stdin: bytes = b"") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [*PROG, *args], input=stdin.decode(), capture_output=True, text=True, env=env, timeout=GUARD
    )
    return proc


def _one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    return lines[0]


# -- item 9: --listen ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "tcp://127.evil.example:7450",
        "tcp://127.0.0.1.nip.io:7450",
        "tcp://127.0.0.1:99999",
        "tcp://127.0.0.1:0",
        "tcp://127.0.0.1:-1",
        "tcp://127.0.0.1:",
        "tcp://127.0.0.1",
        "tcp://10.0.0.1:7450",
        "tcp://0.0.0.0:7450",
        "tcp://[::]:7450",
        "tcp://example.com:7450",
        "tcp://:7450",
        "tcp://127.0.0.1:7450x",
        "tcp://127.0.0.1:٧٤٥٠",
    ],
)
def test_listen_accepts_only_a_loopback_literal_and_a_port(spec: str, tmp_path: Path) -> None:
    proc = _run("serve", "--db", str(tmp_path / "s.db"), "--listen", spec, env=_env(tmp_path))
    assert proc.returncode == 2, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("compaction-sidecar: --listen"), line
    assert not (tmp_path / "s.db").exists()  # refused before anything was opened


@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "localhost", "[::1]"])
def test_listen_loopback_forms_still_parse(host: str) -> None:
    from sidecar.server.transport import parse_listen

    assert parse_listen(f"tcp://{host}:7450")[2] == 7450
    assert parse_listen(f"tcp://{host}:1")[2] == 1
    assert parse_listen(f"tcp://{host}:65535")[2] == 65535


# -- item 10: unwritable paths and Ctrl-C --------------------------------------------------------


@pytest.fixture(scope="module")
def imported_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    home = tmp_path_factory.mktemp("report")
    db = home / "s.db"
    proc = _run("import", str(FIXTURES / "pi" / "session.jsonl"), "--db", str(db), env=_env(home))
    assert proc.returncode == 0, proc.stderr
    return db, proc.stdout.split()[0]


@pytest.mark.parametrize("target", ["missing/dir/r.html", "", "dir-not-file", "ro/r.html"])
def test_report_to_a_path_that_cannot_be_written(
    target: str, imported_db: tuple[Path, str], tmp_path: Path
) -> None:
    db, sid = imported_db
    (tmp_path / "dir-not-file").mkdir()
    (tmp_path / "ro").write_text("a file, so ro/r.html cannot be made")
    out = tmp_path / target if target else tmp_path
    proc = _run("report", sid, "--db", str(db), "-o", str(out), env=_env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    line = _one_line(proc.stderr)
    assert line.startswith("compaction-sidecar report: cannot write "), line
    assert str(out) in line


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["serve", "--log-file", "{tmp}/file/x.log"], "--log-file"),
        (["demo", "--quiet", "--db", "{tmp}"], "--db"),
        (["demo", "--quiet", "--db", "{tmp}/file/d.db"], "--db"),
        (
            [
                "replay",
                str(FIXTURES / "transcript" / "openhands-vue-todo-gui.jsonl"),
                "--db",
                "{tmp}",
            ],
            "--db",
        ),
    ],
)
def test_other_paths_that_cannot_be_written(args: list[str], option: str, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a file, not a folder")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    proc = _run(*argv, env=_env(tmp_path))
    assert proc.returncode == 1, proc.stderr
    line = _one_line(proc.stderr)
    assert f"{option} {argv[argv.index(option) + 1]}" in line, line


def _interrupt_after(cmd: list[str], ready: bytes, env: dict[str, str]) -> tuple[int, str]:
    """Start ``cmd`` in its own process group, wait until its stdout shows ``ready`` (it is
    running), then Ctrl-C it as a terminal does: SIGINT to the whole group."""
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    seen = b""
    while ready not in seen:
        line = proc.stdout.readline()
        assert line, f"ended before {ready!r}: {seen.decode()}"
        seen += line
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=GUARD)
    return proc.returncode, err.decode()


def test_ctrl_c_during_demo(tmp_path: Path) -> None:
    code, err = _interrupt_after([*PROG, "demo"], b"message   10", _env(tmp_path))
    assert code == 130, err
    assert _one_line(err) == "compaction-sidecar demo: interrupted"


def test_ctrl_c_during_replay(tmp_path: Path) -> None:
    transcript = Path(sidecar.__file__).parent / "data" / "demo-transcript.jsonl"
    cmd = [*PROG, "replay", str(transcript), "--context", "8000", "--db", str(tmp_path / "r.db")]
    code, err = _interrupt_after(cmd, b"message   10", _env(tmp_path))
    assert code == 130, err
    assert _one_line(err) == "compaction-sidecar replay: interrupted"


def _claude_log(path: Path, sid: str, turns: int) -> None:
    lines = []
    for i in range(turns):
        ts = f"2025-01-01T00:{i // 3600 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z"
        base = {"sessionId": sid, "cwd": "/p", "timestamp": ts}
        lines.append(
            {
                **base,
                "type": "user",
                "uuid": f"{sid}-u{i}",
                "message": {"role": "user", "content": f"q{i} " * 20},
            }
        )
        lines.append(
            {
                **base,
                "type": "assistant",
                "uuid": f"{sid}-a{i}",
                "message": {
                    "id": f"{sid}-m{i}",
                    "role": "assistant",
                    "content": [{"type": "text", "text": f"a{i} " * 40}],
                },
            }
        )
    import json

    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_ctrl_c_during_import_stores_nothing(tmp_path: Path) -> None:
    """The import shows progress on a terminal; Ctrl-C once it shows it ends with 130 and one
    line, and the database holds no session (the read phase writes nothing; the write is one
    transaction)."""
    src = tmp_path / "logs"
    src.mkdir()
    for n in range(150):
        _claude_log(src / f"s{n:03d}.jsonl", f"sess-{n:03d}", 300)
    db = tmp_path / "s.db"
    primary, secondary = os.openpty()  # stderr is a terminal: the progress bar shows
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [*PROG, "import", str(src), "--db", str(db)],
        stdout=subprocess.PIPE,
        stderr=secondary,
        stdin=subprocess.DEVNULL,
        env=_env(tmp_path),
        start_new_session=True,
    )
    os.close(secondary)
    seen = b""
    try:
        while b"import" not in seen:
            chunk = os.read(primary, 4096)
            assert chunk, seen.decode()
            seen += chunk
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=GUARD)
        with contextlib.suppress(OSError):  # EIO once the child's side is closed
            while chunk := os.read(primary, 4096):
                seen += chunk
    finally:
        os.close(primary)
        if proc.poll() is None:
            proc.kill()
    text = seen.decode(errors="replace").replace("\x1b[K", "")  # the terminal's clear-line
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    last = text.replace("\r\n", "\n").strip().split("\n")[-1].split("\r")[-1]
    assert last == "compaction-sidecar import: interrupted; nothing imported", text
    if db.exists():
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM sessions").fetchone() == (0,)


# -- item 8: another user's socket ---------------------------------------------------------------

root_only = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("runuser") is None,
    reason="needs root and runuser to act as another user",
)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory under /tmp that ``nobody`` can traverse (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="sidecar-users-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


NOBODY = pwd.getpwnam("nobody").pw_uid if os.name == "posix" else -1


@root_only
@pytest.mark.parametrize("command", ["connect", "status", "stop", "mcp"])
def test_a_socket_directory_of_another_user_is_refused(command: str, shared_tmp: Path) -> None:
    theirs = shared_tmp / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    sock = theirs / "daemon.sock"
    proc = _run(command, "--socket", str(sock), env=_env(shared_tmp))
    assert proc.returncode == 1, proc.stderr
    line = _one_line(proc.stderr)
    assert str(theirs) in line and "another user" in line, line
    assert not sock.exists()  # connect did not start a daemon there


@root_only
@pytest.mark.parametrize("command", ["connect", "status", "stop", "mcp"])
def test_a_socket_file_of_another_user_is_refused(command: str, shared_tmp: Path) -> None:
    import socket

    ours = shared_tmp / "ours"
    ours.mkdir(mode=0o700)
    sock = ours / "daemon.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(sock))
    listener.listen(8)
    os.chown(sock, NOBODY, NOBODY)
    try:
        proc = _run(command, "--socket", str(sock), env=_env(shared_tmp))
    finally:
        listener.close()
    assert proc.returncode == 1, proc.stderr
    line = _one_line(proc.stderr)
    assert str(sock) in line and "another user" in line, line


@pytest.fixture(scope="module")
def as_nobody() -> list[str]:
    """The start of a command line that runs this code as ``nobody``: runuser, a Python that
    ``nobody`` may execute (this venv's may live under a 0700 home), and this venv's packages
    and checkout put on its path."""
    purelib = sysconfig.get_paths()["purelib"]
    repo = Path(sidecar.__file__).parent.parent
    boot = (
        f"import site, sys; site.addsitedir({purelib!r}); sys.path.insert(0, {str(repo)!r}); "
        "from sidecar.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    minor = f"/usr/bin/python3.{sys.version_info.minor}"
    for python in (sys.executable, minor):
        cmd = ["runuser", "-u", "nobody", "--", python, "-c", boot]
        probe = subprocess.run([*cmd, "--version"], capture_output=True, timeout=GUARD, cwd="/")
        if probe.returncode == 0:
            return cmd
    pytest.skip("no Python that nobody can run with this checkout")


@pytest.fixture
def nobody_daemon(as_nobody: list[str], shared_tmp: Path) -> Iterator[Path]:
    """A real daemon run as ``nobody``, listening in a directory ``nobody`` owns."""
    theirs = shared_tmp / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    sock = theirs / "daemon.sock"
    env = _env(theirs)
    cmd = [*as_nobody, "serve", "--db", str(theirs / "s.db")]
    cmd += ["--listen", f"unix:{sock}", "--log-level", "INFO"]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env, cwd=str(theirs)
    )
    _wait_until_listening(proc)
    try:
        yield sock
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=GUARD)


@root_only
@pytest.mark.parametrize("command", ["connect", "status", "stop", "mcp"])
def test_a_daemon_of_another_user_is_refused_by_its_credentials(
    command: str, nobody_daemon: Path, shared_tmp: Path
) -> None:
    """The socket and its directory look like ours (root chowns them back), but the peer at
    the other end runs as ``nobody``: SO_PEERCRED tells, and nothing is sent to it."""
    sock = nobody_daemon
    os.chown(sock.parent, 0, 0)
    os.chown(sock, 0, 0)
    proc = _run(command, "--socket", str(sock), env=_env(shared_tmp), stdin=b"")
    assert proc.returncode == 1, proc.stderr
    line = _one_line(proc.stderr)
    assert "another user" in line and f"uid {NOBODY}" in line, line
    # it still runs: ``stop`` was not delivered
    probe = _run("status", "--socket", str(sock), env=_env(shared_tmp))
    assert probe.returncode == 1 and "another user" in probe.stderr


@root_only
@pytest.mark.parametrize("command", ["status", "stop"])
def test_status_and_stop_by_another_user_are_one_line(
    command: str, shared_tmp: Path, as_nobody: list[str]
) -> None:
    """A daemon this user (root) runs; ``nobody`` asks about it: no PermissionError traceback."""
    ours = shared_tmp / "ours"
    ours.mkdir(mode=0o700)
    sock = ours / "daemon.sock"
    env = _env(shared_tmp)
    proc = subprocess.Popen(
        [
            *PROG,
            "serve",
            "--db",
            str(ours / "s.db"),
            "--listen",
            f"unix:{sock}",
            "--log-level",
            "INFO",
        ],
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    _wait_until_listening(proc)
    try:
        for parent in (ours, ours.parent):
            parent.chmod(0o755)  # let nobody reach the socket file itself, not only the dir
        asked = subprocess.run(
            [*as_nobody, command, "--socket", str(sock)],
            capture_output=True,
            text=True,
            env={**env, "XDG_RUNTIME_DIR": str(shared_tmp / "nobody-run")},
            timeout=GUARD,
            cwd="/",
        )
        assert asked.returncode == 1, asked.stderr
        line = _one_line(asked.stderr)
        assert "another user" in line, line
        assert proc.poll() is None  # the daemon was not stopped
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=GUARD)


def _wait_until_listening(proc: subprocess.Popen[bytes]) -> None:
    """Reads the daemon's stderr up to its ``listening on`` line (failing if it ends first)."""
    assert proc.stderr is not None
    seen = b""
    while b"listening on" not in seen:
        line = proc.stderr.readline()
        assert line, seen.decode()
        seen += line
