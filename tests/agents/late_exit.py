"""Run a program with its stdio relayed; once it has exited, stay until the next bytes arrive,
then exit 0 without passing them on.

This makes a race deterministic: a client writes its next request to a transport whose daemon
is already gone but which has not yet told the client so (pi's extension over `connect`, the
daemon stopped between two turns). Used as the extension's sidecar command:
`python late_exit.py [--pidfile=PATH] <program> <args>...` (PATH: where the program's pid is
written, for a test that kills it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main() -> None:
    argv = sys.argv[1:]
    pidfile = argv.pop(0).removeprefix("--pidfile=") if argv[0].startswith("--pidfile=") else None
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    if pidfile is not None:
        with open(pidfile, "w") as f:
            f.write(str(child.pid))
    out = child.stdout
    ended = threading.Event()

    def relay_out() -> None:
        while chunk := os.read(out.fileno(), 65536):
            os.write(1, chunk)
        child.wait()
        ended.set()

    threading.Thread(target=relay_out, daemon=True).start()
    while chunk := os.read(0, 65536):
        if ended.is_set():
            os._exit(0)  # the request is taken and never answered
        try:
            child.stdin.write(chunk)
            child.stdin.flush()
        except BrokenPipeError:
            ended.wait()
            os._exit(0)
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
