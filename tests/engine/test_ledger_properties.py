"""Properties: the analyser never fails on any text; a ledger survives the summary text
unchanged; a bounded ledger fits its budget and accounts for every entry it dropped."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from sidecar.engine import ledger
from sidecar.engine.ledger import Failure, Ledger, SuiteRun
from sidecar.toolcalls import shell

SETTINGS = settings(max_examples=60, deadline=None)

SHELLISH = st.lists(
    st.sampled_from([*"ab/._- '\"\\$`()<>|&;#\n\t=*?{}", "<<EOF\n", "\nEOF\n", "cd ", "sed -i "]),
    max_size=60,
).map("".join)
ONE_LINE = (
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")),
        min_size=1,
        max_size=60,
    )
    .map(lambda s: " ".join(s.replace("⇒", "=>").split()))
    .filter(bool)
)
STATUS = st.sampled_from(["exit 1", "exit 2", "exit -9", "error"])


@st.composite
def ledgers(draw: st.DrawFn) -> Ledger:
    return Ledger(
        modified=draw(st.lists(ONE_LINE, max_size=12, unique=True)),
        read=draw(st.lists(ONE_LINE, max_size=12, unique=True)),
        failed=draw(
            st.lists(
                st.builds(Failure, command=ONE_LINE, status=STATUS, error=ONE_LINE | st.just("")),
                max_size=8,
            )
        ),
        errors=draw(st.lists(ONE_LINE, max_size=12, unique=True)),
        tests=draw(
            st.lists(
                st.builds(SuiteRun, command=ONE_LINE, status=st.sampled_from(["passed", "ran"])),
                max_size=5,
            )
        ),
        first_request=draw(ONE_LINE | st.just("")),
        latest_request=draw(ONE_LINE | st.just("")),
        dropped=draw(
            st.dictionaries(
                st.sampled_from(["modified", "read", "failed", "errors", "tests"]),
                st.integers(1, 10_000),
            )
        ),
    )


@SETTINGS
@given(SHELLISH)
def test_the_analyser_never_fails(command: str) -> None:
    fx = shell.analyse(command)
    assert all(isinstance(p, str) and p for p in fx.written + fx.read)


@SETTINGS
@given(ledgers(), ONE_LINE)
@example(Ledger(dropped={"modified": 3}), "only counts are left")  # once rendered as nothing
def test_a_ledger_survives_the_summary_text(led: Ledger, prose: str) -> None:
    block = ledger.render(led)
    if led.empty() and not led.dropped:
        assert block == ""
        return
    text = f"{prose}\n\n{block}"
    assert ledger.parse(text) == led
    assert ledger.drop_block(text) == prose.rstrip()


@SETTINGS
@given(ledgers(), st.integers(200, 3_000))
def test_a_bounded_ledger_fits_and_counts_what_it_dropped(led: Ledger, budget: int) -> None:
    out = ledger.bound(led, budget)
    assert ledger.tokens(ledger.render(out)) <= budget
    for kind in ("modified", "read", "failed", "errors", "tests"):
        before = len(getattr(led, kind)) + led.dropped.get(kind, 0)
        after = len(getattr(out, kind)) + out.dropped.get(kind, 0)
        assert before == after, kind
        kept = getattr(out, kind)
        if kind != "errors":  # errors may leave out of order (quoted ones first)
            assert kept == getattr(led, kind)[len(getattr(led, kind)) - len(kept) :]
