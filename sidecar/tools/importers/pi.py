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
    want_int,
    want_num,
    want_obj,
    want_str,
)

SOURCE = "pi"

_FINISH = {"toolUse": "tool-calls", "stop": "stop", "length": "length", "error": "error"}
#: Message roles pi writes; another is an error, never dropped silently.
_ROLES = frozenset(
    {"user", "assistant", "toolResult", "bashExecution", "custom", "compactionSummary"}
    | {"branchSummary", "hookMessage"}
)


def looks_like(first: dict[str, Any]) -> bool:
    return first.get("type") == "session" and ("cwd" in first or "version" in first)


def _path(
    path: Path, entries: list[tuple[int, dict[str, Any]]]
) -> list[tuple[int, dict[str, Any]]]:
    """The current branch: from the last entry back along ``parentId`` (v2+), else all."""
    for n, e in entries:
        for key in ("id", "parentId"):
            if e.get(key) is not None and not isinstance(e[key], str):
                raise ImportFailure(f"{path}:{n}: field {key!r}: expected a string")
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


def _text(content: Any, where: str, name: str = "message.content") -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        out = []
        for i, b in enumerate(content):
            if isinstance(b, dict) and b.get("type") == "text":
                out.append(want_str(b, "text", where, f"{name}[{i}].text"))
        return "\n".join(out)
    raise ImportFailure(f"{where}: field {name!r}: expected text or a list")


def _images(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "image"]


def read(path: Path, data: bytes) -> list[Imported]:
    entries = read_jsonl(str(path), data)
    n0, header = entries[0]
    if not looks_like(header):
        raise ImportFailure(f"{path}:{n0}: not a pi session header (type 'session' expected)")
    sid = header.get("id")
    if not isinstance(sid, str) or not sid:
        raise ImportFailure(f"{path}:{n0}: field 'id': missing")
    d = Draft(str(path), SOURCE)
    d.session_id = f"ses_{sid}"
    d.directory = header.get("cwd") if isinstance(header.get("cwd"), str) else None
    d.created = iso_ms(header.get("timestamp"), f"{path}:{n0}") or 0
    provider = want_str(header, "provider", f"{path}:{n0}")
    model = want_str(header, "modelId", f"{path}:{n0}")
    last_user = ""
    calls: dict[str, dict[str, Any]] = {}
    msg_of_entry: dict[str, str] = {}
    pending_tail: list[tuple[dict[str, Any], str]] = []
    marker: dict[str, Any]
    info: dict[str, Any]
    for n, entry in _path(path, entries[1:]):
        where = f"{path}:{n}"
        kind = entry.get("type")
        eid = str(entry.get("id") or f"l{n}")
        ts = iso_ms(entry.get("timestamp"), where)
        if kind == "model_change":
            provider = want_str(entry, "provider", where) or provider
            model = want_str(entry, "modelId", where) or model
        elif kind == "session_info" and entry.get("name"):
            d.title = str(entry["name"])
        elif kind == "compaction":
            summary = entry.get("summary")
            if not isinstance(summary, str):  # missing or not text
                raise ImportFailure(f"{path}:{n}: compaction: field 'summary': missing")
            d.known(ts, where)
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
            if kind == "message" and role not in _ROLES:
                raise ImportFailure(
                    f"{where}: field 'message.role': {str(role)[:40]!r} is not a known role"
                )
            when = iso_ms(msg.get("timestamp"), where, "message.timestamp") or ts
            created = d.tick(d.known(when, where))
            mid = f"msg_{eid}"
            if role == "assistant":
                provider = want_str(msg, "provider", where, "message.provider") or provider
                model = want_str(msg, "model", where, "message.model") or model
                usage = want_obj(msg, "usage", where, "message.usage")
                cost = want_obj(usage, "cost", where, "message.usage.cost")
                stop = msg.get("stopReason")
                info = {
                    "id": mid,
                    "role": "assistant",
                    "parentID": last_user,
                    "providerID": provider,
                    "modelID": model,
                    "time": {"created": created, "completed": created},
                    "tokens": {
                        "input": want_int(usage, "input", where, "message.usage.input"),
                        "output": want_int(usage, "output", where, "message.usage.output"),
                        "reasoning": 0,
                        "cache": {
                            "read": want_int(usage, "cacheRead", where, "message.usage.cacheRead"),
                            "write": want_int(
                                usage, "cacheWrite", where, "message.usage.cacheWrite"
                            ),
                        },
                    },
                    "cost": want_num(cost, "total", where, "message.usage.cost.total"),
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
                for i, block in enumerate(content):
                    at_b = f"message.content[{i}]"
                    if not isinstance(block, dict):
                        raise ImportFailure(f"{where}: field {at_b!r}: expected an object")
                    btype = block.get("type")
                    if btype == "text":
                        if text := want_str(block, "text", where, f"{at_b}.text"):
                            d.part(parts, info, {"type": "text", "text": text})
                    elif btype == "thinking":
                        if text := want_str(block, "thinking", where, f"{at_b}.thinking"):
                            d.part(parts, info, {"type": "reasoning", "text": text})
                    elif btype == "toolCall":
                        call = want_str(block, "id", where, f"{at_b}.id")
                        if not call:
                            raise ImportFailure(f"{where}: field '{at_b}.id': missing")
                        name = want_str(block, "name", where, f"{at_b}.name")
                        args = want_obj(block, "arguments", where, f"{at_b}.arguments")
                        calls[call] = d.tool_call(parts, info, call, name, args)
            elif role == "toolResult":
                call = want_str(msg, "toolCallId", where, "message.toolCallId")
                part = calls.get(call)
                if part is None:
                    raise ImportFailure(
                        f"{path}:{n}: toolResult: field 'toolCallId': no call {call!r} before it"
                    )
                output = _text(msg.get("content"), where)
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
                    command = want_str(msg, "command", where, "message.command")
                    text = f"$ {command}\n{want_str(msg, 'output', where, 'message.output')}"
                elif role in ("branch_summary", "branchSummary"):
                    text = want_str(msg, "summary", where, "summary")
                elif role == "compactionSummary":
                    text = want_str(msg, "summary", where, "message.summary")
                else:  # user, custom_message, custom, hookMessage: content as text
                    text = _text(msg.get("content"), where)
                info = {"id": mid, "role": "user", "time": {"created": created}}
                if model:
                    info["model"] = {"providerID": provider, "modelID": model}
                parts = d.message(info, n)
                if text:
                    d.part(parts, info, {"type": "text", "text": text})
                for block in _images(msg.get("content")):
                    mime = want_str(block, "mimeType", where, "image.mimeType") or "image/png"
                    url = f"data:{mime};base64,{want_str(block, 'data', where, 'image.data')}"
                    d.part(parts, info, {"type": "file", "mime": mime, "url": url})
                last_user = mid
                if role == "user" and not d.title and text.strip():
                    d.title = text_title(text)
            msg_of_entry[eid] = mid
    for compaction, kept in pending_tail:
        if kept in msg_of_entry:
            compaction["tailStartID"] = msg_of_entry[kept]
    return [d.finish()]
