"""Which PostgreSQL driver errors are an outage (-32048) and which stay bugs (-32603)."""

from __future__ import annotations

import asyncpg
from asyncpg import exceptions as pgx

from sidecar.store.pg_commit import driver_state, outage


def raised_while_handling(exc: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException:
            raise exc  # noqa: B904 - the implicit context is the point
    except BaseException as caught:
        return caught


def test_connection_errors_are_outages() -> None:
    assert outage(pgx.ConnectionDoesNotExistError("connection was closed"))
    assert outage(pgx.AdminShutdownError("terminating connection"))
    assert outage(pgx.CannotConnectNowError("the database system is starting up"))
    assert outage(ConnectionRefusedError(111, "refused"))


def test_a_state_error_raised_handling_a_lost_connection_is_an_outage() -> None:
    # A transaction's rollback after the server ended the session.
    lost = pgx.AdminShutdownError("terminating connection due to administrator command")
    wedged = asyncpg.InternalClientError("cannot switch to state 12; another operation (2)")
    assert outage(raised_while_handling(wedged, lost))
    closed = asyncpg.InterfaceError("cannot call Transaction.__aexit__(): connection is closed")
    assert outage(raised_while_handling(closed, lost))


def test_a_state_error_on_its_own_is_not_yet_an_outage_and_bugs_never_are() -> None:
    assert driver_state(asyncpg.InterfaceError("another operation is in progress"))
    assert not outage(asyncpg.InterfaceError("another operation is in progress"))
    bad = pgx.DataError("invalid input for query argument $1")
    assert not driver_state(bad) and not outage(bad)
    assert not outage(raised_while_handling(ValueError("a bug"), pgx.AdminShutdownError("x")))
    assert not outage(pgx.UniqueViolationError("duplicate key"))
