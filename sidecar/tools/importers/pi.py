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

from sidecar.tools.importers import common

SOURCE = "pi"

_FINISH = {"toolUse": "tool-calls", "stop": "stop", "length": "length", "error": "error"}
#: Message roles pi writes; another is an error, never dropped silently.
_ROLES = frozenset(
    {"user", "assistant", "toolResult", "bashExecution", "custom", "compactionSummary"}
    | {"branchSummary", "hookMessage"}
)

# pi-ai's ``usage``: input, output, cache-read and cache-write counts.
USAGE_KEYS = ("input", "output", "cacheRead", "cacheWrite")


def looks_like(first: dict[str, Any]) -> bool:
    return first.get("type") == "session" and ("cwd" in first or "version" in first)


def _path(
    path: Path, entries: list[tuple[int, dict[str, Any]]]
) -> list[tuple[int, dict[str, Any]]]:
    """The current branch: from the last entry back along ``parentId`` (v2+), else all."""
    for n, e in entries:
        for key in ("id", "parentId"):
            if e.get(key) is not None and not isinstance(e[key], str):
                raise common.ImportFailure(f"{path}:{n}: field {key!r}: expected a string")
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


def _images(content: Any) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "image"]


def read(path: Path, data: bytes) -> list[common.Imported]:
    entries = common.read_jsonl(str(path), data)
    reader = _Reader(path, entries)
    for n, entry in _path(path, entries[1:]):
        reader.entry(n, entry)
    return [reader.finish()]


class _Reader:
    """One session read entry by entry: each entry kind and message role has its step."""

    def __init__(self, path: Path, entries: list[tuple[int, dict[str, Any]]]) -> None:
        n0, header = entries[0]
        if not looks_like(header):
            raise common.ImportFailure(
                f"{path}:{n0}: not a pi session header (type 'session' expected)"
            )
        sid = header.get("id")
        if not isinstance(sid, str) or not sid:
            raise common.ImportFailure(f"{path}:{n0}: field 'id': missing")
        self.path = path
        self.entries = entries
        d = self.d = common.Draft(str(path), SOURCE)
        d.session_id = f"ses_{sid}"
        d.directory = header.get("cwd") if isinstance(header.get("cwd"), str) else None
        d.created = common.iso_ms(header.get("timestamp"), f"{path}:{n0}") or 0
        self.provider = common.want_str(header, "provider", f"{path}:{n0}")
        self.model = common.want_str(header, "modelId", f"{path}:{n0}")
        self.last_user = ""
        self.calls: dict[str, dict[str, Any]] = {}
        # Entry id -> the message it became (a tool result: its call's message).
        self.msg_of_entry: dict[str, str] = {}
        # Compaction parts and the entry id of their first kept message.
        self.pending_tail: list[tuple[dict[str, Any], str]] = []

    def finish(self) -> common.Imported:
        for compaction, kept in self.pending_tail:
            if kept in self.msg_of_entry:
                compaction["tailStartID"] = self.msg_of_entry[kept]
        return self.d.finish()

    def entry(self, n: int, entry: dict[str, Any]) -> None:
        where = f"{self.path}:{n}"
        kind = entry.get("type")
        eid = str(entry.get("id") or f"l{n}")
        ts = common.iso_ms(entry.get("timestamp"), where)
        if kind == "model_change":
            self.provider = common.want_str(entry, "provider", where) or self.provider
            self.model = common.want_str(entry, "modelId", where) or self.model
        elif kind == "session_info" and entry.get("name"):
            self.d.title = str(entry["name"])
        elif kind == "compaction":
            self._compaction(n, entry, eid, ts, where)
        elif kind in ("message", "custom_message", "branch_summary"):
            self._message(n, kind, entry, eid, ts, where)

    def _compaction(
        self, n: int, entry: dict[str, Any], eid: str, ts: int | None, where: str
    ) -> None:
        """A marker with its compaction part, then the finished summary reply."""
        d = self.d
        summary = entry.get("summary")
        if not isinstance(summary, str):  # missing or not text
            raise common.ImportFailure(f"{where}: compaction: field 'summary': missing")
        d.known(ts, where)
        auto = bool(entry.get("auto", True))
        marker, compaction = d.compaction(f"msg_{eid}", d.tick(ts), auto, n)
        kept = entry.get("firstKeptEntryId")
        index = entry.get("firstKeptEntryIndex")  # version 1: an index into the file's entries
        if kept is None and isinstance(index, int) and 0 < index < len(self.entries):
            n_k, e_k = self.entries[index]
            kept = str(e_k.get("id") or f"l{n_k}")
        if isinstance(kept, str):
            self.pending_tail.append((compaction, kept))
        model = (self.provider, self.model)
        d.summary(f"msg_{eid}_summary", marker["id"], model, d.tick(ts), summary, n)
        self.last_user = marker["id"]

    def _message(
        self, n: int, kind: str, entry: dict[str, Any], eid: str, ts: int | None, where: str
    ) -> None:
        """A ``message`` entry (by its role), or a custom message or branch summary."""
        msg = entry.get("message") if kind == "message" else entry
        if not isinstance(msg, dict):
            raise common.ImportFailure(f"{where}: field 'message': expected an object")
        role = msg.get("role") if kind == "message" else kind
        if kind == "message" and role not in _ROLES:
            raise common.ImportFailure(
                f"{where}: field 'message.role': {str(role)[:40]!r} is not a known role"
            )
        when = common.iso_ms(msg.get("timestamp"), where, "message.timestamp") or ts
        created = self.d.tick(self.d.known(when, where))
        mid = f"msg_{eid}"
        if role == "assistant":
            self._assistant(n, msg, mid, created, where)
        elif role == "toolResult":
            self.msg_of_entry[eid] = self._tool_result(msg, created, where)
            return
        elif not self._user(n, str(role), msg, mid, created, where):
            return
        self.msg_of_entry[eid] = mid

    def _assistant(self, n: int, msg: dict[str, Any], mid: str, created: int, where: str) -> None:
        self.provider = common.want_str(msg, "provider", where, "message.provider") or self.provider
        self.model = common.want_str(msg, "model", where, "message.model") or self.model
        usage = common.want_obj(msg, "usage", where, "message.usage")
        cost = common.want_obj(usage, "cost", where, "message.usage.cost")
        stop = msg.get("stopReason")
        info: dict[str, Any] = {
            "id": mid,
            "role": "assistant",
            "parentID": self.last_user,
            "providerID": self.provider,
            "modelID": self.model,
            "time": {"created": created, "completed": created},
            "tokens": common.usage_tokens(usage, where, USAGE_KEYS),
            "cost": common.want_num(cost, "total", where, "message.usage.cost.total"),
            "finish": _FINISH.get(str(stop), "stop"),
        }
        if stop == "aborted":
            info["error"] = {"name": "MessageAbortedError", "data": {}}
        elif stop == "error":
            info["error"] = {
                "name": "UnknownError",
                "data": {"message": str(msg.get("errorMessage") or "")},
            }
        parts = self.d.message(info, n)
        content = msg.get("content") or []
        if not isinstance(content, list):
            raise common.ImportFailure(f"{where}: field 'message.content': expected a list")
        common.assistant_blocks(
            self.d, parts, info, content, where, self.calls, tool="toolCall", args="arguments"
        )

    def _tool_result(self, msg: dict[str, Any], created: int, where: str) -> str:
        """Fold a result into its call's part; returns that part's message id."""
        call = common.want_str(msg, "toolCallId", where, "message.toolCallId")
        part = self.calls.get(call)
        if part is None:
            raise common.ImportFailure(
                f"{where}: toolResult: field 'toolCallId': no call {call!r} before it"
            )
        common.fold_result(
            part, common.text_of(msg.get("content"), where), created, msg.get("isError")
        )
        self.d.tick(None)
        message_id: str = part["messageID"]
        return message_id

    def _user(
        self, n: int, role: str, msg: dict[str, Any], mid: str, created: int, where: str
    ) -> bool:
        """Every other role is a user message of text (and images); False when it is left
        out (a bash execution excluded from the context)."""
        if role == "bashExecution" and msg.get("excludeFromContext"):
            return False
        text = _user_text(role, msg, where)
        d = self.d
        model = {"providerID": self.provider, "modelID": self.model} if self.model else None
        info, parts = d.user_message(mid, created, n, model)
        if text:
            d.part(parts, info, {"type": "text", "text": text})
        for block in _images(msg.get("content")):
            mime = common.want_str(block, "mimeType", where, "image.mimeType") or "image/png"
            url = f"data:{mime};base64,{common.want_str(block, 'data', where, 'image.data')}"
            d.part(parts, info, {"type": "file", "mime": mime, "url": url})
        self.last_user = mid
        if role == "user" and not d.title and text.strip():
            d.title = common.text_title(text)
        return True


def _user_text(role: str, msg: dict[str, Any], where: str) -> str:
    if role == "bashExecution":
        command = common.want_str(msg, "command", where, "message.command")
        return f"$ {command}\n{common.want_str(msg, 'output', where, 'message.output')}"
    if role in ("branch_summary", "branchSummary"):
        return common.want_str(msg, "summary", where, "summary")
    if role == "compactionSummary":
        return common.want_str(msg, "summary", where, "message.summary")
    return common.text_of(msg.get("content"), where)  # user, custom_message, custom, hookMessage
