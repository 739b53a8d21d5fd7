"""pygls is fenced in one module, and what the fence relies on beyond pygls' public API is
still there, with the signatures it was written against.

``SidecarProtocol`` overrides private methods of pygls' ``JsonRPCProtocol`` (pygls calls them
with these arguments) and calls or reads private ones. A pygls release that renames, removes
or reshapes any of them would break the daemon in ways unit tests of our own code may miss:
these tests fail first, naming the member.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from pathlib import Path
from typing import Any, cast

from pygls.protocol import JsonRPCProtocol, default_converter
from pygls.server import JsonRPCServer

from sidecar.server import protocol as fence
from sidecar.server.protocol import SidecarProtocol, new_protocol
from tests.paths import ROOT

FENCE = ROOT / "sidecar" / "server" / "protocol.py"

#: Private methods the fence overrides: pygls calls them with these parameters.
OVERRIDES = {"_send_data": ["self", "data"]}
#: Private methods the fence calls, with the parameters it passes.
CALLS = {"_handle_cancel_notification": ["self", "msg_id"]}
#: Private attributes pygls' ``__init__`` sets, which the fence reads, with their types.
ATTRIBUTES = {"_request_futures": dict, "_result_types": dict, "_converter": object}
#: Public members the fence uses (a rename would break it just the same).
PUBLIC = {
    "notify": ["self", "method", "params"],  # overridden
    "set_writer": ["self", "writer", "include_headers"],  # overridden
    "handle_message": ["self", "message"],
    "send_request_async": ["self", "method", "params", "msg_id"],
}


def _imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def _pygls_private_names() -> set[str]:
    """Private methods of pygls' protocol and the private attributes its ``__init__`` sets
    (and ``fm``, its handler registry)."""
    members = {n for n in dir(JsonRPCProtocol) if n.startswith("_") and not n.startswith("__")}
    stock = JsonRPCServer(protocol_cls=JsonRPCProtocol, converter_factory=default_converter)
    return members | {n for n in vars(stock.protocol) if n.startswith("_")} | {"fm"}


def test_pygls_is_imported_only_by_the_fence() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "sidecar").rglob("*.py")
        if any(n == "pygls" or n.startswith("pygls.") for n in _imports_of(path))
    )
    assert importers == ["sidecar/server/protocol.py"]


def test_no_other_module_touches_pygls_private_names() -> None:
    """Outside the fence, no ``x.<pygls private>`` unless the module defines that name on
    its own objects (``self._converter = ...`` of an unrelated class)."""
    private = _pygls_private_names()
    found: dict[str, set[str]] = {}
    for path in (ROOT / "sidecar").rglob("*.py"):
        if path == FENCE:
            continue
        tree = ast.parse(path.read_text(), str(path))
        own = {
            t.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign | ast.AnnAssign)
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Attribute)
        }
        touched = {
            node.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in private and node.attr not in own
        }
        if touched:
            found[str(path.relative_to(ROOT))] = touched
    assert found == {}


def _params(fn: object) -> list[str]:
    return list(inspect.signature(fn).parameters)  # type: ignore[arg-type]


def test_overridden_private_methods_keep_their_signatures() -> None:
    for name, params in OVERRIDES.items():
        assert name in vars(JsonRPCProtocol), f"pygls no longer has JsonRPCProtocol.{name}"
        assert _params(getattr(JsonRPCProtocol, name)) == params, name
        # and the override accepts what pygls passes
        assert _params(getattr(SidecarProtocol, name)) == params, name


def test_called_private_methods_keep_their_signatures() -> None:
    for name, params in {**CALLS, **PUBLIC}.items():
        assert callable(getattr(JsonRPCProtocol, name, None)), f"pygls lost {name}"
        assert _params(getattr(JsonRPCProtocol, name)) == params, name


def test_private_attributes_set_by_pygls_init() -> None:
    proto = new_protocol(cast(Any, None))
    for name, kind in ATTRIBUTES.items():
        assert isinstance(vars(proto).get(name), kind), f"pygls' __init__ no longer sets {name}"
    assert callable(getattr(proto._converter, "unstructure", None))


def test_the_lists_here_are_every_private_name_the_fence_uses() -> None:
    """A new private override or call in the fence fails here until it is listed (and
    checked above) and named in the fence's docstring."""
    source = FENCE.read_text()
    private = _pygls_private_names()
    used = set(re.findall(r"\b(?:self|super\(\)|proto|protocol)\.(_\w+)", source)) & private
    overridden = {n for n in vars(SidecarProtocol) if n in vars(JsonRPCProtocol)}
    listed = set(OVERRIDES) | set(CALLS) | set(ATTRIBUTES)
    assert used - listed == set()
    assert {n for n in overridden if n.startswith("_") and not n.startswith("__")} == set(OVERRIDES)
    doc = fence.__doc__ or ""
    assert [n for n in sorted(listed) if f"``{n}``" not in doc] == []


async def test_cancellation_through_the_fence_cancels_the_task() -> None:
    """Behaviour behind ``_handle_cancel_notification`` and ``_request_futures``: pygls still
    cancels the registered task of a request."""
    proto = new_protocol(cast(Any, None))
    task = asyncio.ensure_future(asyncio.sleep(10))
    proto._request_futures["r1"] = task  # type: ignore[assignment]
    assert proto.in_flight() == 1
    proto._handle_cancel_notification("r1")
    await asyncio.sleep(0)
    assert task.cancelled()
    proto._request_futures.pop("r1", None)
    assert proto.in_flight() == 0
