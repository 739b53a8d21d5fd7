"""Checks a frame's JSON must pass before anything decodes it: UTF-8 and nesting depth.

msgspec decodes (and even skips) nested JSON recursively, so a frame nested a few thousand
levels raises ``RecursionError`` wherever it is first decoded, and one nested just under
Python's limit is stored fine and then fails every later read of its session at a deeper
stack. Refusing deep input once, at the door, keeps both out; what the daemon stored itself
is never checked again. The common frame has few brackets, so the check costs two
``bytes.count`` calls. A frame with more brackets than the limit is scanned once, a chunk at
a time with C-speed bytes operations (escapes dropped, strings cut out, brackets kept), so
it costs constant extra memory and brackets inside strings never count; only an offending
frame is walked token by token to name the field and recover the request's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate, count
from operator import sub

import msgspec

# A JSON string, written so that the regex engine keeps no state per character (a run of
# plain characters is one step; only each escape is one more).
_STRING = rb'"[^"\\]*(?:\\.[^"\\]*)*+"'
_TOKEN = re.compile(
    _STRING + rb"|[\[\]{}:,]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null", re.DOTALL
)
# A string once its escapes are gone: no quote inside, one step for the engine.
_PLAIN_STRING = re.compile(rb'"[^"]*"')
# ``bytes.translate``: everything but brackets deleted, ``{}`` read as ``[]``.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_SQUARE = bytes.maketrans(b"{}", b"[]")
# ``[`` as 2 and ``]`` as 0: the running sum minus the count is the depth (``_peak``).
_STEPS = bytes.maketrans(b"[]", b"\x02\x00")
# Bytes scanned per step: what the scan holds besides the frame is a few of these.
CHUNK = 1 << 16


@dataclass(frozen=True, slots=True)
class TooDeep:
    """Where a frame first nests past the limit, as a path relative to ``params``."""

    path: str
    request_id: int | str | None

    def message(self, limit: int) -> str:
        where = self.path if len(self.path) <= 120 else self.path[:120] + "..."
        return f"params nest deeper than {limit} levels (config server.maxDepth) at `{where}`"


def bad_utf8_field(body: bytes | bytearray) -> str:
    """The path (relative to ``params``) of the first string holding invalid UTF-8, or a byte
    offset when it is not inside a string of ``params``. Only called on a bad frame."""
    offset = first_bad_utf8(body)
    try:
        doc = msgspec.json.decode(body.decode("utf-8", "replace"))
    except msgspec.DecodeError:
        return f"byte {offset}"
    found = _find_replacement(doc.get("params") if isinstance(doc, dict) else None, "$")
    return f"`{found}`" if found else f"byte {offset}"


def _find_replacement(value: object, path: str) -> str | None:
    if isinstance(value, str):
        return path if "\ufffd" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if "\ufffd" in key:
                return f"{path}.{key}"
            if (hit := _find_replacement(item, f"{path}.{key}")) is not None:
                return hit
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (hit := _find_replacement(item, f"{path}[{index}]")) is not None:
                return hit
    return None


def first_bad_utf8(body: bytes | bytearray) -> int | None:
    """Byte offset of the first invalid UTF-8 sequence, or ``None`` when the body is valid."""
    if body.isascii():
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def too_deep(body: bytes | bytearray, limit: int) -> TooDeep | None:
    """``None`` when no value inside ``params`` nests deeper than ``limit`` levels.

    The envelope's own object is level 0, so ``params`` itself is level 1 of the limit.
    """
    frame_limit = limit + 1
    if not deeper_than(body, frame_limit):
        return None
    return _locate(body, frame_limit)


@dataclass(slots=True)
class _Open:
    """An open container: ``key`` is the member (object) or index (array) being read."""

    is_array: bool
    key: str | int | None


def deeper_than(text: bytes | bytearray, limit: int, chunk: int = CHUNK) -> bool:
    """Does any value in this JSON document nest more than ``limit`` levels?

    One pass, ``chunk`` bytes at a time, holding a few chunks at most; brackets inside
    strings do not count. A document that is not JSON gets an answer that is safe for a
    decoder that stops at the first error: an unclosed bracket counts as open.
    """
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    depth = 0
    in_string = False
    pos, size = 0, len(text)
    while pos < size:
        end = min(pos + chunk, size)
        piece = text[pos:end]
        if end < size:
            # Never end a piece inside a run of backslashes: the run may go on in the next
            # one, and escapes pair up from the run's start. A piece that is all backslashes
            # keeps an even number of them (they pair up among themselves).
            kept = piece.rstrip(b"\\")
            piece = kept if kept else piece[: len(piece) & ~1]
            end = pos + len(piece)
        # Escapes pair from the left, as a decoder reads them: ``\\`` first, then what is
        # left of ``\"`` is an escaped quote. Every quote left opens or closes a string.
        piece = piece.replace(b"\\\\", b"").replace(b'\\"', b"")
        if in_string:
            close = piece.find(b'"')
            if close < 0:
                pos = end
                continue
            piece, in_string = piece[close + 1 :], False
        piece = _PLAIN_STRING.sub(b"", piece)
        opened = piece.find(b'"')
        if opened >= 0:
            piece, in_string = piece[:opened], True
        brackets = piece.translate(_SQUARE, _NOT_BRACKETS)
        if brackets:
            if _rises_above(brackets, limit - depth):
                return True
            depth += 2 * brackets.count(b"[") - len(brackets)
        pos = end
    return False


def _rises_above(brackets: bytes, room: int) -> bool:
    """Does the running depth of ``brackets`` (only ``[`` and ``]``) pass ``room``?

    Cheap bounds first: removing each adjacent ``[]`` lowers the highest depth by at most one
    per round, so the rounds plus what opens in the rest bound it from above.
    """
    if brackets.count(b"[") <= room:
        return False
    rest, rounds = brackets, 0
    while rounds <= room:
        shorter = rest.replace(b"[]", b"")
        if len(shorter) == len(rest):
            break
        rest, rounds = shorter, rounds + 1
    if rest.count(b"[") + rounds <= room:
        return False
    return _peak(brackets) > room


def _peak(brackets: bytes) -> int:
    """The highest running depth of ``brackets``, with C iterators only (no bytecode per
    bracket): ``[`` counts 2 and ``]`` 0, so the depth after n brackets is the sum minus n."""
    highest: int = max(map(sub, accumulate(brackets.translate(_STEPS)), count(1)))
    return max(0, highest)


def flatten_deep(text: bytes, limit: int) -> bytes:
    """The same JSON with every container nested past ``limit`` replaced by ``null``.

    For what is already stored (written before the door checked depth): reading it must not
    recurse without bound. Works on tokens, without recursion, in one pass.
    """
    out: list[bytes] = []
    depth = 0
    skipping = 0  # depth inside a dropped container
    for match in _TOKEN.finditer(text):
        tok = match.group()
        first = tok[:1]
        if skipping:
            if first in (b"{", b"["):
                skipping += 1
            elif first in (b"}", b"]"):
                skipping -= 1
            continue
        if first in (b"{", b"["):
            if depth == limit:
                out.append(b"null")
                skipping = 1
                continue
            depth += 1
        elif first in (b"}", b"]"):
            depth -= 1
        out.append(tok)
    return b"".join(out)


def _locate(body: bytes | bytearray, frame_limit: int) -> TooDeep:
    """Walk the tokens to the first container past the limit: its path, and the top-level id."""
    stack: list[_Open] = []
    request_id: int | str | None = None
    expect_key = pending_id = False
    path = "$"
    for match in _TOKEN.finditer(body):
        tok = match.group()
        first = tok[:1]
        if first in (b"{", b"["):
            stack.append(_Open(first == b"[", 0 if first == b"[" else None))
            if len(stack) > frame_limit:
                path = _path(stack[:-1])
                break
            expect_key = first == b"{"
        elif first in (b"}", b"]"):
            if stack:
                stack.pop()
            expect_key = False
        elif first == b",":
            if stack and stack[-1].is_array:
                stack[-1].key = int(stack[-1].key or 0) + 1
            expect_key = bool(stack) and not stack[-1].is_array
        elif first == b":":
            expect_key = False
        elif first == b'"' and expect_key:
            stack[-1].key = _unquote(tok)
            pending_id = len(stack) == 1 and stack[-1].key == "id"
            expect_key = False
        else:
            if pending_id:
                request_id = _scalar(tok)
            pending_id = False
    return TooDeep(path, request_id)


def _path(stack: list[_Open]) -> str:
    """msgspec-style path of a container, relative to the envelope's ``params``."""
    out = "$"
    for level in stack[1:]:
        out += f"[{level.key}]" if level.is_array else f".{level.key}"
    return out


def _unquote(tok: bytes) -> str:
    try:
        return str(msgspec.json.decode(tok))
    except msgspec.DecodeError:
        return tok[1:-1].decode("utf-8", "replace")


def _scalar(tok: bytes) -> int | str | None:
    if tok[:1] == b'"':
        return _unquote(tok)
    try:
        return int(tok)
    except ValueError:
        return None
