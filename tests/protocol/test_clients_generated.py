"""The clients' method wrappers are generated from the method table and committed: these fail
when the table changed and ``python -m sidecar.protocol.clients`` was not run."""

from __future__ import annotations

import inspect
import subprocess
import sys
from typing import get_type_hints

import msgspec
import pytest
from sidecar_client import Client
from sidecar_client._methods import Methods

from sidecar.protocol.clients import PYTHON_OUT, TS_OUT, python_source, typescript_source
from sidecar.protocol.methods import REQUESTS, TO_DAEMON
from tests.paths import ROOT


def test_committed_python_wrappers_match_the_table() -> None:
    assert PYTHON_OUT.read_text() == python_source()


def test_committed_typescript_wrappers_match_the_table() -> None:
    assert TS_OUT.read_text() == typescript_source()


def test_the_generator_checks_what_is_committed() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.protocol.clients", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr


def test_every_row_with_a_call_has_a_wrapper_taking_every_param() -> None:
    """``since`` of ``session/context`` included: a param of the row is a param of its
    wrapper, in both clients."""
    ts = TS_OUT.read_text()
    for row in REQUESTS:
        if row.direction != TO_DAEMON or row.call is None:
            continue
        fn = getattr(Client, row.call.name)
        assert fn is getattr(Methods, row.call.name), f"{row.call.name} is hand-written"
        taken = set(inspect.signature(fn).parameters)
        wanted = {f.name for f in msgspec.structs.fields(row.params)}
        assert wanted <= taken, (row.method, wanted - taken)
        assert f'this.call("{row.method}"' in ts, row.method
    hints = get_type_hints(Client.context)
    assert "since" in hints and 'ParamsOf<"session/context">' in ts


def test_the_table_changing_changes_the_wrappers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The drift test can fail: a row's call renamed is a different module."""
    import sidecar.protocol.clients as gen
    from sidecar.protocol.methods import Call

    rows = [
        msgspec.structs.replace(r, call=Call("fetch_session", ("session_id",)))
        if r.method == "session/get"
        else r
        for r in REQUESTS
    ]
    monkeypatch.setattr(gen, "REQUESTS", tuple(rows))
    python = gen.python_source()
    assert "async def fetch_session(" in python and python != PYTHON_OUT.read_text()
    assert "fetchSession(" in gen.typescript_source()
