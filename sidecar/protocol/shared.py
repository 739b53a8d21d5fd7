"""JSON that leaves in several frames without being copied into each.

A ``part/update`` of 10 MB is echoed in its reply and in the ``part/updated`` notification to
every subscriber (the writer among them). Encoded into each frame, that is one more copy of
the part per frame, all alive until the peers have read them. A ``Shared`` holds the JSON as
buffers (slices of the request's own frame, say) that every frame carrying it references:
the encoder writes a placeholder where it goes (``enc_hook``), and ``pieces`` cuts the body
there, so a frame is its envelope's few bytes around the same buffers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from sidecar.model.buffers import Buffer, Shared

# Written where a ``Shared`` goes. A NUL byte never appears in msgspec's output (it escapes
# control characters) nor in JSON the daemon accepted, so the token cannot occur otherwise.
PLACEHOLDER = b"\x00sidecar-shared\x00"
_PLACEHOLDER_RAW = msgspec.Raw(PLACEHOLDER)


def as_raw(value: Any) -> Any:
    """``enc_hook`` for an encoder that cannot take pieces: a ``Shared`` is copied in."""
    if isinstance(value, Shared):
        return value.raw()
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


class PieceEncoder:
    """A JSON encoder whose output is a list of buffers: a ``Shared`` met while encoding is
    not copied in but referenced between the bytes around it."""

    __slots__ = ("_encoder", "_seen")

    def __init__(self) -> None:
        self._seen: list[Shared] = []
        self._encoder = msgspec.json.Encoder(enc_hook=self._hook)

    def _hook(self, value: Any) -> Any:
        if isinstance(value, Shared):
            self._seen.append(value)
            return _PLACEHOLDER_RAW
        raise NotImplementedError(f"cannot encode {type(value).__name__}")

    def encode(self, message: Any) -> list[Buffer]:
        """``message``'s JSON as buffers; one ``bytes`` when it holds no ``Shared``."""
        self._seen.clear()
        try:
            body = self._encoder.encode(message)
            if not self._seen:
                return [body]
            return _cut(body, self._seen)
        finally:
            self._seen.clear()


def _cut(body: bytes, shared: list[Shared]) -> list[Buffer]:
    pieces: list[Buffer] = []
    view = memoryview(body)
    start = 0
    for value in shared:
        at = body.index(PLACEHOLDER, start)
        if at > start:
            pieces.append(view[start:at])
        pieces.extend(filter(len, value.buffers))
        start = at + len(PLACEHOLDER)
    if start < len(body):
        pieces.append(view[start:])
    return pieces
