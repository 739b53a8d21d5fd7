"""What every importer produces, and the one error type they raise.

An importer only reads and validates; nothing is written until a whole session has been
read, so a bad file never leaves half a session behind. Each message and part is decoded with
the model's own decoder (the same the daemon uses for ``message/update``) and stored as the
JSON it came in, so fields this version does not model survive.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from sidecar.model.config import DEFAULT_MAX_DEPTH
from sidecar.model.jsonguard import bad_utf8_field, deeper_than, first_bad_utf8, too_deep
from sidecar.model.messages import Message
from sidecar.model.parts import Part
from sidecar.model.session import Session

_message = msgspec.json.Decoder(Message)
_part = msgspec.json.Decoder(Part)
_session = msgspec.json.Decoder(Session)
_encoder = msgspec.json.Encoder()

#: Bytes one file may hold unless ``import --max-bytes`` raises it: a read is always bounded.
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
#: A line or document may nest this deep; a stored message or part only as deep as the
#: daemon accepts in a request (``server.maxDepth``), so every later read of it works.
DOC_DEPTH = DEFAULT_MAX_DEPTH + 8
#: The latest time accepted, in ms: the end of year 9999. Times are never before 1970.
MAX_MS = 253_402_300_799_999


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
        try:
            data = raw if isinstance(raw, bytes) else _encoder.encode(raw)
        except (msgspec.EncodeError, OverflowError, RecursionError) as exc:
            raise ImportFailure(f"{where}: {kind}: {exc}") from None
        if deeper_than(data, DEFAULT_MAX_DEPTH - 1):
            raise ImportFailure(
                f"{where}: {kind}: nests deeper than {DEFAULT_MAX_DEPTH - 1} levels "
                "(the daemon's server.maxDepth for a request)"
            )
        try:
            item = decoder.decode(data)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise ImportFailure(f"{where}: {kind}: {exc}") from None
        if kind == "message":
            check_time(item.time.created, where, f"{kind}: field 'time.created'")
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
    except msgspec.ValidationError as exc:
        raise ImportFailure(f"{where}: session: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ImportFailure(f"{where}: {exc}") from None
    check_time(session.time.created, where, "session: field 'time.created'")
    check_time(session.time.updated, where, "session: field 'time.updated'")
    return session


def line_of(data: bytes, exc: Exception) -> str:
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
    if "truncated" in text:
        last = data.count(b"\n") + 1
        return f"line {last}: {text}"
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

    def known(self, ts: int | None, where: str, name: str = "timestamp") -> int | None:
        """``ts``, or None when absent and an earlier time exists (``tick`` follows it); a
        time that is absent with nothing before it would be stored as 1970: an error."""
        if ts is None and self._last == 0 and self.created == 0:
            raise ImportFailure(f"{where}: field {name!r}: missing")
        return ts

    def message(self, info: dict[str, Any], line: int) -> list[dict[str, Any]]:
        """Add a message; returns its part list, to append parts to."""
        info["sessionID"] = self.session_id
        parts: list[dict[str, Any]] = []
        self.messages.append((info, parts, line))
        return parts

    def user_message(
        self, mid: str, created: int, line: int, model: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Add a user message (``model``: the one it was sent to); returns it and its parts."""
        info: dict[str, Any] = {"id": mid, "role": "user", "time": {"created": created}}
        if model is not None:
            info["model"] = model
        return info, self.message(info, line)

    def compaction(
        self, mid: str, created: int, auto: bool, line: int
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Where a compaction starts: a user message (the marker) holding only its compaction
        part; returns the marker and that part."""
        marker, parts = self.user_message(mid, created, line)
        return marker, self.part(parts, marker, {"type": "compaction", "auto": auto})

    def summary(
        self, mid: str, parent: str, model: tuple[str, str], at: int, text: str, line: int
    ) -> None:
        """A compaction's finished summary: the assistant reply to the marker ``parent``
        holding ``text``; ``model`` is (provider, model)."""
        reply: dict[str, Any] = {
            "id": mid,
            "role": "assistant",
            "parentID": parent,
            "providerID": model[0],
            "modelID": model[1],
            "mode": "compaction",
            "summary": True,
            "time": {"created": at, "completed": at},
            "finish": "stop",
        }
        self.part(self.message(reply, line), reply, {"type": "text", "text": text})

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


def fold_result(part: dict[str, Any], output: str, at: int, is_error: Any) -> None:
    """A tool result, read lines after its call, completes the call's pending part."""
    tool_time = {"start": at, "end": at}
    state = part["state"]
    if is_error:
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


def assistant_blocks(
    d: Draft,
    parts: list[dict[str, Any]],
    info: dict[str, Any],
    content: list[Any],
    where: str,
    calls: dict[str, dict[str, Any]],
    *,
    tool: str,
    args: str,
) -> None:
    """An assistant's content blocks as parts: ``text``, ``thinking`` and a tool call (block
    type ``tool``, its arguments under ``args``), which ``calls`` keeps for its result."""
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
        elif btype == tool:
            call = want_str(block, "id", where, f"{at_b}.id")
            if not call:
                raise ImportFailure(f"{where}: field '{at_b}.id': missing")
            name = want_str(block, "name", where, f"{at_b}.name")
            arguments = want_obj(block, args, where, f"{at_b}.{args}")
            calls[call] = d.tool_call(parts, info, call, name, arguments)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, int | float) else "null"
    )


def check_time(ms: int, where: str, name: str) -> int:
    """A stored time must be a real one: after 1970, before year 10000, never a default."""
    if not 0 < ms <= MAX_MS:
        raise ImportFailure(f"{where}: {name}: {ms} is not a valid time (ms since 1970)")
    return ms


def iso_ms(value: Any, where: str = "", name: str = "timestamp") -> int | None:
    """Milliseconds from an ISO-8601 timestamp or a number of ms; None when absent. Anything
    else present is an error: a bad time is never stored as 1970 or silently skipped."""
    import datetime as dt

    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or not 0 < value <= MAX_MS:
            raise ImportFailure(f"{where}: field {name!r}: {value!r} is not a valid time")
        return int(value)
    if isinstance(value, str):
        try:
            ms = int(dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
        except (ValueError, OverflowError, OSError):
            raise ImportFailure(
                f"{where}: field {name!r}: {value[:60]!r} is not an ISO-8601 time"
            ) from None
        return check_time(ms, where, f"field {name!r}")
    raise ImportFailure(f"{where}: field {name!r}: expected a time, got {_kind(value)}")


def want_str(obj: dict[str, Any], key: str, where: str, name: str | None = None) -> str:
    """``obj[key]`` as a string ("" when absent); any other type is an error naming it."""
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ImportFailure(
            f"{where}: field {name or key!r}: expected a string, got {_kind(value)}"
        )
    return value


def want_int(obj: dict[str, Any], key: str, where: str, name: str | None = None) -> int:
    """A count (tokens): absent is 0; negative, fractional or non-numbers are errors."""
    value = obj.get(key)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ImportFailure(
            f"{where}: field {name or key!r}: expected a number, got {_kind(value)}"
        )
    if not math.isfinite(value) or value < 0 or value != int(value) or value > 2**53:
        raise ImportFailure(f"{where}: field {name or key!r}: {value!r} is not a count")
    return int(value)


def usage_tokens(
    usage: dict[str, Any], where: str, keys: tuple[str, str, str, str]
) -> dict[str, Any]:
    """A provider's ``usage`` object as a message's ``tokens``; ``keys`` names its input,
    output, cache-read and cache-write counts (each checked by ``want_int``)."""
    read_in, read_out, cache_read, cache_write = (
        want_int(usage, key, where, f"message.usage.{key}") for key in keys
    )
    return {
        "input": read_in,
        "output": read_out,
        "reasoning": 0,
        "cache": {"read": cache_read, "write": cache_write},
    }


def want_num(obj: dict[str, Any], key: str, where: str, name: str | None = None) -> float:
    value = obj.get(key)
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ImportFailure(f"{where}: field {name or key!r}: expected a number, got {value!r}")
    return float(value)


def want_obj(obj: dict[str, Any], key: str, where: str, name: str | None = None) -> dict[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ImportFailure(
            f"{where}: field {name or key!r}: expected an object, got {_kind(value)}"
        )
    return value


# -- bounded reads -------------------------------------------------------------------------------


def _open_regular(path: Path) -> int:
    """A descriptor on ``path`` if it is a regular file. O_NONBLOCK: opening a FIFO would
    otherwise wait for a writer forever; a device (``/dev/zero``) is refused before a read."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    flags |= getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ImportFailure(f"{path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a directory"
            if stat.S_ISDIR(mode)
            else "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a socket"
        )
        raise ImportFailure(f"{path}: not a regular file ({kind}); only regular files are read")
    return fd


def read_head(path: Path, size: int) -> bytes:
    """The first ``size`` bytes of a regular file (format sniffing)."""
    fd = _open_regular(path)
    try:
        return os.read(fd, size)
    finally:
        os.close(fd)


def read_file(path: Path, limit: int) -> bytes:
    """All of a regular file, refusing one over ``limit`` bytes (``import --max-bytes``)."""
    fd = _open_regular(path)
    try:
        size = os.fstat(fd).st_size
        if size > limit:
            raise ImportFailure(
                f"{path}: {size} bytes, over the import limit of {limit} bytes "
                "(--max-bytes raises it)"
            )
        chunks: list[bytes] = []
        got = 0
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        if got > limit:  # it grew while read
            raise ImportFailure(
                f"{path}: over the import limit of {limit} bytes (--max-bytes raises it)"
            )
        return b"".join(chunks)
    except OSError as exc:
        raise ImportFailure(f"{path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def parse_json(data: bytes, where: str, *, document: bool = False) -> Any:
    """One JSON line (``where`` names it) or a whole ``document`` (the error adds the line);
    too deep, not UTF-8 or malformed is an error naming the field or the line."""

    def at(offset: int | None) -> str:
        if not document or offset is None:
            return where
        line = data.count(b"\n", 0, offset) + 1
        return f"{where}: line {line}"

    if deeper_than(data, DOC_DEPTH):
        found = too_deep(b'{"params":' + data + b"}", DOC_DEPTH - 1)
        path = f" at `{found.path[:120]}`" if found is not None else ""
        raise ImportFailure(f"{where}: JSON nests deeper than {DOC_DEPTH} levels{path}")
    offset = first_bad_utf8(data)
    if offset is not None:
        field_ = bad_utf8_field(b'{"params":' + data + b"}")
        raise ImportFailure(f"{at(offset)}: field {field_}: not UTF-8 (byte {offset})")
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, RecursionError) as exc:
        text = str(exc)
        offset = None
        if "(byte " in text:
            with contextlib.suppress(ValueError):
                offset = int(text.rsplit("(byte ", 1)[1].rstrip(")"))
        elif "truncated" in text:
            offset = len(data)
        raise ImportFailure(f"{at(offset)}: not JSON: {text}") from None


def read_jsonl(path: str, data: bytes) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every non-blank line; a bad line names its number."""
    out: list[tuple[int, dict[str, Any]]] = []
    for n, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        obj = parse_json(line, f"{path}:{n}")
        if not isinstance(obj, dict):
            raise ImportFailure(f"{path}:{n}: expected a JSON object, got {_kind(obj)}")
        out.append((n, obj))
    if not out:
        raise ImportFailure(f"{path}: empty file")
    return out


def text_of(content: Any, where: str, name: str = "message.content") -> str:
    """A message's text: a string, or the text blocks of a block list joined by newlines."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        out = []
        for i, b in enumerate(content):
            if isinstance(b, dict) and b.get("type") == "text":
                out.append(want_str(b, "text", where, f"{name}[{i}].text"))
        return "\n".join(out)
    raise ImportFailure(f"{where}: field {name!r}: expected text or a list")


def text_title(text: str) -> str:
    first = " ".join(text.split())
    return first[:60] + ("…" if len(first) > 60 else "")
