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
DEFAULT_MCP_MAX_LINE_BYTES = 1024 * 1024

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
    # Opt-in: each summary ends with ``RECALL_HINT`` (the agent has the MCP history tools).
    recall_hint: bool = False
    # Seconds the configured writer may spend on one compaction, all its requests and retries
    # included; past it the summarizer's fallback writes the summary (or the compaction fails).
    time_budget: Seconds = 600.0
    # How a pruned tool output is sent: OpenCode's placeholder, or one informative line.
    pruned_stub: Literal["opencode", "informative"] = "opencode"
    # Also reject a summary that is too long or drops the task; retry once, then go offline.
    verify_summary: bool = False
    # Tokens of the artifact ledger's first and latest user requests, kept verbatim (one budget
    # for both; the latest is kept first when they do not fit; a cut says where).
    task_budget: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 2_000
    # Steering (PROTOCOL.md "Steering compaction"); every default leaves OpenCode's behaviour.
    trigger_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None
    keep: KeepConfig = msgspec.field(default_factory=KeepConfig)
    prompt: str | None = None  # replaces seed 000's final instruction to the writer
    system: str | None = None  # replaces the writer's system text
    overrides: list[Override] = msgspec.field(default_factory=list)
    # Zero-wait compaction: at a turn end with tokens >= prepare x usable, write the summary in
    # the background and commit it at the overflow (None: off, OpenCode's behaviour).
    prepare: Fraction | None = None
    # An overflow compaction after a step that ended in tool calls keeps the open turn (its
    # user message on) verbatim after the summary, as a read-time compaction always does
    # (False: OpenCode 1.1.53's behaviour, everything summarized).
    keep_open_turn: bool = False

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
    # Who writes the summary when the configured writer fails (unreachable, an error, out of
    # time): "extractive" (offline, so the window still fits) or None (the compaction fails).
    fallback: Literal["extractive"] | None = "extractive"


class ServerConfig(Strict, kw_only=True):
    """Daemon limits: set only in the daemon's own config files, never over the wire."""

    max_frame_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_FRAME_BYTES
    max_depth: Annotated[int, msgspec.Meta(ge=8, le=512)] = DEFAULT_MAX_DEPTH
    max_outgoing_bytes: Annotated[int, msgspec.Meta(ge=4096)] = DEFAULT_MAX_OUTGOING_BYTES
    max_reply_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_REPLY_BYTES
    # A TCP connection that has not authenticated (``initialize``) within this is closed.
    auth_timeout: Seconds = 10.0
    # Connections a shared daemon serves at once; more are refused (and logged).
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 256


class HistoryConfig(Strict, kw_only=True):
    """``history/search`` bounds (daemon-only, like ``server``): what one client's query may
    cost everyone else. A longer query, or one of more terms, is refused (-32602); a search
    that runs past its budget returns the hits it has, marked ``partial``."""

    max_query_chars: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 1_000
    max_query_terms: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 32
    search_budget_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] = 2_000
    # Writes quiet this long before the history index is brought up to date in the
    # background (a search brings it up to date first, whatever this is).
    index_delay_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 500


class McpConfig(Strict, kw_only=True):
    """``compaction-sidecar mcp``: read from the config files it is started with."""

    # A line (one JSON-RPC message) longer than this is refused, never held whole.
    max_line_bytes: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MCP_MAX_LINE_BYTES


class Config(Strict, kw_only=True):
    compaction: CompactionConfig = msgspec.field(default_factory=CompactionConfig)
    summarizer: SummarizerConfig = msgspec.field(default_factory=SummarizerConfig)
    models: dict[str, ModelLimit] = msgspec.field(default_factory=dict)
    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    history: HistoryConfig = msgspec.field(default_factory=HistoryConfig)
    mcp: McpConfig = msgspec.field(default_factory=McpConfig)

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


class ConfigError(Exception):
    """A config file that cannot be used: the message is one line naming the file, the key
    path and the problem (``config file F: compaction.atuo: unknown key (did you mean ...)``)."""


def read_layer(path: Path) -> dict[str, Any]:
    """A JSON config file as a layer, checked on its own so an error names this file; a
    missing file is an empty layer. ``promptFile`` and ``systemFile`` (in ``compaction`` and
    its overrides) are read now, relative to the file, and become ``prompt`` and ``system``.
    Raises :class:`ConfigError`."""
    if not path.is_file():
        return {}
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"config file {path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"config file {path}: {_where_in_json(raw, str(exc))}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: must be a JSON object, not {_kind(data)}")
    comp = data.get("compaction")
    if isinstance(comp, dict):
        _read_text_files(comp, path, "compaction")
        overrides = comp.get("overrides")
        if isinstance(overrides, list):
            for i, entry in enumerate(overrides):
                inner = entry.get("compaction") if isinstance(entry, dict) else None
                if isinstance(inner, dict):
                    _read_text_files(inner, path, f"compaction.overrides[{i}].compaction")
    try:
        build([data])
    except msgspec.ValidationError as exc:
        raise ConfigError(f"config file {path}: {describe(str(exc), data)}") from None
    return data


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null"}.get(type(value), "a value")


_BYTE = re.compile(r"\(byte (\d+)\)")


def _where_in_json(raw: bytes, message: str) -> str:
    """msgspec's ``JSON is malformed: ... (byte 27)`` with the byte turned into line:column."""
    found = _BYTE.search(message)
    if found is None:
        return message
    offset = int(found.group(1))
    line = raw.count(b"\n", 0, offset) + 1
    column = offset - (raw.rfind(b"\n", 0, offset) + 1) + 1
    return _BYTE.sub(f"(line {line}, column {column})", message)


_AT = re.compile(r"^(.*?)(?: - at `\$([^`]*)`)?((?: \(did you mean `[^`]*`\?\))?)$", re.S)


def describe(text: str, data: dict[str, Any] | None = None) -> str:
    """A validation message as ``key.path: problem`` (the key path first, no ``$``); with the
    layer's ``data``, a ``models`` entry is named by its key and the bad value is quoted."""
    unknown = _UNKNOWN.search(text)
    if unknown is not None:
        name, path = unknown.groups()
        keys = [*_key_path(path or "", data), name]
        hint = text[text.find(" (did you mean") :] if "(did you mean" in text else ""
        return f"{'.'.join(k for k in keys if k)}: unknown key{hint}"
    found = _AT.match(text)
    if found is None or not found.group(2):
        return text
    problem, path, hint = found.groups()
    keys = _key_path(path, data)
    problem = problem[0].lower() + problem[1:]
    value = _value_at(data, keys)
    if value is not _MISSING and ", got" not in problem:
        problem += f", got {msgspec.json.encode(value).decode()}"
    return f"{'.'.join(keys) or '$'}: {problem}{hint}"


_MISSING = object()
_SEGMENT = re.compile(r"\.([^.\[]+)|\[(\d+|\.\.\.)\]")


def _key_path(path: str, data: dict[str, Any] | None) -> list[str]:
    """``$.models[...].context`` -> ``["models", "x/y", "context"]``: msgspec does not name a
    dict's key, so the first entry of the layer that fails on its own is the one."""
    keys: list[str] = []
    node: Any = data
    for attr, index in _SEGMENT.findall(path):
        key = attr or index
        if index == "..." and isinstance(node, dict) and keys == ["models"]:
            key = next((k for k, v in node.items() if not _valid_limit(v)), "...")
        keys.append(key)
        if isinstance(node, dict):
            node = node.get(key)
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            node = None
    return keys


def _valid_limit(value: Any) -> bool:
    try:
        msgspec.convert(value, ModelLimit)
    except msgspec.ValidationError:
        return False
    return True


def _value_at(data: dict[str, Any] | None, keys: list[str]) -> Any:
    node: Any = data
    for key in keys:
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return _MISSING
    return node if isinstance(node, int | float | bool | str) or node is None else _MISSING


_ENV_NAMES = (
    "OPENCODE_DISABLE_AUTOCOMPACT",
    "OPENCODE_DISABLE_PRUNE",
    "OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX",
)


class Loaded(msgspec.Struct, frozen=True):
    """What ``load_files`` found: the files in order (missing ones too), the environment
    variables that set something, and the config they make."""

    files: list[Path]
    environment: list[str]
    config: Config


def load_files(workspace: Path | None = None, environ: dict[str, str] | None = None) -> Loaded:
    """The daemon's own layers: the user file, ``workspace`` (``--config``), the environment.
    Raises :class:`ConfigError` naming the file at fault."""
    files = [user_config_path(), *([workspace] if workspace is not None else [])]
    layers = [read_layer(p) for p in files]
    env = dict(os.environ) if environ is None else environ
    set_by_env = [n for n in _ENV_NAMES if n in env and env_layer({n: env[n]})]
    return Loaded(files, set_by_env, build([*layers, env_layer(env)]))


REDACTED = "<redacted>"


def shown(cfg: Config) -> dict[str, Any]:
    """``cfg`` as JSON-ready data that is safe to print: header values and a ``baseURL``'s
    userinfo (where credentials live) are redacted; ``apiKeyEnv`` is a variable's name, never
    its value."""
    data: dict[str, Any] = msgspec.to_builtins(cfg)
    summarizers = [data.get("summarizer", {})]
    summarizers += [o.get("summarizer", {}) for o in data["compaction"].get("overrides", [])]
    for summarizer in summarizers:  # the base's and each override's
        headers = summarizer.get("headers")
        if isinstance(headers, dict):
            summarizer["headers"] = {k: REDACTED for k in headers}
        base = summarizer.get("baseURL")
        if isinstance(base, str):
            # ``https://user:secret@host/v1``: credentials in the URL are redacted too.
            summarizer["baseURL"] = re.sub(r"(?<=://)[^/@]*@", f"{REDACTED}@", base)
    return data


_TEXT_FILES = {"promptFile": "prompt", "systemFile": "system"}


def _read_text_files(comp: dict[str, Any], config_path: Path, where: str) -> None:
    for key, target in _TEXT_FILES.items():
        if key not in comp:
            continue
        name = comp.pop(key)
        if not isinstance(name, str):
            raise ConfigError(f"config file {config_path}: {where}.{key}: must be a path")
        file = Path(name).expanduser()
        if not file.is_absolute():
            file = config_path.parent / file
        try:
            comp[target] = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ConfigError(
                f"config file {config_path}: {where}.{key}: cannot read {str(file)!r}: {why}"
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
