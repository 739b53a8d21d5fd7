"""The base Struct every wire and stored type derives from.

OpenCode's wire names are camelCase with an upper-case ``ID`` suffix (``sessionID``,
``callID``, ``tailStartID``); Python attributes stay snake_case and ``wire_name`` maps them.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

# JavaScript's Number.MAX_SAFE_INTEGER: the largest integer every client (and SQLite's 64-bit
# columns) holds exactly. Times and counts beyond it are a client's mistake, refused at decode.
MAX_SAFE_INT = 2**53 - 1

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_SAFE_INT)]
"""A non-negative integer that fits every client: times (ms), token counts, sizes."""

PageLimit = Annotated[int, msgspec.Meta(ge=1, le=MAX_SAFE_INT)]
"""A page size given by a client."""

Id = Annotated[str, msgspec.Meta(pattern=r"^[^\x00]*$")]
"""An id in request params: any string a client chooses except one holding U+0000, which no
client means and PostgreSQL's text cannot store (ids are columns there), refused at decode
with its path. (Stored messages and parts are checked by the store instead: see
``store._nul_in``.)"""


def wire_name(name: str) -> str:
    """snake_case -> OpenCode camelCase, with ``_id`` segments written as ``ID``."""
    head, *rest = name.split("_")
    special = {"id": "ID", "ids": "IDs", "url": "URL"}
    return head + "".join(special.get(word) or word[:1].upper() + word[1:] for word in rest)


class Base(msgspec.Struct, kw_only=True, omit_defaults=True, rename=wire_name):
    """Optional fields left at their default are omitted on the wire."""


class Dense(msgspec.Struct, kw_only=True, rename=wire_name):
    """Every field is written, defaults included (token counts must always be visible)."""
