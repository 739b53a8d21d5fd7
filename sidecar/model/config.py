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
    # Opt-in: each summary ends with ``RECALL_HINT`` (the agent has the MCP history tools).
    recall_hint: bool = False

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
    """A JSON config file as a layer; a missing file is an empty layer."""
    if not path.is_file():
        return {}
    data = msgspec.json.decode(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: config must be a JSON object")
    return data


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
