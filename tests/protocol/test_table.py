"""The method table is the one description of the wire: the daemon and the docs must match it."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import get_args

from sidecar.model.rpc import Event
from sidecar.protocol.codes import ERRORS, ErrorCode
from sidecar.protocol.methods import (
    NOTIFICATION_OF,
    NOTIFICATIONS,
    REQUESTS,
    SESSION_EVENTS,
    TO_CLIENT,
    TO_DAEMON,
)
from sidecar.protocol.schema import schema_json
from sidecar.server.dispatch import routes
from tests.paths import ROOT

COMMITTED = ROOT / "sidecar" / "protocol" / "schema.json"
# Handled inside the JSON-RPC protocol itself, before any route (they must work in any state).
PROTOCOL_LEVEL = {"exit", "$/cancelRequest"}


def _to_daemon() -> dict[str, type]:
    table = {r.method: r.params for r in REQUESTS if r.direction == TO_DAEMON}
    table |= {n.method: n.params for n in NOTIFICATIONS if n.direction == TO_DAEMON}
    return {m: p for m, p in table.items() if m not in PROTOCOL_LEVEL}


def test_every_method_a_client_may_call_has_a_handler_from_its_row() -> None:
    """Dispatch follows from the table: each client->daemon row (but the protocol's own)
    resolves to a callable in ``sidecar.server.handlers``, decoding the row's params type."""
    table = _to_daemon()
    served = routes()
    assert sorted(served) == sorted(table)
    assert all(callable(r.fn) for r in served.values())
    ordering = {r.method: r.ordering for r in REQUESTS if r.direction == TO_DAEMON}
    assert {m for m, o in ordering.items() if o == "ingest"} == {"message/update", "part/update"}
    assert all(served[m].writes == (o == "write") for m, o in ordering.items())


def test_handlers_are_registered_nowhere_else() -> None:
    """The table is the only registry: no decorator or dict of methods in the server."""
    server = ROOT / "sidecar" / "server"
    offenders = [
        str(p.relative_to(ROOT))
        for p in server.rglob("*.py")
        if re.search(r"@route\(|@\w+\.feature\(|\bROUTES\b", p.read_text())
    ]
    assert offenders == []


def test_method_names_are_unique() -> None:
    names = [r.method for r in REQUESTS] + [n.method for n in NOTIFICATIONS]
    assert len(names) == len(set(names))


def test_every_engine_event_type_names_exactly_one_notification() -> None:
    events = set(get_args(Event))
    assert events <= set(NOTIFICATION_OF)
    to_client = [n.params for n in NOTIFICATIONS if n.direction == TO_CLIENT]
    assert len(to_client) == len(set(to_client))
    assert SESSION_EVENTS == (
        "session/compacted",
        "session/pruned",
        "session/status",
        "message/updated",
        "message/removed",
        "part/updated",
        "part/removed",
    )


def test_protocol_md_error_table_matches_the_code_table() -> None:
    text = (ROOT / "PROTOCOL.md").read_text()
    documented = {int(c) for c in re.findall(r"^\| (-\d+) \|", text, flags=re.M)}
    assert documented == {int(e.code) for e in ERRORS}
    assert {e.code for e in ERRORS} == set(ErrorCode)


def test_committed_schema_matches_the_table() -> None:
    """Fails when the code changes and ``sidecar/protocol/schema.json`` was not regenerated:
    run ``python -m sidecar schema > sidecar/protocol/schema.json``."""
    assert COMMITTED.read_text() == schema_json()


def test_schema_subcommand_prints_the_committed_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "sidecar", "schema"], capture_output=True, check=True, text=True
    )
    assert out.stdout == COMMITTED.read_text()


def test_every_schema_reference_resolves() -> None:
    schema = json.loads(schema_json())
    refs = set(re.findall(r'"\$ref": "#/\$defs/([^"]+)"', schema_json()))
    assert refs and refs <= set(schema["$defs"])
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
