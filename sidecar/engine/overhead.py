"""The frontend's fixed overhead (PROTOCOL.md ``session/context`` ``overheadTokens``).

What a frontend adds to the daemon's window before it calls the model (its system prompt,
the tool schemas: ~9,300 tokens in OpenCode) is invisible to the daemon's estimate, so a
window the read-time fit thought fitted could go over. A client may say it
(``overheadTokens``); otherwise the daemon learns it from each finished step: the input the
provider reported (``input + cache.read``) less its estimate of the window it served for that
step. The learned value is the median of the session's last ``SAMPLES`` steps (one odd step,
a retry or a different agent's prompt, does not move it), never below 0.

Pure rules, and the per-session memory of what was served and learned (in memory; the engine
stores the learned value with the session's limits so a restart starts from it).
"""

from __future__ import annotations

import statistics
from collections import deque

from sidecar.model.tokens import Tokens

SAMPLES = 7  # the recent steps the median is taken over
MAX_SESSIONS = 4_096  # sessions whose samples are remembered (the oldest forgotten first)


def sample(tokens: Tokens, served: int) -> int | None:
    """One step's overhead: its reported input less the estimate of the window served for it;
    None when the provider reported no input (many local servers report no usage)."""
    reported = tokens.input + tokens.cache.read
    if reported <= 0:
        return None
    return reported - served


def learned(samples: deque[int] | list[int]) -> int | None:
    """The median of ``samples`` (the lower middle of an even count), never below 0."""
    if not samples:
        return None
    return max(0, int(statistics.median_low(samples)))


class Overheads:
    """Per session: the estimate of the last window served, the steps' samples, and the
    steps already counted (a message is updated more than once after it finished)."""

    def __init__(self) -> None:
        self._served: dict[str, int] = {}
        self._samples: dict[str, deque[int]] = {}
        self._counted: dict[str, str] = {}  # the newest message sampled, per session

    def served(self, session_id: str, estimate: int) -> None:
        """A window of ``estimate`` tokens was served for the session's next step."""
        self._served.pop(session_id, None)
        self._served[session_id] = estimate
        while len(self._served) > MAX_SESSIONS:
            stale = next(iter(self._served))
            self.forget(stale)

    def finished(self, session_id: str, message_id: str, tokens: Tokens) -> None:
        """A step finished with ``tokens``: one sample, if a window was served for it."""
        served = self._served.get(session_id)
        if served is None or self._counted.get(session_id) == message_id:
            return
        value = sample(tokens, served)
        if value is None:
            return
        self._counted[session_id] = message_id
        self._samples.setdefault(session_id, deque(maxlen=SAMPLES)).append(value)

    def learned(self, session_id: str) -> int | None:
        samples = self._samples.get(session_id)
        return learned(samples) if samples is not None else None

    def forget(self, session_id: str) -> None:
        self._served.pop(session_id, None)
        self._samples.pop(session_id, None)
        self._counted.pop(session_id, None)
