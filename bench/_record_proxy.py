"""A stand-in ``compaction-sidecar`` for ``bench/opencode_side.py``'s driver floor: it runs the
real daemon, passes every byte both ways unchanged, and records what the daemon sent, cut at
each reply (the notifications before a reply belong to it), for ``_replay_server.py``.

    python bench/_record_proxy.py OUT REAL_EXECUTABLE ARGS...   (OUT: a msgspec-JSON list of
    byte strings, written when the daemon's output ends)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO

import msgspec


def _pump(dst: IO[bytes]) -> None:
    """Our stdin to the daemon's, as it comes."""
    while chunk := os.read(0, 1 << 20):
        dst.write(chunk)
        dst.flush()
    dst.close()


def main() -> None:
    out_path, real, *args = sys.argv[1:]
    proc = subprocess.Popen([real, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    threading.Thread(target=_pump, args=(proc.stdin,), daemon=True).start()
    answers: list[bytes] = []
    pending = bytearray()
    src, dst = proc.stdout, sys.stdout.buffer
    while header := src.readline():
        frame = bytearray()
        length = 0
        while header.strip():
            name, _, value = header.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
            frame += header
            header = src.readline()
        body = src.read(length)
        frame += header + body
        dst.write(frame)
        dst.flush()
        pending += frame
        message = msgspec.json.decode(body)
        if "id" in message and "method" not in message:  # a reply: it ends its answer
            answers.append(bytes(pending))
            pending.clear()
    with open(out_path, "wb") as f:
        f.write(msgspec.json.encode(answers))
    proc.wait()


if __name__ == "__main__":
    main()
