"""Each row of the method table and its handler agree on types: the row's params Struct is
the handler's params annotation, the row's result is its return annotation (an ingest
handler's, the type its ``done`` is annotated to encode). A row linked to a handler of other
types fails here, so a row's ``"module:function"`` string is checked as a typed link would be.
"""

from __future__ import annotations

import inspect
from typing import Annotated, Any, get_args, get_origin, get_type_hints

from sidecar.model.config import Config
from sidecar.model.rpc import Empty, SessionRef
from sidecar.model.session import Session
from sidecar.protocol.methods import SERVED, NotificationSpec, RequestSpec
from sidecar.server.dispatch import resolve


def mismatches(spec: RequestSpec | NotificationSpec) -> list[str]:
    """What differs between ``spec`` and its handler's signature (empty: they agree)."""
    fn = resolve(spec.handler)
    hints = get_type_hints(fn, include_extras=True)
    names = list(inspect.signature(fn).parameters)
    where = f"{spec.method} -> {spec.handler}"
    if len(names) < 2:
        return [f"{where}: takes no params"]
    found: list[str] = []
    if hints.get(names[1]) != spec.params:
        found.append(f"{where}: params {hints.get(names[1])!r}, the row says {spec.params!r}")
    result = spec.result if isinstance(spec, RequestSpec) else None
    expected = type(None) if result is None else result
    if isinstance(spec, RequestSpec) and spec.ordering == "ingest":
        done = hints.get(names[2]) if len(names) > 2 else None
        gives = get_args(done)[1] if get_origin(done) is Annotated else None
        if gives != result:
            found.append(f"{where}: done encodes {gives!r}, the row says {result!r}")
        return found
    if not inspect.iscoroutinefunction(fn):
        found.append(f"{where}: not a coroutine function")
    if hints.get("return") != expected:
        found.append(f"{where}: returns {hints.get('return')!r}, the row says {expected!r}")
    return found


def test_every_served_row_agrees_with_its_handler_signature() -> None:
    assert [problem for spec in SERVED for problem in mismatches(spec)] == []


def test_the_check_covers_notifications_and_rows_without_params() -> None:
    kinds = {type(s) for s in SERVED}
    assert kinds == {RequestSpec, NotificationSpec}
    assert any(s.params is Empty for s in SERVED if isinstance(s, NotificationSpec))
    assert any(s.params is Empty for s in SERVED if isinstance(s, RequestSpec))
    assert any(isinstance(s, RequestSpec) and s.ordering == "ingest" for s in SERVED)


def _row(**change: Any) -> RequestSpec:
    good = next(s for s in SERVED if s.method == "session/get")
    assert isinstance(good, RequestSpec) and not mismatches(good)
    fields = {f: getattr(good, f) for f in good.__struct_fields__}
    return RequestSpec(**(fields | change))


def test_a_row_with_the_wrong_result_type_fails() -> None:
    (problem,) = mismatches(_row(result=Config))
    assert "session/get" in problem and "Config" in problem and "Session" in problem


def test_a_row_with_the_wrong_params_type_fails() -> None:
    (problem,) = mismatches(_row(params=Empty))
    assert "params" in problem and "Empty" in problem and SessionRef.__name__ in problem


def test_an_ingest_row_with_the_wrong_result_type_fails() -> None:
    part = next(s for s in SERVED if s.method == "part/update")
    assert isinstance(part, RequestSpec) and not mismatches(part)
    fields = {f: getattr(part, f) for f in part.__struct_fields__}
    (problem,) = mismatches(RequestSpec(**(fields | {"result": Session})))
    assert "done encodes" in problem


def test_a_notification_linked_to_a_handler_of_other_params_fails() -> None:
    note = NotificationSpec(
        method="initialized",
        direction="client->daemon",
        params=SessionRef,
        handler="lifecycle:initialized",
    )
    (problem,) = mismatches(note)
    assert "params" in problem
