"""Run a program with its stdio relayed; once it has exited, stay until the next bytes arrive,
then exit 0 without passing them on. (If it exits with bytes passed on since it last wrote,
this exits at once, as the program's own pipes would end.)

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
    lock = threading.Lock()
    ended = False
    # Bytes passed on since the program last wrote: a request it may take unanswered.
    asked = False

    def relay_out() -> None:
        nonlocal ended, asked
        while chunk := os.read(out.fileno(), 65536):
            with lock:
                asked = False
            os.write(1, chunk)
        child.wait()
        with lock:
            ended = True
            if asked:
                os._exit(0)  # it ended with a request unanswered: so does this transport

    relay = threading.Thread(target=relay_out, daemon=True)
    relay.start()
    while chunk := os.read(0, 65536):
        with lock:
            if ended:
                os._exit(0)  # the request is taken and never answered
            asked = True
        try:
            child.stdin.write(chunk)
            child.stdin.flush()
        except BrokenPipeError:
            relay.join()  # what it wrote before it went is passed on first
            os._exit(0)  # the request is never answered
    child.stdin.close()
    child.wait()


if __name__ == "__main__":
    main()
