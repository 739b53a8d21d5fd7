"""JSON held as the buffers it arrived in (slices of a request's frame), which the reply,
every notification (``sidecar.protocol.shared``) and the stored row (``sidecar.store``: a
large part is written from them in place) take without a copy each."""

from __future__ import annotations

import msgspec

Buffer = bytes | memoryview


class Shared:
    """The JSON of one value as buffers, sent as they are by every frame that carries it."""

    __slots__ = ("buffers", "size")

    def __init__(self, *buffers: Buffer) -> None:
        self.buffers = buffers
        self.size = sum(len(b) for b in buffers)

    def text(self) -> str:
        """The JSON as one ``str`` (a store row): one copy per buffer, no more."""
        if len(self.buffers) == 1:
            return str(self.buffers[0], "utf-8")
        return "".join(str(b, "utf-8") for b in self.buffers)

    def raw(self) -> msgspec.Raw:
        """The JSON as one ``msgspec.Raw`` (a copy: for what cannot take pieces)."""
        return msgspec.Raw(b"".join(self.buffers))
