"""Typed configuration (PROTOCOL.md, "Configuration and isolation") and its layered loading.

Layers, later wins: built-in defaults < user file < workspace file < ``initializationOptions``
< ``config/update`` < environment. Each layer is a partial JSON object deep-merged into the
previous one; the merged object is validated once, so an error names the offending key path.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from sidecar.model.base import Count, wire_name
from sidecar.model.tokens import ModelLimit

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_DEPTH = 64
DEFAULT_MAX_OUTGOING_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_REPLY_BYTES = 128 * 1024 * 1024

Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
Ratio = Annotated[float, msgspec.Meta(gt=0, lt=1)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=86_400)]


class Strict(msgspec.Struct, kw_only=True, rename=wire_name, forbid_unknown_fields=True):
    """Config objects: an unknown key is an error that names it (a typo must not be ignored),
    and every value is written, defaults included (``config/get`` shows what is in force)."""


class KeepConfig(Strict, kw_only=True):
    """``compaction.keep``: what every summary carries verbatim in its ``## Kept verbatim``
    block, rebuilt from the stored data at each compaction (never copied from the previous
    summary, so nothing drifts). The defaults add nothing unless a part is pinned."""

    pinned: bool = True
    first_request: bool = False
    todo_tools: list[str] = msgspec.field(default_factory=list)
    max_tokens: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 4_000


class OverrideMatch(Strict, kw_only=True):
    """Which turns an override applies to; a missing key matches anything. ``model`` is
    ``provider/model`` and may use ``*`` globs (``anthropic/*``)."""

    model: str | None = None
    agent: str | None = None


class Override(Strict, kw_only=True):
    """One ``compaction.overrides`` entry: partial ``compaction`` and ``summarizer`` objects
    deep-merged over the base config when ``match`` holds (checked when the config is built)."""

    match: OverrideMatch = msgspec.field(default_factory=OverrideMatch)
    compaction: dict[str, Any] = msgspec.field(default_factory=dict)
    summarizer: dict[str, Any] = msgspec.field(default_factory=dict)


class CompactionConfig(Strict, kw_only=True):
    auto: bool = True
    prune: bool = True
    method: Literal["standard", "collapse"] = "standard"
    # None = the method's own default: 1.0 for standard (seed 000), 0.85 for collapse (seed 003).
    trigger: Fraction | None = None
    reserved: Count = 0
    extract_ratio: Ratio = 0.65
    recent_ratio: Ratio = 0.15
    summary_max_tokens: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    # The summary's max_tokens is also capped at usable // summaryShare (0: no such cap) and
    # at the model's output limit; summaryMaxTokens 32000 + summaryShare 0 is OpenCode's.
    summary_share: Annotated[int, msgspec.Meta(ge=0, le=1_000)] = 4
    previous_summaries: Annotated[int, msgspec.Meta(ge=0, le=100)] = 3
    prune_protect: Count = 40_000
    prune_minimum: Count = 20_000
    protected_tools: list[str] = msgspec.field(default_factory=lambda: ["skill"])
    output_token_max: Annotated[int, msgspec.Meta(ge=1)] = 32_000  # OPENCODE_EXPERIMENTAL_...
    # Steering (PROTOCOL.md "Steering compaction"); every default leaves OpenCode's behaviour.
    trigger_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    keep: KeepConfig = msgspec.field(default_factory=KeepConfig)
    prompt: str | None = None  # replaces seed 000's final instruction to the writer
    system: str | None = None  # replaces the writer's system text
    overrides: list[Override] = msgspec.field(default_factory=list)

    def effective_trigger(self) -> float:
        if self.trigger is not None:
            return self.trigger
        return 0.85 if self.method == "collapse" else 1.0


class SummarizerConfig(Strict, kw_only=True):
    provider: Literal["extractive", "openai", "anthropic", "client"] = "extractive"
    model: str | None = None
    base_url: str | None = msgspec.field(default=None, name="baseURL")
    api_key_env: str | None = None
    headers: dict[str, str] | None = None
    max_input_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    timeout: Seconds = 120.0  # seconds without a byte from the provider
    deadline: Seconds = 600.0  # seconds for the whole summary, retries included
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=20)] = 4


class ServerConfig(Strict, kw_only=True):
    """Daemon limits: set only in the daemon's own config files, never over the wire."""

    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_FRAME_BYTES
    max_depth: Annotated[int, msgspec.Meta(ge=8, le=512)] = DEFAULT_MAX_DEPTH
    max_outgoing_bytes: Annotated[int, msgspec.Meta(ge=4096)] = DEFAULT_MAX_OUTGOING_BYTES
    max_reply_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_REPLY_BYTES


class Config(Strict, kw_only=True):
    compaction: CompactionConfig = msgspec.field(default_factory=CompactionConfig)
    summarizer: SummarizerConfig = msgspec.field(default_factory=SummarizerConfig)
    models: dict[str, ModelLimit] = msgspec.field(default_factory=dict)
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)

    def __post_init__(self) -> None:
        # Each override is checked once here, so a bad one is refused when the config is
        # loaded or set (naming it), never at the compaction that first matches it.
        for i, entry in enumerate(self.compaction.overrides):
            if "overrides" in entry.compaction:
                raise ValueError(f"`compaction.overrides[{i}].compaction` may not nest overrides")
            try:
                apply_override(self, entry)
            except msgspec.ValidationError as exc:
                raise ValueError(f"`compaction.overrides[{i}]`: {exc}") from None

    def for_turn(self, model: str | None, agent: str | None) -> Config:
        """This config with every matching ``compaction.overrides`` entry applied in order:
        the settings for the turn of ``model`` (``provider/model``) and ``agent``."""
        out = self
        for entry in self.compaction.overrides:
            if _matches(entry.match, model, agent):
                out = apply_override(out, entry)
        return out


def _matches(match: OverrideMatch, model: str | None, agent: str | None) -> bool:
    import fnmatch

    if match.model is not None and (model is None or not fnmatch.fnmatchcase(model, match.model)):
        return False
    return match.agent is None or match.agent == agent


_SUMMARIZER_ENDPOINT = ("provider", "baseURL")
_SUMMARIZER_CREDENTIALS = ("apiKeyEnv", "headers")


def apply_override(cfg: Config, entry: Override) -> Config:
    """``cfg`` with ``entry``'s partial objects merged in. A summarizer override that names
    another endpoint does not inherit the base's credentials (they travel only to the endpoint
    configured beside them): it must name its own."""
    base = msgspec.to_builtins(cfg)
    comp = deep_merge(base["compaction"], entry.compaction)
    comp["overrides"] = []  # applied once; the result is a plain config
    summ = base["summarizer"]
    if any(k in entry.summarizer for k in _SUMMARIZER_ENDPOINT):
        summ = {k: v for k, v in summ.items() if k not in _SUMMARIZER_CREDENTIALS}
    summ = deep_merge(summ, entry.summarizer)
    merged = {**base, "compaction": comp, "summarizer": summ}
    out = msgspec.convert(merged, Config)
    out.compaction.overrides = cfg.compaction.overrides
    return out


def deep_merge(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """Merge ``patch`` into a copy of ``base``; nested objects merge, everything else replaces."""
    out = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _truthy(value: str | None) -> bool:
    return value is not None and value.lower() in ("true", "1")


def env_layer(environ: os._Environ[str] | dict[str, str] | None = None) -> dict[str, Any]:
    """The environment as a config layer, with OpenCode's variable names and truthiness."""
    env = os.environ if environ is None else environ
    compaction: dict[str, Any] = {}
    if _truthy(env.get("OPENCODE_DISABLE_AUTOCOMPACT")):
        compaction["auto"] = False
    if _truthy(env.get("OPENCODE_DISABLE_PRUNE")):
        compaction["prune"] = False
    raw_max = env.get("OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX")
    if raw_max and raw_max.isdigit() and int(raw_max) > 0:
        compaction["outputTokenMax"] = int(raw_max)
    return {"compaction": compaction} if compaction else {}


def user_config_path() -> Path:
    """The user config file in the platform's config dir (``$XDG_CONFIG_HOME`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_config_dir("compaction-sidecar", appauthor=False)) / "config.json"


def read_layer(path: Path) -> dict[str, Any]:
    """A JSON config file as a layer; a missing file is an empty layer. ``promptFile`` and
    ``systemFile`` (in ``compaction`` and its overrides) are read now, relative to the file,
    and become ``prompt`` and ``system``; an unreadable one is an error naming it."""
    if not path.is_file():
        return {}
    data = msgspec.json.decode(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: config must be a JSON object")
    comp = data.get("compaction")
    if isinstance(comp, dict):
        _read_text_files(comp, path, "compaction")
        overrides = comp.get("overrides")
        if isinstance(overrides, list):
            for i, entry in enumerate(overrides):
                inner = entry.get("compaction") if isinstance(entry, dict) else None
                if isinstance(inner, dict):
                    _read_text_files(inner, path, f"compaction.overrides[{i}].compaction")
    return data


_TEXT_FILES = {"promptFile": "prompt", "systemFile": "system"}


def _read_text_files(comp: dict[str, Any], config_path: Path, where: str) -> None:
    for key, target in _TEXT_FILES.items():
        if key not in comp:
            continue
        name = comp.pop(key)
        if not isinstance(name, str):
            raise ValueError(f"{config_path}: `{where}.{key}` must be a path (a string)")
        file = Path(name).expanduser()
        if not file.is_absolute():
            file = config_path.parent / file
        try:
            comp[target] = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(
                f"{config_path}: `{where}.{key}`: cannot read {str(file)!r}: {why}"
            ) from None


def build(layers: list[dict[str, Any]]) -> Config:
    """Merge layers in order and validate; raises ``msgspec.ValidationError`` naming the path
    (and, for an unknown key, the closest known one)."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    try:
        return msgspec.convert(merged, Config)
    except msgspec.ValidationError as exc:
        raise msgspec.ValidationError(_with_suggestion(str(exc))) from None


_UNKNOWN = re.compile(r"Object contains unknown field `([^`]*)`(?: - at `\$([^`]*)`)?")


def _with_suggestion(text: str) -> str:
    """``unknown field `atuo``` -> add ``(did you mean `auto`?)`` from the Struct at that path."""
    found = _UNKNOWN.search(text)
    if found is None:
        return text
    name, path = found.groups()
    struct: Any = Config
    for key in path.strip(".").split(".") if path else []:
        fields = {f.encode_name: f.type for f in msgspec.structs.fields(struct)}
        struct = fields.get(key)
        if not (isinstance(struct, type) and issubclass(struct, msgspec.Struct)):
            return text
    known = [f.encode_name for f in msgspec.structs.fields(struct)]
    close = difflib.get_close_matches(name, known, n=1)
    return f"{text} (did you mean `{close[0]}`?)" if close else text
