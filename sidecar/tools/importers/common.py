"""What every importer produces, and the one error type they raise.

An importer only reads and validates; nothing is written until a whole session has been
read, so a bad file never leaves half a session behind. Each message and part is decoded with
the model's own decoder (the same the daemon uses for ``message/update``) and stored as the
JSON it came in, so fields this version does not model survive.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from sidecar.model.messages import Message
from sidecar.model.parts import Part
from sidecar.model.session import Session

_message = msgspec.json.Decoder(Message)
_part = msgspec.json.Decoder(Part)
_session = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()


class ImportFailure(Exception):
    """A file that cannot be imported; the text names the file, the line or item, the field."""


@dataclass
class Imported:
    """One session, ready for ``Store.put_session_with``."""

    source: str
    session: Session
    messages: list[tuple[Message, bytes]] = field(default_factory=list)
    parts: list[tuple[Part, bytes]] = field(default_factory=list)

    def add_message(self, raw: bytes | dict[str, Any], where: str) -> Message:
        msg: Message
        msg, data = self._checked(raw, where, _message, "message")
        self.messages.append((msg, data))
        return msg

    def add_part(self, raw: bytes | dict[str, Any], where: str) -> Part:
        part: Part
        part, data = self._checked(raw, where, _part, "part")
        self.parts.append((part, data))
        return part

    def _checked(
        self, raw: bytes | dict[str, Any], where: str, decoder: Any, kind: str
    ) -> tuple[Any, bytes]:
        """Decode a message or part of this session, with an id; the error names where."""
        data = raw if isinstance(raw, bytes) else _encoder.encode(raw)
        try:
            item = decoder.decode(data)
        except msgspec.ValidationError as exc:
            raise ImportFailure(f"{where}: {kind}: {exc}") from None
        if item.session_id != self.session.id:
            raise ImportFailure(
                f"{where}: {kind} sessionID {item.session_id!r} is not {self.session.id!r}"
            )
        if not item.id:
            raise ImportFailure(f"{where}: {kind} has no id")
        return item, data

    def check(self, name: str) -> None:
        """Every part belongs to a message of this session."""
        ids = {m.id for m, _ in self.messages}
        for part, _ in self.parts:
            if part.message_id not in ids:
                raise ImportFailure(
                    f"{name}: part {part.id!r}: messageID {part.message_id!r} is not in the session"
                )


def decode_session(raw: bytes | dict[str, Any], where: str) -> Session:
    data = raw if isinstance(raw, bytes) else _encoder.encode(raw)
    try:
        session: Session = _session.decode(data)
        return session
    except msgspec.ValidationError as exc:
        raise ImportFailure(f"{where}: session: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ImportFailure(f"{where}: {exc}") from None


def line_of(data: bytes, exc: msgspec.DecodeError) -> str:
    """``line N`` for a malformed-JSON error, from the byte offset msgspec reports."""
    text = str(exc)
    marker = "(byte "
    if marker in text:
        try:
            offset = int(text.rsplit(marker, 1)[1].rstrip(")"))
        except ValueError:
            return text
        line = data.count(b"\n", 0, offset) + 1
        return f"line {line}: {text}"
    return text


class Draft:
    """Messages and parts as plain dicts while a line-oriented log is read (a tool result
    lands in the call's part several lines later), then validated all at once by ``finish``.

    Times are made strictly increasing in file order, so the store's ``(time.created, id)``
    order is the log's order even where the log's clock repeats or steps back.
    """

    def __init__(self, path: str, source: str) -> None:
        self.path = path
        self.source = source
        self.session_id = ""
        self.title = ""
        self.directory: str | None = None
        self.parent_id: str | None = None
        self.created = 0
        self.updated = 0
        self.messages: list[tuple[dict[str, Any], list[dict[str, Any]], int]] = []
        self._last = 0

    def tick(self, ts: int | None) -> int:
        t = max(ts or 0, self._last + 1)
        self._last = t
        return t

    def message(self, info: dict[str, Any], line: int) -> list[dict[str, Any]]:
        """Add a message; returns its part list, to append parts to."""
        info["sessionID"] = self.session_id
        parts: list[dict[str, Any]] = []
        self.messages.append((info, parts, line))
        return parts

    def part(
        self, parts: list[dict[str, Any]], info: dict[str, Any], body: dict[str, Any]
    ) -> dict[str, Any]:
        part = {
            "id": f"prt_{info['id'][4:]}_{len(parts):04d}",
            "sessionID": self.session_id,
            "messageID": info["id"],
            **body,
        }
        parts.append(part)
        return part

    def tool_call(
        self, parts: list[dict[str, Any]], info: dict[str, Any], call: str, name: Any, args: Any
    ) -> dict[str, Any]:
        """A tool call's part, pending until its result arrives (a later line)."""
        return self.part(
            parts,
            info,
            {
                "type": "tool",
                "callID": call,
                "tool": str(name or "tool"),
                "state": {"status": "pending", "input": args if isinstance(args, dict) else {}},
            },
        )

    def finish(self) -> Imported:
        if not self.session_id:
            raise ImportFailure(f"{self.path}: no session id found")
        created = self.created or (self.messages[0][0]["time"]["created"] if self.messages else 0)
        session = {
            "id": self.session_id,
            "title": self.title or f"Imported {self.source} session",
            "time": {"created": created, "updated": max(self.updated, self._last, created)},
        }
        if self.directory:
            session["directory"] = self.directory
        if self.parent_id:
            session["parentID"] = self.parent_id
        out = Imported(self.source, decode_session(session, self.path))
        for info, parts, line in self.messages:
            where = f"{self.path}:{line}"
            out.add_message(info, where)
            for p in parts:
                out.add_part(p, where)
        return out


def iso_ms(value: Any) -> int | None:
    """Milliseconds from an ISO-8601 timestamp or a number of ms; None when absent."""
    import datetime as dt

    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value:
        try:
            return int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except ValueError:
            return None
    return None


def read_jsonl(path: str, data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line names its number."""
    import json

    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(data.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise ImportFailure(f"{path}:{n}: not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ImportFailure(f"{path}:{n}: expected a JSON object, got {type(obj).__name__}")
        out.append((n, obj))
    if not out:
        raise ImportFailure(f"{path}: empty file")
    return out


def text_title(text: str) -> str:
    first = " ".join(text.split())
    return first[:60] + ("…" if len(first) > 60 else "")
