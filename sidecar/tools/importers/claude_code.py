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
    assistant_blocks,
    fold_result,
    iso_ms,
    read_jsonl,
    text_of,
    text_title,
    usage_tokens,
    want_obj,
    want_str,
)

SOURCE = "claude-code"
RECORD_TYPES = frozenset(
    {"user", "assistant", "system", "summary", "file-history-snapshot", "queue-operation"}
)
_FINISH = {"tool_use": "tool-calls", "end_turn": "stop", "max_tokens": "length"}

# An Anthropic ``usage`` object: input, output, cache-read and cache-write counts.
USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)


def looks_like(first: dict[str, Any]) -> bool:
    return first.get("type") in RECORD_TYPES and (
        "sessionId" in first or "leafUuid" in first or "uuid" in first or "messageId" in first
    )


def read(path: Path, data: bytes) -> list[Imported]:
    records = read_jsonl(str(path), data)
    # A subagent's own log (``agent-*.jsonl``) is all sidechain: import it as a child session.
    convo = [r for _, r in records if r.get("type") in ("user", "assistant")]
    reader = _Reader(path, subagent=bool(convo) and all(r.get("isSidechain") for r in convo))
    for n, rec in records:
        reader.record(n, rec)
    return [reader.finish()]


class _Reader:
    """One log read line by line: each record kind has its step, the state they share here."""

    def __init__(self, path: Path, *, subagent: bool) -> None:
        self.path = path
        self.subagent = subagent
        self.d = Draft(str(path), SOURCE)
        self.calls: dict[str, dict[str, Any]] = {}
        # Claude Code's ``message.id`` -> the merged response's info and parts.
        self.assistant: dict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = {}
        self.last_user = ""
        self.marker: dict[str, Any] | None = None  # a compaction awaiting its summary
        self.summary_title = ""

    def finish(self) -> Imported:
        if self.summary_title:
            self.d.title = self.summary_title
        return self.d.finish()

    def record(self, n: int, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        where = f"{self.path}:{n}"
        if kind == "summary" and isinstance(rec.get("summary"), str):
            self.summary_title = self.summary_title or rec["summary"]
            return
        if "message" in rec and kind not in ("user", "assistant"):
            # A message under a record type we do not know is never dropped silently.
            raise ImportFailure(f"{where}: field 'type': {str(kind)[:40]!r} is not a known role")
        if kind not in ("user", "assistant", "system") or (
            rec.get("isSidechain") and not self.subagent
        ):
            return
        self._session_fields(rec, where)
        uuid = want_str(rec, "uuid", where)
        if not uuid:
            raise ImportFailure(f"{where}: field 'uuid': missing")
        ts = self.d.known(iso_ms(rec.get("timestamp"), where), where)
        if kind == "system":
            if rec.get("subtype") == "compact_boundary":
                self._compact_boundary(n, rec, uuid, ts, where)
            return
        msg = rec.get("message")
        if not isinstance(msg, dict):
            raise ImportFailure(f"{where}: field 'message': expected an object")
        role = msg.get("role")
        if role is not None and role != kind:
            raise ImportFailure(
                f"{where}: field 'message.role': {str(role)[:40]!r} is not a known role "
                f"for a {kind!r} record"
            )
        if kind == "user" and rec.get("isCompactSummary") and self.marker is not None:
            self._compact_summary(n, msg, uuid, ts, where)
        elif kind == "user":
            self._user(n, rec, msg, uuid, ts, where)
        else:
            self._assistant(n, msg, uuid, ts, where)

    def _session_fields(self, rec: dict[str, Any], where: str) -> None:
        """The session's id (a subagent's is its parent's plus the file name) and directory."""
        d = self.d
        if not d.session_id and want_str(rec, "sessionId", where):
            d.session_id = f"ses_{rec['sessionId']}"
            if self.subagent:
                d.parent_id = d.session_id
                d.session_id = f"{d.session_id}_{self.path.stem}"
        if not d.directory and isinstance(rec.get("cwd"), str):
            d.directory = rec["cwd"]

    def _compact_boundary(
        self, n: int, rec: dict[str, Any], uuid: str, ts: int | None, where: str
    ) -> None:
        meta = want_obj(rec, "compactMetadata", where)
        auto = meta.get("trigger") != "manual"
        self.marker, _ = self.d.compaction(f"msg_{uuid}", self.d.tick(ts), auto, n)
        self.last_user = self.marker["id"]

    def _compact_summary(
        self, n: int, msg: dict[str, Any], uuid: str, ts: int | None, where: str
    ) -> None:
        assert self.marker is not None
        at = self.d.tick(ts)
        text = text_of(msg.get("content"), where)
        self.d.summary(f"msg_{uuid}", self.marker["id"], ("anthropic", ""), at, text, n)
        self.marker = None

    def _user(
        self,
        n: int,
        rec: dict[str, Any],
        msg: dict[str, Any],
        uuid: str,
        ts: int | None,
        where: str,
    ) -> None:
        """A user line: tool results fold into their calls; text and images make a message."""
        content = msg.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list):
            raise ImportFailure(f"{where}: field 'message.content': expected text or a list")
        texts: list[str] = []
        images: list[dict[str, Any]] = []
        for i, b in enumerate(blocks):
            at_b = f"message.content[{i}]"
            if not isinstance(b, dict):
                raise ImportFailure(f"{where}: field {at_b!r}: expected an object")
            if b.get("type") == "tool_result":
                self._tool_result(b, at_b, ts, where)
            elif b.get("type") == "text":
                if text := want_str(b, "text", where, f"{at_b}.text"):
                    texts.append(text)
            elif b.get("type") == "image" and isinstance(b.get("source"), dict):
                src = b["source"]
                for key in ("media_type", "data", "url", "type"):
                    want_str(src, key, where, f"{at_b}.source.{key}")
                images.append(src)
        if texts or images:
            self._user_message(n, rec, uuid, ts, texts, images)

    def _tool_result(self, b: dict[str, Any], at_b: str, ts: int | None, where: str) -> None:
        call = want_str(b, "tool_use_id", where, f"{at_b}.tool_use_id")
        part = self.calls.get(call)
        if part is None:
            raise ImportFailure(
                f"{where}: tool_result: field 'tool_use_id': no tool_use {call!r} before it"
            )
        at = self.d.tick(ts)
        out = text_of(b.get("content"), where, f"{at_b}.content")
        fold_result(part, out, at, b.get("is_error"))

    def _user_message(
        self,
        n: int,
        rec: dict[str, Any],
        uuid: str,
        ts: int | None,
        texts: list[str],
        images: list[dict[str, Any]],
    ) -> None:
        d = self.d
        info, parts = d.user_message(f"msg_{uuid}", d.tick(ts), n)
        for t in texts:
            d.part(parts, info, {"type": "text", "text": t})
        for src in images:
            mime = str(src.get("media_type") or "image/png")
            url = f"data:{mime};base64,{src.get('data', '')}"
            if src.get("type") == "url":
                url = str(src.get("url") or "")
            d.part(parts, info, {"type": "file", "mime": mime, "url": url})
        self.last_user = info["id"]
        if texts and not d.title and not rec.get("isMeta"):
            d.title = text_title(texts[0])

    def _assistant(
        self, n: int, msg: dict[str, Any], uuid: str, ts: int | None, where: str
    ) -> None:
        """Claude Code writes one response as several lines sharing ``message.id``: merged."""
        key = want_str(msg, "id", where, "message.id") or uuid
        usage = want_obj(msg, "usage", where, "message.usage")
        if key not in self.assistant:
            created = self.d.tick(ts)
            info: dict[str, Any] = {
                "id": f"msg_{uuid}",
                "role": "assistant",
                "parentID": self.last_user,
                "providerID": "anthropic",
                "modelID": want_str(msg, "model", where, "message.model"),
                "time": {"created": created, "completed": created},
                "finish": "stop",
            }
            self.assistant[key] = (info, self.d.message(info, n))
        info, parts = self.assistant[key]
        info["tokens"] = usage_tokens(usage, where, USAGE_KEYS)
        if stop := want_str(msg, "stop_reason", where, "message.stop_reason"):
            info["finish"] = _FINISH.get(stop, stop)
        info["time"]["completed"] = max(info["time"]["completed"], ts or 0)
        content = msg.get("content")
        if not isinstance(content, list):
            raise ImportFailure(f"{where}: field 'message.content': expected a list")
        assistant_blocks(
            self.d, parts, info, content, where, self.calls, tool="tool_use", args="input"
        )
