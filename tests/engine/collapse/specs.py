"""What a session to write is made of: turns of assistant steps with tool calls, by size.

The harness's ``Writer`` writes them; ``strategies`` draws them at random.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ToolSpec:
    tool: str  # bash | read | edit | write | grep
    status: str  # completed | error | pending | running
    size: int  # output (or error) characters
    file: int  # which file an edit/write/read touches


@dataclass(frozen=True)
class StepSpec:
    text: int  # characters of assistant text (0: none)
    tools: tuple[ToolSpec, ...]
    reasoning: bool = False
    error: str | None = None  # e.g. "MessageAbortedError", "APIError"


@dataclass(frozen=True)
class TurnSpec:
    user: int  # characters of the user prompt
    steps: tuple[StepSpec, ...]
