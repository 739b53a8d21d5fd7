"""JSON held as the buffers it arrived in (slices of a request's frame), which the reply,
every notification (``sidecar.protocol.shared``) and the stored row (``sidecar.store``: a
large part is written from them in place) take without a copy each."""

from __future__ import annotations

import msgspec

Buffer = bytes | memoryview

#: A part's JSON of this many bytes or more is large: it is stored from its buffers where the
#: backend can (never copied into a bound value), and relayed to other daemons by reference.
LARGE_BYTES = 1 << 20


class Shared:
    """The JSON of one value as buffers, sent as they are by every frame that carries it."""

    __slots__ = ("buffers", "part_id", "size")

    def __init__(self, *buffers: Buffer, part_id: str | None = None) -> None:
        self.buffers = buffers
        self.size = sum(map(len, buffers))
        self.part_id = part_id  # the part it is, when it is one (a large one is relayed so)

    @property
    def large(self) -> bool:
        return self.size >= LARGE_BYTES

    def text(self) -> str:
        """The JSON as one ``str`` (a store row): one copy per buffer, no more."""
        if len(self.buffers) == 1:
            return str(self.buffers[0], "utf-8")
        return "".join(str(b, "utf-8") for b in self.buffers)

    def raw(self) -> msgspec.Raw:
        """The JSON as one ``msgspec.Raw`` (a copy: for what cannot take pieces)."""
        return msgspec.Raw(b"".join(self.buffers))


class Elements(Shared):
    """Consecutive elements of a JSON array, comma-separated, as buffers: in a list it stands
    for all of them, so a long array is sent as a few large buffers (a window served as it
    is read, ``engine/streamed.py``). Only an encoder writes it; nothing reads it back."""

    __slots__ = ()
