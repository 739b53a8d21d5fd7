"""The open-turn rules (issue 31, 3b): where the session's open turn starts, and how much of it
a compaction keeps when it does not fit."""

from __future__ import annotations

from sidecar.engine import open_turn
from sidecar.engine.filter import filter_compacted
from sidecar.engine.tokens import estimate_messages
from sidecar.model.conversation import CONTINUE_TEXT

from .builders import Session, chars, text, tool


def test_a_turn_whose_last_step_asked_for_tools_is_open_from_its_user_message() -> None:
    s = Session()
    s.turn("done")
    u = s.user("read it")
    s.assistant(tool("read", "data"), finish="tool-calls")
    assert open_turn.start(s.messages) == s.messages.index(u)


def test_a_turn_without_a_finished_step_yet_is_open() -> None:
    s = Session()
    s.turn("done")
    s.user("read it")
    assert open_turn.start(s.messages) == 2  # the user message alone, no step yet
    s.assistant(finish=None)  # the step being made
    assert open_turn.start(s.messages) == 2


def test_a_turn_that_ended_is_not_open() -> None:
    s = Session()
    s.user("read it")
    s.assistant(tool("read", "data"), finish="tool-calls")
    s.assistant("here it is", finish="stop")
    assert open_turn.start(s.messages) is None
    assert open_turn.start([]) is None


def test_a_continue_message_inside_an_open_turn_does_not_start_a_new_turn() -> None:
    """A compaction that kept the open turn appended its continue message after it: the turn
    still begins at the user's message."""
    s = Session()
    s.turn("old")
    u = s.user("read both")
    s.assistant(tool("read", "a"), finish="tool-calls")
    s.compact(tail=u.info.id)
    s.user(text(CONTINUE_TEXT, synthetic=True))
    s.assistant(tool("read", "b"), finish="tool-calls")
    window = filter_compacted(s.messages)
    assert window[open_turn.start(window) or 0].info.id == u.info.id


def test_a_continue_message_after_a_finished_turn_starts_the_turn() -> None:
    s = Session()
    s.turn("old")
    s.compact()
    cont = s.user(text(CONTINUE_TEXT, synthetic=True))
    s.assistant(tool("read", "b"), finish="tool-calls")
    window = filter_compacted(s.messages)
    at = open_turn.start(window)
    assert at is not None and window[at].info.id == cont.info.id


def test_a_turn_that_fits_is_kept_whole() -> None:
    s = Session()
    s.turn("old")
    s.user("read")
    s.assistant(tool("read", chars(100)), finish="tool-calls")
    assert open_turn.kept_from(s.messages, 2, None) == (2, "kept")
    assert open_turn.kept_from(s.messages, 2, 1_000) == (2, "kept")


def test_a_turn_that_does_not_fit_keeps_its_newest_messages_that_do() -> None:
    s = Session()
    s.user("read")
    s.assistant(tool("read", chars(500)), finish="tool-calls")
    s.assistant(tool("read", chars(300)), finish="tool-calls")
    s.assistant(tool("read", chars(300)), finish="tool-calls")
    newest_two = estimate_messages(s.messages[2:])
    assert open_turn.kept_from(s.messages, 0, newest_two) == (2, "cut")
    # Not even the newest message fits: nothing is kept (the compaction could not shrink).
    assert open_turn.kept_from(s.messages, 0, 10) == (4, "cut")
