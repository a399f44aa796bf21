"""``--compare`` reads the floor as CONCORD does: unrounded scores, faults never clear it.

The comparison judged every pick on the certificate's 12-decimal calibrated scores, so
a raw 6.9999999999996 of 10 (recorded as 0.7) "cleared" a floor of 0.7, and a faulted
score (recorded as 0) "cleared" a floor of 0: the CONCORD row itself read "clears the
floor for all 2" beside its own note ``best_effort`` and a certificate whose shortfall
named the agent, and unanimity committed a proposal the certificate shows below the
floor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from hypothesis import given, seed, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.baselines.compare import compare_rules, compare_with
from dissensus.baselines.decision_rules import RuleResult, judge
from dissensus.concord import Outcome, TableAgent, verify
from dissensus.concord.protocol import negotiate_sync
from dissensus.concord.record import Certificate

R0 = Outcome(id="R0", text="leave it broken")
I0 = Outcome(id="I0", text="fixed at no cost")
A = Outcome(id="A", text="fail over")
B = Outcome(id="B", text="restore")


def _cert(
    tables: dict[str, dict[str, float]], floor: float, options: Sequence[Outcome] = (A,)
) -> tuple[Certificate, list[TableAgent]]:
    agents = [TableAgent(name, {"R0": 0, "I0": 10, **row}) for name, row in tables.items()]
    cert = negotiate_sync(
        agents, rejected=R0, ideal=I0, floor=floor, rounds=0, options=list(options)
    )
    assert verify(cert.model_dump(mode="json")).valid
    return cert, agents


def _rows(cert: Certificate) -> dict[str, RuleResult]:
    return {row.strategy: row for row in compare_rules(cert)}


def test_a_score_recorded_as_the_floor_but_below_it_fails_in_every_row() -> None:
    cert, _ = _cert({"t1": {"A": 8}, "t2": {"A": 6.9999999999996}}, floor=0.7)
    assert cert.status == "best_effort"
    assert [s.agent for s in cert.shortfall] == ["t2"]
    rows = _rows(cert)
    for name in ("CONCORD", "Owner decides", "Best average", "Majority vote"):
        assert rows[name].below_floor == ["t2"], rows[name]
        assert rows[name].result == "fails for 1"
    assert rows["Unanimity required"].selected is None


def test_a_faulted_score_never_clears_a_floor_of_zero() -> None:
    cert, _ = _cert({"t1": {"A": 8}, "t2": {}}, floor=0.0)  # t2 cannot score A: a fault
    assert cert.status == "best_effort"
    rows = _rows(cert)
    assert rows["CONCORD"].below_floor == ["t2"]
    assert rows["Unanimity required"].selected is None


class _Arbiter:
    async def pick(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: object,
        agents: Sequence[str],
        floor: float,
        problem: str,
    ) -> RuleResult:
        return judge("LLM picks a plan", "A", {a: 0.7 for a in agents}, agents, floor)

    async def write(
        self,
        plans: Sequence[tuple[str, str]],
        matrix: object,
        agents: Sequence[str],
        floor: float,
        problem: str,
    ) -> str:
        return "a plan nobody tabled"


def test_the_arbiter_rows_read_the_floor_alike() -> None:
    cert, agents = _cert({"t1": {"A": 8}, "t2": {"A": 6.9999999999996}}, floor=0.7)
    # t1 scores the written plan 9; t2 cannot score it (no entry): a fault
    by_id = {a.id: a for a in agents}
    by_id["t1"].table["written"] = 9
    rows = {r.strategy: r for r in asyncio.run(compare_with(cert, by_id, arbiter=_Arbiter()))}
    assert rows["LLM picks a plan"].below_floor == ["t2"]
    assert rows["LLM writes a plan"].below_floor == ["t2"]

    cert0, agents0 = _cert({"t1": {"A": 8}, "t2": {"A": 5}}, floor=0.0)
    by_id0 = {a.id: a for a in agents0}
    by_id0["t1"].table["written"] = 9
    rows0 = {r.strategy: r for r in asyncio.run(compare_with(cert0, by_id0, arbiter=_Arbiter()))}
    assert rows0["LLM writes a plan"].below_floor == ["t2"]  # a fault, at a floor of 0


SCORES = st.sampled_from([0.0, 3.0, 6.9999999999996, 7.0, 7.0000000000004, 10.0, None])


@seed(20261205)
@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.tuples(SCORES, SCORES), min_size=1, max_size=4),
    st.sampled_from([0.0, 0.7, 1.0]),
)
def test_the_concord_row_agrees_with_the_certificate(
    rows: list[tuple[float | None, float | None]], floor: float
) -> None:
    tables = {
        f"t{i}": {k: v for k, v in (("A", a), ("B", b)) if v is not None}
        for i, (a, b) in enumerate(rows)
    }
    cert, _ = _cert(tables, floor, options=(A, B))
    got = _rows(cert)
    concord = got["CONCORD"]
    if cert.selected is not None:
        assert concord.below_floor == [s.agent for s in cert.shortfall]
        assert (concord.result.startswith("clears")) == (cert.status == "certified")
    unanimous = got["Unanimity required"]
    if unanimous.selected is not None:
        assert unanimous.below_floor == []


def test_a_failing_row_never_shows_its_worst_off_at_the_floor(tmp_path: Path) -> None:
    """The table showed ``0.70 | fails for 1`` for a score the record rounded onto a floor
    of 0.7: the row's worst-off now reads below the floor, as the shortfall does."""
    problem = tmp_path / "p.yaml"
    problem.write_text(
        "floor: 0.7\nrounds: 0\n"
        'anchors:\n  rejected: {id: R0, text: "no"}\n  ideal: {id: I0, text: "yes"}\n'
        'options:\n  - {id: A, text: "a"}\n'
        "agents:\n"
        "  - {id: t1, kind: table, scores: {R0: 0, I0: 10, A: 8}}\n"
        "  - {id: t2, kind: table, scores: {R0: 0, I0: 10, A: 6.9999999999996}}\n",
        encoding="utf-8",
    )
    done = cli("negotiate", problem, "--compare")
    failing = [line for line in done.out.splitlines() if "fails for 1" in line]
    assert len(failing) == 4, done.out
    for line in failing:
        assert "0.69999999999996" in line and "0.70 " not in line, line


class _Unreadable(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no message")


class _Failing(TableAgent):
    """Scores the anchors as its table says; raises ``error`` on anything else."""

    def __init__(self, name: str, table: dict[str, float], error: BaseException) -> None:
        super().__init__(name, table)
        self.error = error

    async def score(self, outcomes, view):  # type: ignore[no-untyped-def]
        if any(o.id == "written" for o in outcomes):
            raise self.error
        return await super().score(outcomes, view)


@seed(20261205)
@settings(max_examples=25, deadline=None)
@given(st.text(min_size=0, max_size=3000))
def test_a_scoring_fault_is_one_bounded_line_whatever_the_agent_raised(said: str) -> None:
    """An exception's text (a whole page, line breaks, or a ``__str__`` that raises) is
    kept as one line of at most 500 characters in the row's fault, as the protocol's."""
    from dissensus.baselines.compare import score_outcome
    from dissensus.concord.record import Fault

    cert, _ = _cert({"t1": {"A": 8}, "t2": {"A": 9}}, floor=0.0)
    agents = {
        "t1": _Failing("t1", {"R0": 0, "I0": 10, "A": 8}, RuntimeError(said + "\n" * 3 + said)),
        "t2": _Failing("t2", {"R0": 0, "I0": 10, "A": 9}, _Unreadable()),
    }
    faults: list[Fault] = []
    scores = asyncio.run(score_outcome(agents, cert, "a written plan", faults))
    assert scores == {"t1": 0.0, "t2": 0.0}
    assert [f.agent for f in faults] == ["t1", "t2"]
    for fault in faults:
        assert len(fault.message) <= 500
        assert "\n" not in fault.message
    assert faults[0].message.startswith("RuntimeError")
    assert faults[1].message.startswith("_Unreadable")
