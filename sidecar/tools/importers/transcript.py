"""The project's neutral transcript JSONL (``sidecar.model.transcript``).

Transcripts carry no ids or times: ids are made from the header's ``session`` name and times
from the file's modification time, ascending in file order, so that importing the same file
twice gives the same session.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from sidecar.model.transcript import parse
from sidecar.tools.importers.common import (
    Draft,
    Imported,
    ImportFailure,
    check_time,
    read_jsonl,
    text_title,
)

SOURCE = "transcript"


def looks_like(first: dict[str, Any]) -> bool:
    return isinstance(first.get("session"), str) and "type" not in first and "role" not in first


def read(path: Path, data: bytes) -> list[Imported]:
    read_jsonl(str(path), data)  # every line JSON: depth, UTF-8 and syntax named by line
    try:
        t = parse(data, str(path))
    except ValueError as exc:
        raise ImportFailure(str(exc)) from None
    d = Draft(str(path), SOURCE)
    digest = hashlib.sha256(t.session.encode()).hexdigest()[:24]
    d.session_id = f"ses_{digest}"
    d.title = t.session
    # The file's modification time: a re-import of the same file is the same session.
    base = int(path.stat().st_mtime * 1000) - len(t.messages)
    check_time(base, str(path), "modification time")
    last_user = ""
    for i, m in enumerate(t.messages, start=2):
        at = d.tick(base)
        mid = f"msg_{digest}{i:06d}"
        if m.role == "user":
            info: dict[str, Any] = {"id": mid, "role": "user", "time": {"created": at}}
            last_user = mid
        else:
            tok = m.tokens
            info = {
                "id": mid,
                "role": "assistant",
                "parentID": last_user,
                "providerID": "transcript",
                "modelID": m.model or t.model,
                "time": {"created": at, "completed": at},
                "finish": "stop",
            }
            if tok is not None:
                info["tokens"] = {
                    "input": tok.input,
                    "output": tok.output,
                    "reasoning": 0,
                    "cache": {"read": tok.cache_read, "write": tok.cache_write},
                }
        parts = d.message(info, i)
        for p in m.parts:
            if p.type == "tool":
                if m.role != "assistant":
                    raise ImportFailure(f"{path}:{i}: a tool part in a {m.role} message")
                state: dict[str, Any] = (
                    {"status": "error", "input": p.input, "error": p.output or "aborted"}
                    if p.status == "error"
                    else p.completed_state(at)
                )
                d.part(
                    parts,
                    info,
                    {"type": "tool", "callID": p.callID, "tool": p.tool, "state": state},
                )
            else:
                d.part(parts, info, {"type": p.type, "text": p.text})
        if m.role == "user" and d.title == t.session and not t.session:
            d.title = text_title(" ".join(p.text for p in m.parts))
    return [d.finish()]
