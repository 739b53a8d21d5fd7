"""The overhead rules (issue 31, 3c): one sample a finished step, the median of the recent."""

from __future__ import annotations

from sidecar.engine import overhead
from sidecar.model.tokens import CacheTokens, Tokens


def used(input: int, cache_read: int = 0, output: int = 500) -> Tokens:
    return Tokens(input=input, output=output, cache=CacheTokens(read=cache_read))


def test_a_sample_is_reported_input_and_cache_read_less_the_window_served() -> None:
    assert overhead.sample(used(8_000, 4_000), served=2_700) == 9_300
    assert overhead.sample(used(0), served=2_700) is None  # no usage reported


def test_the_learned_value_is_the_median_never_below_zero() -> None:
    assert overhead.learned([]) is None
    assert overhead.learned([9_000, 30_000, 9_200]) == 9_200
    assert overhead.learned([9_000, 9_200]) == 9_000  # the lower middle
    assert overhead.learned([-50, -20, 10]) == 0


def test_each_step_counts_once_against_the_window_served_for_it() -> None:
    o = overhead.Overheads()
    o.finished("s", "m0", used(5_000))  # no window served yet: nothing learned
    assert o.learned("s") is None
    o.served("s", 1_000)
    o.finished("s", "m1", used(10_000))
    o.finished("s", "m1", used(10_000))  # the same message updated again
    o.served("s", 2_000)
    o.finished("s", "m2", used(11_200))
    o.served("s", 3_000)
    o.finished("s", "m3", used(40_000))
    assert o.learned("s") == 9_200
    assert o.learned("other") is None


def test_only_the_recent_steps_count() -> None:
    o = overhead.Overheads()
    for i in range(overhead.SAMPLES):
        o.served("s", 0)
        o.finished("s", f"old{i}", used(1_000))
    for i in range(overhead.SAMPLES // 2 + 1):
        o.served("s", 0)
        o.finished("s", f"new{i}", used(5_000))
    assert o.learned("s") == 5_000
