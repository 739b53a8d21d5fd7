"""``compaction.verifySummary``: reject a summary that is too long or has dropped the task.

A writer that returns more than it replaces, more than its budget, or a text that never
mentions what the session is about would cost the next turn more than it saves, or lose the
goal. The checks are deterministic and look only at the writer's own text: the artifact ledger
and any block the daemon appends are the daemon's, so they cannot vouch for the writer.

Pure: no I/O.
"""

from __future__ import annotations

import re

from sidecar.engine import ledger
from sidecar.model.tokens import estimate

MAX_TERMS = 24
RARE_WORD_CHARS = 8  # without a corpus, length stands in for rarity
# Long words that say nothing about a particular task.
_COMMON = frozenset(
    """
    actually additional available something following different implement implementation
    including instead possible probably question requirements requested response something
    currently important interface yourself understand otherwise everything themselves together
    whenever therefore beginning continue continued information approach properly correctly
    necessary function functions variable variables existing specific specifically described
    description provided anything complete completed changes changing working summarize summary
    conversation because without""".split()
)
_PATH = re.compile(r"(?:[\w.~-]+/)+[\w.-]+|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,5}\b")
_IDENT = re.compile(
    r"\b(?:[A-Za-z_]\w*_\w+|[a-z]+[A-Z]\w*|[A-Z][a-z0-9]+[A-Z]\w*|[A-Za-z]+\d\w*|\w+\(\))"
)
_WORD = re.compile(r"\b[A-Za-z][A-Za-z-]+\b")


def key_terms(request: str) -> list[str]:
    """The terms of a request a faithful summary names at least one of: paths and file names,
    identifiers (``snake_case``, ``camelCase``, ``name()``, words with digits), then its rarer
    words. Deterministic, in order of appearance, at most ``MAX_TERMS``."""
    found: dict[str, None] = {}
    for pattern in (_PATH, _IDENT):
        for m in pattern.finditer(request):
            term = m.group(0).strip(".-/()")
            if len(term) >= 3:
                found.setdefault(term, None)
    for m in _WORD.finditer(request):
        word = m.group(0).strip("-")
        if len(word) >= RARE_WORD_CHARS and word.lower() not in _COMMON:
            found.setdefault(word, None)
    return list(found)[:MAX_TERMS]


def drops_task(own: str, request: str) -> bool:
    """Whether the writer's own text names none of the request's key terms (a request with no
    key terms cannot be checked: never)."""
    terms = key_terms(request)
    if not terms:
        return False
    text = own.lower()
    return not any(t.lower() in text for t in terms)


def problem(text: str, *, budget: int, replaced: int, first_request: str) -> str | None:
    """Why ``text`` (a whole summary: the writer's text, then the ledger) is rejected, or
    ``None``. ``replaced``: the estimated tokens of what it replaces."""
    size = estimate(text)
    if replaced > 0 and size > replaced:
        return f"longer than what it replaces ({size} tokens for {replaced})"
    if size > budget:
        return f"over its budget ({size} tokens, budget {budget})"
    own = ledger.drop_block(text)
    if first_request and drops_task(own, first_request):
        terms = ", ".join(key_terms(first_request)[:6])
        return f"drops the task (names none of the first request's key terms: {terms})"
    return None


def note(reason: str, budget: int) -> str:
    """What the retry is told, appended to the prompt."""
    return (
        f"\n\nYour previous summary was rejected: it was {reason}. Write it again, under "
        f"{budget} tokens, shorter than the conversation it replaces, and state the user's task "
        "in its own words, naming its files and identifiers."
    )
