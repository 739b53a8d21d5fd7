"""Checks a frame's JSON must pass before anything decodes it: UTF-8 and nesting depth.

msgspec decodes (and even skips) nested JSON recursively, so a frame nested a few thousand
levels raises ``RecursionError`` wherever it is first decoded, and one nested just under
Python's limit is stored fine and then fails every later read of its session at a deeper
stack. Refusing deep input once, at the door, keeps both out. The common frame has few
brackets, so the check costs two ``bytes.count`` calls; only a frame with more brackets than
the limit is scanned, at C speed, and only an offending one is walked token by token to name
the field and recover the request's id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import accumulate

import msgspec

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
# Everything but brackets, for ``bytes.translate``'s delete argument.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
_TOKEN = re.compile(
    rb'"(?:[^"\\]|\\.)*"|[\[\]{}:,]|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null', re.DOTALL
)


@dataclass(frozen=True, slots=True)
class TooDeep:
    """Where a frame first nests past the limit, as a path relative to ``params``."""

    path: str
    request_id: int | str | None

    def message(self, limit: int) -> str:
        where = self.path if len(self.path) <= 120 else self.path[:120] + "..."
        return f"params nest deeper than {limit} levels (config server.maxDepth) at `{where}`"


def bad_utf8_field(body: bytes) -> str:
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


def first_bad_utf8(body: bytes) -> int | None:
    """Byte offset of the first invalid UTF-8 sequence, or ``None`` when the body is valid."""
    if body.isascii():
        return None
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start
    return None


def too_deep(body: bytes, limit: int) -> TooDeep | None:
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


def deeper_than(text: bytes, limit: int) -> bool:
    """Does any value in this JSON document nest more than ``limit`` levels?"""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    return len(brackets) > limit and max(accumulate(_STEP[b] for b in brackets)) > limit


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


def _locate(body: bytes, frame_limit: int) -> TooDeep:
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
