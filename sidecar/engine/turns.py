"""The turn clock: when a session's turn has ended, which its automatic work waits for.

OpenCode compacts only after the step's parts are written; a frontend says a turn ended with
its next user message, ``session/idle`` or a read that waits for the work, or says nothing
(then ``TURN_QUIET_S`` without a write ends it). Writes touch it through the write door.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

# A frontend that never says its turn ended (no ``session/idle``, no waiting read, no next
# user message): the turn is taken to have ended this long after its last write.
TURN_QUIET_S = 2.0


class Turn:
    """The end of a session's current turn, which the automatic work its finished messages
    caused waits for (OpenCode compacts only after the step's parts are written): the
    session's next user message, ``session/idle`` or a read that waits for the work, or, for
    a frontend that says none of these, ``TURN_QUIET_S`` without a write to the session."""

    def __init__(self, on_end: Callable[[Turn], None]) -> None:
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._on_end = on_end
        self.ended: asyncio.Future[None] = loop.create_future()
        self.last = loop.time()
        self._timer = loop.call_later(TURN_QUIET_S, self._quiet)

    def touch(self) -> None:
        self.last = self._loop.time()

    def _quiet(self) -> None:
        due = self.last + TURN_QUIET_S - self._loop.time()
        if due > 0:
            self._timer = self._loop.call_later(due, self._quiet)
        else:
            self.end()

    def cancel(self) -> None:
        self._timer.cancel()

    def end(self) -> None:
        self._timer.cancel()
        if not self.ended.done():
            self.ended.set_result(None)
            self._on_end(self)


class Turns:
    """Per session, the turn whose end its pending automatic work waits for."""

    def __init__(self) -> None:
        self._turns: dict[str, Turn] = {}

    def sessions(self) -> list[str]:
        return list(self._turns)

    def end(self, session_id: str) -> None:
        """The session's turn ended: its pending automatic work may start."""
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.end()

    def touch(self, session_id: str) -> None:
        """A write to the session: its turn (if work waits for its end) is not quiet yet."""
        turn = self._turns.get(session_id)
        if turn is not None:
            turn.touch()

    def of(self, session_id: str) -> Turn:
        """The session's current turn, begun now when none is open."""
        turn = self._turns.get(session_id)
        if turn is None:

            def ended(t: Turn) -> None:
                if self._turns.get(session_id) is t:
                    del self._turns[session_id]

            turn = self._turns[session_id] = Turn(ended)
        return turn

    def cancel_all(self) -> None:
        for turn in list(self._turns.values()):
            turn.cancel()
