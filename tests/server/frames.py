"""Reading back what the protocol wrote: Content-Length frames to decoded JSON messages."""

from __future__ import annotations

import json
from typing import Any


def split_frames(data: bytes) -> list[Any]:
    out, buf = [], data
    while buf:
        head, _, rest = buf.partition(b"\r\n\r\n")
        n = int(head.split(b":")[1])
        out.append(json.loads(rest[:n]))
        buf = rest[n:]
    return out
