"""Claude Code session logs (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is a record: ``user`` and ``assistant`` carry an Anthropic ``message``; Claude Code
writes one response as several ``assistant`` lines (one content block each) sharing
``message.id``, which are merged here. A ``tool_result`` block in a user line is folded into
its call's tool part. A ``system`` record with ``subtype: compact_boundary`` starts a
compaction: it becomes a marker (``auto`` from ``compactMetadata.trigger``) and the following
``isCompactSummary`` user line becomes the finished summary reply. Sidechain (subagent)
records are left out: they never were in the main conversation's context.
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

SOURCE = "claude-code"
RECORD_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"}
)
_FINISH = {"tool_use": "tool-calls", "end_turn": "stop", "max_tokens": "length"}


def looks_like(first: dict[str, Any]) -> bool:
    return first.get("type") in RECORD_TYPES and (
        "sessionId" in first or "leafUuid" in first or "uuid" in first or "messageId" in first
    )


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", ""))
            for b in content
            if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def read(path: Path) -> list[Imported]:
    records = read_jsonl(str(path), path.read_bytes())
    d = Draft(str(path), SOURCE)
    calls: dict[str, dict[str, Any]] = {}
    assistant: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
    last_user = ""
    marker: dict[str, Any] | None = None
    info: dict[str, Any]
    summary_title = ""
    # A subagent's own log (``agent-*.jsonl``) is all sidechain: import it as a child session.
    convo = [r for _, r in records if r.get("type") in ("user", "assistant")]
    subagent = bool(convo) and all(r.get("isSidechain") for r in convo)
    for n, rec in records:
        kind = rec.get("type")
        if kind == "summary" and isinstance(rec.get("summary"), str):
            summary_title = summary_title or rec["summary"]
            continue
        if kind not in ("user", "assistant", "system") or (rec.get("isSidechain") and not subagent):
            continue
        if not d.session_id and isinstance(rec.get("sessionId"), str):
            d.session_id = f"ses_{rec['sessionId']}"
            if subagent:
                d.parent_id = d.session_id
                d.session_id = f"{d.session_id}_{path.stem}"
        if not d.directory and isinstance(rec.get("cwd"), str):
            d.directory = rec["cwd"]
        uuid = rec.get("uuid")
        if not isinstance(uuid, str) or not uuid:
            raise ImportFailure(f"{path}:{n}: field 'uuid': missing")
        ts = iso_ms(rec.get("timestamp"))
        if kind == "system":
            if rec.get("subtype") == "compact_boundary":
                meta = rec.get("compactMetadata") or {}
                marker = {"id": f"msg_{uuid}", "role": "user", "time": {"created": d.tick(ts)}}
                parts = d.message(marker, n)
                d.part(
                    parts, marker, {"type": "compaction", "auto": meta.get("trigger") != "manual"}
                )
                last_user = marker["id"]
            continue
        msg = rec.get("message")
        if not isinstance(msg, dict):
            raise ImportFailure(f"{path}:{n}: field 'message': expected an object")
        content = msg.get("content")
        if kind == "user" and rec.get("isCompactSummary") and marker is not None:
            at = d.tick(ts)
            reply = {
                "id": f"msg_{uuid}",
                "role": "assistant",
                "parentID": marker["id"],
                "providerID": "anthropic",
                "modelID": "",
                "mode": "compaction",
                "summary": True,
                "time": {"created": at, "completed": at},
                "finish": "stop",
            }
            d.part(d.message(reply, n), reply, {"type": "text", "text": _result_text(content)})
            marker = None
            continue
        if kind == "user":
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise ImportFailure(f"{path}:{n}: field 'message.content': expected text or a list")
            texts: list[str] = []
            images: list[dict[str, Any]] = []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_result":
                    call = str(b.get("tool_use_id") or "")
                    part = calls.get(call)
                    if part is None:
                        raise ImportFailure(
                            f"{path}:{n}: tool_result: field 'tool_use_id': "
                            f"no tool_use {call!r} before it"
                        )
                    at = d.tick(ts)
                    out = _result_text(b.get("content"))
                    state = part["state"]
                    tool_time = {"start": at, "end": at}
                    part["state"] = (
                        {
                            "status": "error",
                            "input": state["input"],
                            "error": out,
                            "time": tool_time,
                        }
                        if b.get("is_error")
                        else {
                            "status": "completed",
                            "input": state["input"],
                            "output": out,
                            "title": part["tool"],
                            "time": tool_time,
                        }
                    )
                elif b.get("type") == "text" and b.get("text"):
                    texts.append(str(b["text"]))
                elif b.get("type") == "image" and isinstance(b.get("source"), dict):
                    images.append(b["source"])
            if texts or images:
                info = {"id": f"msg_{uuid}", "role": "user", "time": {"created": d.tick(ts)}}
                parts = d.message(info, n)
                for t in texts:
                    d.part(parts, info, {"type": "text", "text": t})
                for src in images:
                    mime = str(src.get("media_type") or "image/png")
                    url = f"data:{mime};base64,{src.get('data', '')}"
                    if src.get("type") == "url":
                        url = str(src.get("url") or "")
                    d.part(parts, info, {"type": "file", "mime": mime, "url": url})
                last_user = info["id"]
                if texts and not d.title and not rec.get("isMeta"):
                    d.title = text_title(texts[0])
            continue
        # assistant: merge the lines of one response (same message.id)
        key = str(msg.get("id") or uuid)
        usage = msg.get("usage") or {}
        if key not in assistant:
            created = d.tick(ts)
            info = {
                "id": f"msg_{uuid}",
                "role": "assistant",
                "parentID": last_user,
                "providerID": "anthropic",
                "modelID": str(msg.get("model") or ""),
                "time": {"created": created, "completed": created},
                "finish": "stop",
            }
            assistant[key] = (info, d.message(info, n))
        info, parts = assistant[key]
        info["tokens"] = {
            "input": int(usage.get("input_tokens") or 0),
            "output": int(usage.get("output_tokens") or 0),
            "reasoning": 0,
            "cache": {
                "read": int(usage.get("cache_read_input_tokens") or 0),
                "write": int(usage.get("cache_creation_input_tokens") or 0),
            },
        }
        if msg.get("stop_reason"):
            info["finish"] = _FINISH.get(str(msg["stop_reason"]), str(msg["stop_reason"]))
        info["time"]["completed"] = max(info["time"]["completed"], ts or 0)
        if not isinstance(content, list):
            raise ImportFailure(f"{path}:{n}: field 'message.content': expected a list")
        for b in content:
            if not isinstance(b, dict):
                continue
            btype = b.get("type")
            if btype == "text" and b.get("text"):
                d.part(parts, info, {"type": "text", "text": str(b["text"])})
            elif btype == "thinking" and b.get("thinking"):
                d.part(parts, info, {"type": "reasoning", "text": str(b["thinking"])})
            elif btype == "tool_use":
                call = str(b.get("id") or "")
                if not call:
                    raise ImportFailure(f"{path}:{n}: tool_use: field 'id': missing")
                calls[call] = d.tool_call(parts, info, call, b.get("name"), b.get("input"))
    if summary_title:
        d.title = summary_title
    return [d.finish()]
