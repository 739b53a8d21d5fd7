from sidecar.engine.overflow import Overflow, check
from sidecar.model.config import CompactionConfig, build, env_layer
from sidecar.model.tokens import CacheTokens, ModelLimit, Tokens

DEFAULT = CompactionConfig()


def used(input: int = 0, output: int = 0, read: int = 0, write: int = 0) -> Tokens:
    return Tokens(input=input, output=output, cache=CacheTokens(read=read, write=write))


def test_context_minus_capped_output() -> None:
    # 100k context, 32k output: usable 68k; 75k + 5k = 80k overflows.
    limit = ModelLimit(context=100_000, output=32_000)
    assert check(used(75_000, 5_000), limit, DEFAULT) == Overflow(True, 80_000, 68_000)


def test_input_limit_with_cache_read() -> None:
    # 400k context, 272k input cap: 271k + 1k + 2k cache.read = 274k > 272k.
    limit = ModelLimit(context=400_000, input=272_000, output=128_000)
    assert check(used(271_000, 1_000, read=2_000), limit, DEFAULT) == Overflow(
        True, 274_000, 272_000
    )


def test_well_under_input_limit() -> None:
    limit = ModelLimit(context=200_000, input=120_000, output=10_000)
    assert check(used(50_000, 9_999), limit, DEFAULT) == Overflow(False, 59_999, 120_000)


def test_cache_write_is_not_counted() -> None:
    limit = ModelLimit(context=100_000, output=32_000)
    assert check(used(60_000, 0, write=30_000), limit, DEFAULT) == Overflow(False, 60_000, 68_000)


def test_equal_is_not_overflow() -> None:
    limit = ModelLimit(context=100_000, output=32_000)
    assert check(used(68_000), limit, DEFAULT) == Overflow(False, 68_000, 68_000)
    assert check(used(68_001), limit, DEFAULT).overflow is True


def test_output_capped_at_output_token_max() -> None:
    # 128k output is capped to 32k: usable 200k - 32k = 168k.
    limit = ModelLimit(context=200_000, output=128_000)
    assert check(used(168_000), limit, DEFAULT) == Overflow(False, 168_000, 168_000)


def test_output_zero_means_output_token_max() -> None:
    limit = ModelLimit(context=100_000, output=0)
    assert check(used(68_001), limit, DEFAULT) == Overflow(True, 68_001, 68_000)


def test_small_output_limit_is_used_as_is() -> None:
    limit = ModelLimit(context=100_000, output=8_000)
    assert check(used(90_000), limit, DEFAULT) == Overflow(False, 90_000, 92_000)


def test_output_token_max_override_from_env() -> None:
    cfg = build([env_layer({"OPENCODE_EXPERIMENTAL_OUTPUT_TOKEN_MAX": "16000"})]).compaction
    assert cfg.output_token_max == 16_000
    limit = ModelLimit(context=100_000, output=32_000)
    # The default config overflows at 80k (usable 68k); with a 16k reserve usable is 84k.
    assert check(used(75_000, 5_000), limit, cfg) == Overflow(False, 80_000, 84_000)
    assert check(used(75_000, 5_000), ModelLimit(context=100_000), cfg).usable == 84_000


def test_reserved_is_subtracted_from_usable() -> None:
    cfg = CompactionConfig(reserved=20_000)
    limit = ModelLimit(context=400_000, input=272_000, output=128_000)
    assert check(used(252_000), limit, cfg) == Overflow(False, 252_000, 252_000)
    assert check(used(252_001), limit, cfg) == Overflow(True, 252_001, 252_000)
    limit = ModelLimit(context=100_000, output=32_000)
    assert check(used(48_001), limit, cfg) == Overflow(True, 48_001, 48_000)


def test_trigger_fraction() -> None:
    cfg = CompactionConfig(trigger=0.9)
    limit = ModelLimit(context=100_000, output=0)  # usable 68k; 90% = 61,200
    assert check(used(61_200), limit, cfg) == Overflow(False, 61_200, 68_000)
    assert check(used(61_201), limit, cfg) == Overflow(True, 61_201, 68_000)


def test_collapse_defaults_to_85_percent() -> None:
    cfg = CompactionConfig(method="collapse")
    limit = ModelLimit(context=100_000, output=0)  # 85% of 68k = 57,800
    assert check(used(57_800), limit, cfg).overflow is False
    assert check(used(57_801), limit, cfg).overflow is True


def test_auto_false_never_overflows_but_reports_numbers() -> None:
    cfg = CompactionConfig(auto=False)
    limit = ModelLimit(context=100_000, output=32_000)
    assert check(used(99_000, 1_000), limit, cfg) == Overflow(False, 100_000, 68_000)
    cfg = build([env_layer({"OPENCODE_DISABLE_AUTOCOMPACT": "1"})]).compaction
    assert check(used(99_000, 1_000), limit, cfg).overflow is False


def test_unknown_context_never_overflows() -> None:
    limit = ModelLimit(context=0, output=0)
    assert check(used(1_000_000), limit, DEFAULT) == Overflow(False, 1_000_000, -32_000)
