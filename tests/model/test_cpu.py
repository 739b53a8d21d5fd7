"""``charged``: decided when a function is defined, so a daemon without ``--cpu-split`` pays
nothing for it; a split started after such a function exists would miss it, and refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.model import cpu


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> cpu.CpuSplit:
    fresh = cpu.CpuSplit()
    monkeypatch.setattr(cpu, "SPLIT", fresh)
    return fresh


def test_off_a_charged_function_is_itself(split: cpu.CpuSplit) -> None:
    def work() -> int:
        return 7

    assert cpu.charged("ingest")(work) is work
    assert split.bare == [work.__qualname__]


def test_a_split_started_after_an_uncharged_function_refuses(
    split: cpu.CpuSplit, tmp_path: Path
) -> None:
    cpu.charged("reads")(lambda: None)
    with pytest.raises(RuntimeError, match=r"after .* was defined uncharged"):
        split.start(tmp_path / "cpu.jsonl")
    assert not split.on


def test_on_a_charged_function_charges_its_kind(split: cpu.CpuSplit, tmp_path: Path) -> None:
    split.start(tmp_path / "cpu.jsonl")

    def spin() -> int:
        return sum(i * i for i in range(200_000))

    charged = cpu.charged("encode")(spin)
    assert charged is not spin and charged.__name__ == "spin"
    assert charged() == spin()
    totals = split.totals()
    assert totals["encode"] > 0 and totals["ingest"] == totals["reads"] == 0
