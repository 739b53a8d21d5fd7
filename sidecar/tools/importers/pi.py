"""pi (badlogic/pi-mono coding agent) session JSONL, versions 1 to 3.

A header line ``{"type": "session", id, cwd, ...}`` then entries. Version 2+ entries form a
tree by ``id``/``parentId``; the session is the path from the last entry back to the root,
as pi's own ``buildSessionContext`` walks it. ``message`` entries hold pi-ai messages
(``user``, ``assistant`` with ``toolCall`` blocks, ``toolResult``, ``bashExecution``...); a
tool result is folded into its call's tool part. A ``compaction`` entry becomes a marker and a
finished summary whose ``tailStartID`` is the first kept message, so the imported window is
pi's: the summary, then the kept messages, then what followed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.tools.importers.common import (
    Draft,
    Imported,
    ImportFailure,
    iso_ms,
    read_jsonl,
    text_title,
)

SOURCE = "pi"

_FINISH = {"toolUse": "tool-calls", "stop": "stop", "length": "length", "error": "error"}


def looks_like(first: dict[str, Any]) -> bool:
    return first.get("type") == "session" and ("cwd" in first or "version" in first)


def _path(entries: list[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """The current branch: from the last entry back along ``parentId`` (v2+), else all."""
    if not any("id" in e and "parentId" in e for _, e in entries):
        return entries
    by_id = {e["id"]: (n, e) for n, e in entries if "id" in e}
    out: list[tuple[int, dict[str, Any]]] = []
    cur: Any = entries[-1][1].get("id")
    seen: set[str] = set()
    while cur is not None and cur in by_id and cur not in seen:
        seen.add(cur)
        n, e = by_id[cur]
        out.append((n, e))
        cur = e.get("parentId")
    out.reverse()
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _images(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "image"]


def read(path: Path) -> list[Imported]:
    entries = read_jsonl(str(path), path.read_bytes())
    n0, header = entries[0]
    if not looks_like(header):
        raise ImportFailure(f"{path}:{n0}: not a pi session header (type 'session' expected)")
    sid = header.get("id")
    if not isinstance(sid, str) or not sid:
        raise ImportFailure(f"{path}:{n0}: field 'id': missing")
    d = Draft(str(path), SOURCE)
    d.session_id = f"ses_{sid}"
    d.directory = header.get("cwd") if isinstance(header.get("cwd"), str) else None
    d.created = iso_ms(header.get("timestamp")) or 0
    provider = str(header.get("provider") or "")
    model = str(header.get("modelId") or "")
    last_user = ""
    calls: dict[str, dict[str, Any]] = {}
    msg_of_entry: dict[str, str] = {}
    pending_tail: list[tuple[dict[str, Any], str]] = []
    marker: dict[str, Any]
    info: dict[str, Any]
    for n, entry in _path(entries[1:]):
        kind = entry.get("type")
        eid = str(entry.get("id") or f"l{n}")
        ts = iso_ms(entry.get("timestamp"))
        if kind == "model_change":
            provider = str(entry.get("provider") or provider)
            model = str(entry.get("modelId") or model)
        elif kind == "session_info" and entry.get("name"):
            d.title = str(entry["name"])
        elif kind == "compaction":
            summary = entry.get("summary")
            if not isinstance(summary, str):
                raise ImportFailure(f"{path}:{n}: compaction: field 'summary': missing")
            marker = {"id": f"msg_{eid}", "role": "user", "time": {"created": d.tick(ts)}}
            parts = d.message(marker, n)
            body: dict[str, Any] = {"type": "compaction", "auto": bool(entry.get("auto", True))}
            kept = entry.get("firstKeptEntryId")
            index = entry.get("firstKeptEntryIndex")  # version 1: an index into the file's entries
            if kept is None and isinstance(index, int) and 0 < index < len(entries):
                n_k, e_k = entries[index]
                kept = str(e_k.get("id") or f"l{n_k}")
            compaction = d.part(parts, marker, body)
            if isinstance(kept, str):
                pending_tail.append((compaction, kept))
            at = d.tick(ts)
            reply = {
                "id": f"msg_{eid}_summary",
                "role": "assistant",
                "parentID": marker["id"],
                "providerID": provider,
                "modelID": model,
                "mode": "compaction",
                "summary": True,
                "time": {"created": at, "completed": at},
                "finish": "stop",
            }
            d.part(d.message(reply, n), reply, {"type": "text", "text": summary})
            last_user = marker["id"]
        elif kind in ("message", "custom_message", "branch_summary"):
            msg = entry.get("message") if kind == "message" else entry
            if not isinstance(msg, dict):
                raise ImportFailure(f"{path}:{n}: field 'message': expected an object")
            role = msg.get("role") if kind == "message" else kind
            created = d.tick(iso_ms(msg.get("timestamp")) or ts)
            mid = f"msg_{eid}"
            if role == "assistant":
                provider = str(msg.get("provider") or provider)
                model = str(msg.get("model") or model)
                usage = msg.get("usage") or {}
                stop = msg.get("stopReason")
                info = {
                    "id": mid,
                    "role": "assistant",
                    "parentID": last_user,
                    "providerID": provider,
                    "modelID": model,
                    "time": {"created": created, "completed": created},
                    "tokens": {
                        "input": int(usage.get("input") or 0),
                        "output": int(usage.get("output") or 0),
                        "reasoning": 0,
                        "cache": {
                            "read": int(usage.get("cacheRead") or 0),
                            "write": int(usage.get("cacheWrite") or 0),
                        },
                    },
                    "cost": float((usage.get("cost") or {}).get("total") or 0),
                    "finish": _FINISH.get(str(stop), "stop"),
                }
                if stop == "aborted":
                    info["error"] = {"name": "MessageAbortedError", "data": {}}
                elif stop == "error":
                    info["error"] = {
                        "name": "UnknownError",
                        "data": {"message": str(msg.get("errorMessage") or "")},
                    }
                parts = d.message(info, n)
                content = msg.get("content") or []
                if not isinstance(content, list):
                    raise ImportFailure(f"{path}:{n}: field 'message.content': expected a list")
                for block in content:
                    if not isinstance(block, dict):
                        continue
                    btype = block.get("type")
                    if btype == "text" and block.get("text"):
                        d.part(parts, info, {"type": "text", "text": block["text"]})
                    elif btype == "thinking" and block.get("thinking"):
                        d.part(parts, info, {"type": "reasoning", "text": block["thinking"]})
                    elif btype == "toolCall":
                        call = str(block.get("id") or "")
                        if not call:
                            raise ImportFailure(f"{path}:{n}: toolCall: field 'id': missing")
                        calls[call] = d.tool_call(
                            parts, info, call, block.get("name"), block.get("arguments")
                        )
            elif role == "toolResult":
                call = str(msg.get("toolCallId") or "")
                part = calls.get(call)
                if part is None:
                    raise ImportFailure(
                        f"{path}:{n}: toolResult: field 'toolCallId': no call {call!r} before it"
                    )
                output = _text(msg.get("content"))
                state = part["state"]
                tool_time = {"start": created, "end": created}
                if msg.get("isError"):
                    part["state"] = {
                        "status": "error",
                        "input": state["input"],
                        "error": output,
                        "time": tool_time,
                    }
                else:
                    part["state"] = {
                        "status": "completed",
                        "input": state["input"],
                        "output": output,
                        "title": part["tool"],
                        "time": tool_time,
                    }
                d.tick(None)
                msg_of_entry[eid] = part["messageID"]
                continue
            else:
                if role == "bashExecution":
                    if msg.get("excludeFromContext"):
                        continue
                    text = f"$ {msg.get('command', '')}\n{msg.get('output', '')}"
                elif role == "branch_summary":
                    text = str(entry.get("summary") or "")
                elif role in ("user", "custom_message", "custom"):
                    text = _text(msg.get("content"))
                elif role == "compactionSummary":
                    text = str(msg.get("summary") or "")
                else:
                    continue
                info = {"id": mid, "role": "user", "time": {"created": created}}
                if model:
                    info["model"] = {"providerID": provider, "modelID": model}
                parts = d.message(info, n)
                if text:
                    d.part(parts, info, {"type": "text", "text": text})
                for block in _images(msg.get("content")):
                    mime = str(block.get("mimeType") or "image/png")
                    url = f"data:{mime};base64,{block.get('data', '')}"
                    d.part(parts, info, {"type": "file", "mime": mime, "url": url})
                last_user = mid
                if role == "user" and not d.title and text.strip():
                    d.title = text_title(text)
            msg_of_entry[eid] = mid
    for compaction, kept in pending_tail:
        if kept in msg_of_entry:
            compaction["tailStartID"] = msg_of_entry[kept]
    return [d.finish()]
