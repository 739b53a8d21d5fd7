"""Context limits of common models, so overflow works before a frontend configures anything.

Figures are the providers' published limits as collected by models.dev (the catalog OpenCode
itself loads), read for the models below; config ``models`` overrides any entry. A model not
found here (and not configured) has unknown limits: the daemon says so once and does not
auto-compact it rather than guess.
"""

from __future__ import annotations

from sidecar.model.tokens import ModelLimit

_L = ModelLimit

CATALOG: dict[str, ModelLimit] = {
    # Anthropic (docs.anthropic.com "Models overview"; output = max output tokens)
    "anthropic/claude-opus-4-5": _L(context=200_000, output=64_000),
    "anthropic/claude-sonnet-4-5": _L(context=200_000, output=64_000),
    "anthropic/claude-haiku-4-5": _L(context=200_000, output=64_000),
    "anthropic/claude-opus-4-1": _L(context=200_000, output=32_000),
    "anthropic/claude-sonnet-4-20250514": _L(context=200_000, output=64_000),
    "anthropic/claude-3-7-sonnet-20250219": _L(context=200_000, output=64_000),
    "anthropic/claude-3-5-sonnet-20241022": _L(context=200_000, output=8_192),
    "anthropic/claude-3-5-sonnet-20240620": _L(context=200_000, output=8_192),
    "anthropic/claude-3-5-haiku-20241022": _L(context=200_000, output=8_192),
    # OpenAI (platform.openai.com model pages)
    "openai/gpt-5": _L(context=400_000, input=272_000, output=128_000),
    "openai/gpt-5-mini": _L(context=400_000, input=272_000, output=128_000),
    "openai/gpt-4.1": _L(context=1_047_576, output=32_768),
    "openai/gpt-4.1-mini": _L(context=1_047_576, output=32_768),
    "openai/gpt-4o": _L(context=128_000, output=16_384),
    "openai/gpt-4o-mini": _L(context=128_000, output=16_384),
    "openai/gpt-4": _L(context=8_192, output=8_192),
    "openai/o3": _L(context=200_000, output=100_000),
    "openai/o4-mini": _L(context=200_000, output=100_000),
    # Google (ai.google.dev Gemini models page)
    "google/gemini-2.5-pro": _L(context=1_048_576, output=65_536),
    "google/gemini-2.5-flash": _L(context=1_048_576, output=65_536),
    # DeepSeek (api-docs.deepseek.com "Models & Pricing": 128K context, 8K max output)
    "deepseek/deepseek-chat": _L(context=128_000, output=8_192),
    "deepseek/deepseek-reasoner": _L(context=128_000, output=64_000),
}


def lookup(
    provider_id: str, model_id: str, overrides: dict[str, ModelLimit] | None = None
) -> ModelLimit | None:
    """Configured limits first, then the catalog; a bare model id matches any provider."""
    key = f"{provider_id}/{model_id}"
    for table in (overrides or {}, CATALOG):
        if key in table:
            return table[key]
        if model_id in table:
            return table[model_id]
    for name, limit in CATALOG.items():
        if name.split("/", 1)[1] == model_id:
            return limit
    return None
