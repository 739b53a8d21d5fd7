"""Typed configuration (DESIGN §6) and its layered loading.

Layers, later wins: built-in defaults < user file < workspace file < ``initializationOptions``
< ``config/update`` < environment. Each layer is a partial JSON object deep-merged into the
previous one; the merged object is validated once, so an error names the offending key path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import msgspec

from sidecar.model.base import Base
from sidecar.model.tokens import ModelLimit

DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024


class CompactionConfig(Base, kw_only=True):
    auto: bool = True
    prune: bool = True
    method: Literal["standard", "collapse"] = "standard"
    # None = the method's own default: 1.0 for standard (seed 000), 0.85 for collapse (seed 003).
    trigger: float | None = None
    reserved: int = 0
    extract_ratio: float = 0.65
    recent_ratio: float = 0.15
    summary_max_tokens: int = 10_000
    previous_summaries: int = 3
    prune_protect: int = 40_000
    prune_minimum: int = 20_000
    protected_tools: list[str] = msgspec.field(default_factory=lambda: ["skill"])
    output_token_max: int = 32_000  # OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX

    def effective_trigger(self) -> float:
        if self.trigger is not None:
            return self.trigger
        return 0.85 if self.method == "collapse" else 1.0


class SummarizerConfig(Base, kw_only=True):
    provider: Literal["extractive", "openai", "anthropic", "client"] = "extractive"
    model: str | None = None
    base_url: str | None = msgspec.field(default=None, name="baseURL")
    api_key_env: str | None = None
    headers: dict[str, str] | None = None
    max_input_tokens: int | None = None
    timeout: float = 120.0  # seconds without a byte from the provider
    deadline: float = 600.0  # seconds for the whole summary, retries included
    max_retries: int = 4


class ServerConfig(Base, kw_only=True):
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES


class Config(Base, kw_only=True):
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
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "compaction-sidecar" / "config.json"


def read_layer(path: Path) -> dict[str, Any]:
    """A JSON config file as a layer; a missing file is an empty layer."""
    if not path.is_file():
        return {}
    data = msgspec.json.decode(path.read_bytes())
    if not isinstance(data, dict):
        raise ValueError(f"{path}: config must be a JSON object")
    return data


def build(layers: list[dict[str, Any]]) -> Config:
    """Merge layers in order and validate; raises ``msgspec.ValidationError`` naming the path."""
    merged: dict[str, Any] = {}
    for layer in layers:
        merged = deep_merge(merged, layer)
    return msgspec.convert(merged, Config)
