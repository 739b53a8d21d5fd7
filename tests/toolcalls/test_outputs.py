"""Test outcomes are read from a runner's output by one set of patterns
(``outputs.test_outcome``), which the ledger and the extractive writer both use."""

from __future__ import annotations

import pytest

from sidecar.engine import ledger
from sidecar.engine.ledger import Ledger, SuiteRun
from sidecar.toolcalls import outputs
from tests.summarizers.helpers import assistant, bash, offline_summary, user


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("3 passed in 0.2s", "passed"),
        ("===== 0 failed, 12 passed in 1.0s =====", "passed"),  # no failure in "0 failed"
        ("Ran 3 tests in 0.001s\n\nOK", "passed"),  # unittest
        ("ok  \tgithub.com/x/y\t0.1s", "passed"),  # go test
        ("All tests passed!", "passed"),
        ("FAILED tests/test_x.py::test_a - assert 1 == 2\n1 failed, 3 passed", "failed"),
        ("Ran 3 tests\n\nFAILED (failures=1)", "failed"),
        ("--- FAIL: TestX (0.00s)\nFAIL\tgithub.com/x/y\t0.1s", "failed"),
        ("Tests:       1 failed, 3 passed, 4 total", "failed"),  # jest
        ("test result: FAILED. 2 passed; 1 failed", "failed"),  # cargo
        ("collected 0 items", "ran"),
        ("looks ok to me; no Error here", "ran"),  # a word in prose is no outcome
    ],
)
def test_one_set_of_patterns_reads_a_test_run(output: str, expected: str) -> None:
    assert outputs.test_outcome(output) == expected


def _run(output: str) -> list:  # type: ignore[type-arg]
    return [user("Run the tests."), assistant(bash("pytest -q", output))]


def test_the_ledger_reads_zero_failed_as_passed() -> None:
    """The ledger's own patterns read "0 failed" as a failure; the shared set does not."""
    led = ledger.update(Ledger(), _run("===== 0 failed, 12 passed in 1.0s ====="))
    assert led.tests == [SuiteRun(command="pytest -q", status="passed")]


@pytest.mark.parametrize(
    "output",
    ["===== 0 failed, 12 passed in 1.0s =====", "Ran 3 tests\n\nOK", "collected 0 items"],
)
def test_the_ledger_and_the_summary_agree(output: str) -> None:
    """Without an exit status both say what the shared patterns say: the ledger's test
    status, and the summary's "passed" that answers an earlier failing test file."""
    expected = outputs.test_outcome(output)
    failing = "FAILED tests/test_a.py::test_x - assert 1 == 2\n1 failed in 0.1s"
    history = [
        user("Fix test_a."),
        assistant(
            bash("pytest tests/test_a.py", failing, exit=1),
            bash("pytest", output),
        ),
    ]
    led = ledger.update(Ledger(), history)
    assert led.tests[-1] == SuiteRun(command="pytest", status=expected)
    assert ("`pytest` → passed" in offline_summary(history)) == (expected == "passed")
