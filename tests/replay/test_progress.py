"""The replay's progress bar (tqdm): drawn on a terminal, never into a pipe or a file."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

TRANSCRIPT = Path(__file__).parents[1] / "fixtures" / "transcript" / "openhands-vue-todo-gui.jsonl"


def _replay_args(db: Path) -> list[str]:
    return [sys.executable, "-m", "sidecar", "replay", str(TRANSCRIPT), "--db", str(db)]


def test_a_terminal_gets_a_bar(tmp_path: Path) -> None:
    pid, fd = pty.fork()
    if pid == 0:  # the child: a 120-column terminal, as a person's would be
        fcntl.ioctl(2, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        os.execvp(sys.executable, _replay_args(tmp_path / "tty.db"))
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, out[-2000:]
    assert b"/6 [" in out and b"msg/s" in out  # tqdm's "done/total [elapsed, rate]"


def test_a_pipe_gets_no_bar(tmp_path: Path) -> None:
    done = subprocess.run(_replay_args(tmp_path / "pipe.db"), capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert b"msg/s" not in done.stderr and b"\r" not in done.stderr
