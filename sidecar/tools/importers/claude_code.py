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
    want_int,
    want_obj,
    want_str,
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


def _result_text(content: Any, where: str, name: str) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        out = []
        for i, b in enumerate(content):
            if isinstance(b, dict) and b.get("type") == "text":
                out.append(want_str(b, "text", where, f"{name}[{i}].text"))
        return "\n".join(out)
    raise ImportFailure(f"{where}: field {name!r}: expected text or a list")


def read(path: Path, data: bytes) -> list[Imported]:
    records = read_jsonl(str(path), data)
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
        where = f"{path}:{n}"
        if kind == "summary" and isinstance(rec.get("summary"), str):
            summary_title = summary_title or rec["summary"]
            continue
        if "message" in rec and kind not in ("user", "assistant"):
            # A message under a record type we do not know is never dropped silently.
            raise ImportFailure(f"{where}: field 'type': {str(kind)[:40]!r} is not a known role")
        if kind not in ("user", "assistant", "system") or (rec.get("isSidechain") and not subagent):
            continue
        if not d.session_id and want_str(rec, "sessionId", where):
            d.session_id = f"ses_{rec['sessionId']}"
            if subagent:
                d.parent_id = d.session_id
                d.session_id = f"{d.session_id}_{path.stem}"
        if not d.directory and isinstance(rec.get("cwd"), str):
            d.directory = rec["cwd"]
        uuid = want_str(rec, "uuid", where)
        if not uuid:
            raise ImportFailure(f"{path}:{n}: field 'uuid': missing")
        ts = d.known(iso_ms(rec.get("timestamp"), where), where)
        if kind == "system":
            if rec.get("subtype") == "compact_boundary":
                meta = want_obj(rec, "compactMetadata", where)
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
        role = msg.get("role")
        if role is not None and role != kind:
            raise ImportFailure(
                f"{where}: field 'message.role': {str(role)[:40]!r} is not a known role "
                f"for a {kind!r} record"
            )
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
            text = _result_text(content, where, "message.content")
            d.part(d.message(reply, n), reply, {"type": "text", "text": text})
            marker = None
            continue
        if kind == "user":
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            if not isinstance(blocks, list):
                raise ImportFailure(f"{path}:{n}: field 'message.content': expected text or a list")
            texts: list[str] = []
            images: list[dict[str, Any]] = []
            for i, b in enumerate(blocks):
                at_b = f"message.content[{i}]"
                if not isinstance(b, dict):
                    raise ImportFailure(f"{where}: field {at_b!r}: expected an object")
                if b.get("type") == "tool_result":
                    call = want_str(b, "tool_use_id", where, f"{at_b}.tool_use_id")
                    part = calls.get(call)
                    if part is None:
                        raise ImportFailure(
                            f"{path}:{n}: tool_result: field 'tool_use_id': "
                            f"no tool_use {call!r} before it"
                        )
                    at = d.tick(ts)
                    out = _result_text(b.get("content"), where, f"{at_b}.content")
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
                elif b.get("type") == "text":
                    if text := want_str(b, "text", where, f"{at_b}.text"):
                        texts.append(text)
                elif b.get("type") == "image" and isinstance(b.get("source"), dict):
                    src = b["source"]
                    for key in ("media_type", "data", "url", "type"):
                        want_str(src, key, where, f"{at_b}.source.{key}")
                    images.append(src)
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
        key = want_str(msg, "id", where, "message.id") or uuid
        usage = want_obj(msg, "usage", where, "message.usage")
        if key not in assistant:
            created = d.tick(ts)
            info = {
                "id": f"msg_{uuid}",
                "role": "assistant",
                "parentID": last_user,
                "providerID": "anthropic",
                "modelID": want_str(msg, "model", where, "message.model"),
                "time": {"created": created, "completed": created},
                "finish": "stop",
            }
            assistant[key] = (info, d.message(info, n))
        info, parts = assistant[key]
        info["tokens"] = {
            "input": want_int(usage, "input_tokens", where, "message.usage.input_tokens"),
            "output": want_int(usage, "output_tokens", where, "message.usage.output_tokens"),
            "reasoning": 0,
            "cache": {
                "read": want_int(
                    usage, "cache_read_input_tokens", where, "message.usage.cache_read_input_tokens"
                ),
                "write": want_int(
                    usage,
                    "cache_creation_input_tokens",
                    where,
                    "message.usage.cache_creation_input_tokens",
                ),
            },
        }
        if stop := want_str(msg, "stop_reason", where, "message.stop_reason"):
            info["finish"] = _FINISH.get(stop, stop)
        info["time"]["completed"] = max(info["time"]["completed"], ts or 0)
        if not isinstance(content, list):
            raise ImportFailure(f"{path}:{n}: field 'message.content': expected a list")
        for i, b in enumerate(content):
            at_b = f"message.content[{i}]"
            if not isinstance(b, dict):
                raise ImportFailure(f"{where}: field {at_b!r}: expected an object")
            btype = b.get("type")
            if btype == "text":
                if text := want_str(b, "text", where, f"{at_b}.text"):
                    d.part(parts, info, {"type": "text", "text": text})
            elif btype == "thinking":
                if text := want_str(b, "thinking", where, f"{at_b}.thinking"):
                    d.part(parts, info, {"type": "reasoning", "text": text})
            elif btype == "tool_use":
                call = want_str(b, "id", where, f"{at_b}.id")
                if not call:
                    raise ImportFailure(f"{path}:{n}: field '{at_b}.id': missing")
                name = want_str(b, "name", where, f"{at_b}.name")
                args = want_obj(b, "input", where, f"{at_b}.input")
                calls[call] = d.tool_call(parts, info, call, name, args)
    if summary_title:
        d.title = summary_title
    return [d.finish()]
