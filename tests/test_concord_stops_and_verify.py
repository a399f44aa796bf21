"""``negotiate`` / ``verify`` / ``deliberate`` defects, each pinned by a test that failed
before its fix.

1. a run stopped while the anchors are scored writes a certificate ``verify`` accepts;
2. ``negotiate`` exits 1 for unreachable models only from real counts, never from words;
3. a table entry missing for one outcome faults that evaluation only;
4. ``verify`` refuses a repeated agent in ``covered``;
5. ``verify`` checks the stop reason, the deadline and the agent calls against the record;
6. ``SystemExit`` / ``KeyboardInterrupt`` raised by agent code;
7. task files read numbers strictly and refuse repeated option ids;
8. ``verify`` on a decision packet without ``--public-key``;
9. a range error shows the limit and the value with enough digits to tell them apart.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from concord_helpers import IDEAL, REJECTED, HashAgent, SlowAgent
from dissensus.agents.assembly import build_agents
from dissensus.cli.common import shown_number
from dissensus.cli.concord import connection_failure
from dissensus.concord import (
    Certificate,
    FunctionAgent,
    Negotiation,
    NegotiationView,
    Outcome,
    ScoreFault,
    TableAgent,
    compute_bound,
    load_problem,
    negotiate_sync,
    negotiation_for,
    parse_problem,
    verify,
)
from dissensus.concord.record import canonical_digest
from dissensus.dci.task import parse_task
from dissensus.errors import ConfigError
from dissensus.llm.base import ModelCallError
from test_concord_protocol import agents_strategy, controls

# ---------------------------------------------------------------------- 9. range errors


def test_a_range_error_shows_the_limit_and_the_value_apart(tmp_path: Path) -> None:
    problem = tmp_path / "p.yaml"
    problem.write_text(
        "floor: 0.7\nanchors: {rejected: {id: R0, text: bad}, ideal: {id: I0, text: good}}\n"
        "agents: [{id: t, kind: table, scores: {R0: 0, I0: 10}}]\n",
        encoding="utf-8",
    )
    result = cli("negotiate", problem, "--deadline", "315576001")
    assert result.code == 2
    assert "must be at most 315,576,000 (got 315,576,001)" in result.err


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (315576000.0, "315,576,000"),
        (0.001, "0.001"),
        (0.0005, "0.0005"),
        (-1.0, "-1"),
        (1e300, "1e+300"),
        (315576000.5, "315576000.5"),
    ],
)
def test_shown_number_keeps_every_telling_digit(value: float, text: str) -> None:
    assert shown_number(value) == text


# ---------------------------------------------------------------------- 7. task files


@pytest.mark.parametrize(
    ("dci", "field"),
    [
        ({"deadline_s": True}, "dci.deadline_s"),
        ({"max_rounds": "2"}, "dci.max_rounds"),
        ({"max_rounds": True}, "dci.max_rounds"),
        ({"max_rounds": 2.0}, "dci.max_rounds"),
        ({"convergence_margin": "0.2"}, "dci.convergence_margin"),
        ({"deadline_s": float("inf")}, "dci.deadline_s"),
        ({"satisficing_level": float("nan")}, "dci.satisficing_level"),
        ({"archetypes": "yes"}, "dci.archetypes"),
        ({"reasks": 1.0}, "dci.reasks"),
    ],
)
def test_task_settings_are_read_strictly(dci: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_task({"question": "q", "dci": dci}, file="t.yaml")
    assert info.value.field == field


def test_task_numbers_that_are_numbers_still_load() -> None:
    task = parse_task({"question": "q", "dci": {"deadline_s": 2, "convergence_margin": 0}})
    assert task.dci.deadline_s == 2.0 and task.dci.convergence_margin == 0.0


@pytest.mark.parametrize(
    "options",
    [
        [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}],
        [{"id": 1, "text": "x"}, {"id": "1", "text": "y"}],
    ],
)
def test_repeated_task_option_ids_are_refused(options: list[dict[str, object]]) -> None:
    with pytest.raises(ConfigError, match="duplicate option id") as info:
        parse_task({"question": "q", "options": options}, file="t.yaml")
    assert info.value.field == "options.1.id"


def test_a_task_file_with_a_repeated_option_id_is_exit_2(tmp_path: Path) -> None:
    task = tmp_path / "dup.yaml"
    task.write_text("question: q\noptions:\n  - {id: a, text: x}\n  - {id: a, text: y}\n")
    result = cli("deliberate", task)
    assert result.code == 2
    assert "options.1.id" in result.err and "duplicate option id" in result.err


# ---------------------------------------------------------------------- shared helpers

ANCHORS = 'anchors: {rejected: {id: R0, text: "bad"}, ideal: {id: I0, text: "good"}}\n'


def _problem(tmp_path: Path, body: str, module: str = "") -> Path:
    if module:
        (tmp_path / "agent_funcs.py").write_text(module, encoding="utf-8")
    path = tmp_path / "p.yaml"
    path.write_text("floor: 0.7\n" + ANCHORS + body, encoding="utf-8")
    return path


def _valid(cert: Certificate) -> None:
    verdict = verify(cert.model_dump(mode="json"))
    assert verdict.valid, verdict


class StopAt:
    """Wraps an agent: its call number ``at`` (counted over every wrapped agent) cancels
    the run and hangs, as Ctrl-C or ``cancel()`` arriving while that call is in flight."""

    def __init__(self, inner: HashAgent, shared: dict[str, Any], at: int) -> None:
        self.inner, self.shared, self.at = inner, shared, at
        self.id, self.kind, self.uses_model, self.timeout = inner.id, "function", True, None

    def attempts(self) -> int:
        return self.inner.attempts()

    async def _tick(self) -> None:
        self.shared["calls"] += 1
        if self.shared["calls"] == self.at:
            self.shared["negotiation"].cancel()
            await asyncio.sleep(30)

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        await self._tick()
        return await self.inner.score(outcomes, view)

    async def propose(self, view: NegotiationView) -> Outcome | None:
        await self._tick()
        return await self.inner.propose(view)

    async def repair(self, view: NegotiationView) -> Outcome | None:
        await self._tick()
        return await self.inner.repair(view)


class SteppingClock:
    """A clock that moves one second every time it is read: a deadline of ``d`` seconds
    fires after about ``d`` reads, at any point of the run."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


# ---------------------------------------------------------------------- 1. stopped runs


def test_a_deadline_while_anchors_are_scored_keeps_the_answers_and_verifies(
    tmp_path: Path,
) -> None:
    fast = FunctionAgent("a", lambda o, v: {"R0": 0.0, "I0": 10.0}.get(o.id or "", 8.0))
    slow = FunctionAgent("b", lambda o, v: time.sleep(5) or 5.0, threaded=True)
    neg = Negotiation(
        [fast, slow], rejected=REJECTED, ideal=IDEAL, floor=0.7, options=[], deadline_s=0.3
    )
    cert = neg.run_sync()
    assert cert.spent.stopped == "deadline"
    assert cert.scores["a"].anchors.model_dump() == {"rejected": 0.0, "ideal": 10.0}
    assert cert.scores["a"].fault is None
    assert cert.scores["b"].anchors.rejected is None
    assert cert.scores["b"].fault == (
        "not calibrated: the run stopped (deadline) before its anchor scores arrived"
    )
    _valid(cert)


def test_a_cancel_before_the_run_writes_a_certificate_that_verifies() -> None:
    neg = Negotiation(
        [TableAgent("t", {"R0": 0, "I0": 10})], rejected=REJECTED, ideal=IDEAL, floor=0.5
    )
    neg.cancel()
    cert = neg.run_sync()
    assert cert.spent.stopped == "cancelled"
    assert cert.scores["t"].fault is not None and "stopped (cancelled)" in cert.scores["t"].fault
    _valid(cert)


def test_negotiate_deadline_zero_writes_a_certificate_verify_accepts(tmp_path: Path) -> None:
    problem = _problem(tmp_path, "agents: [{id: t, kind: table, scores: {R0: 0, I0: 10}}]\n")
    out = tmp_path / "cert.json"
    assert cli("negotiate", problem, "--deadline", "0", "--out", out).code == 0
    result = cli("verify", out)
    assert result.code == 0, result.out


@given(agents_strategy(), controls, st.integers(1, 60))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_run_cancelled_at_any_call_writes_a_certificate_that_verifies(  # type: ignore[no-untyped-def]
    agents, ctl, at
) -> None:
    shared: dict[str, Any] = {"calls": 0}
    wrapped = [StopAt(a, shared, at) for a in agents]
    neg = Negotiation(wrapped, rejected=REJECTED, ideal=IDEAL, **ctl)
    shared["negotiation"] = neg
    cert = neg.run_sync()
    if shared["calls"] >= at:
        assert cert.spent.stopped == "cancelled"
    _valid(cert)


@given(agents_strategy(), controls, st.integers(0, 80))
@settings(max_examples=60, deadline=None)
def test_a_run_stopped_by_its_deadline_at_any_point_writes_a_certificate_that_verifies(  # type: ignore[no-untyped-def]
    agents, ctl, deadline
) -> None:
    neg = Negotiation(
        agents,
        rejected=REJECTED,
        ideal=IDEAL,
        deadline_s=float(deadline),
        clock=SteppingClock(),
        **ctl,
    )
    cert = neg.run_sync()
    _valid(cert)
    for agent in cert.covered:  # every agent is calibrated or says why not
        standing = cert.scores[agent]
        assert (standing.anchors.rejected is not None) != (standing.fault is not None)


# ---------------------------------------------------------------------- 2. unreachable models


class Unreachable:
    """A model-backed agent whose every call fails to reach the server (optionally only
    the calls made after ``good`` successful ones)."""

    kind, uses_model, timeout = "llm", True, None

    def __init__(self, agent_id: str, good: int = 0) -> None:
        self.id, self.good = agent_id, good

    def attempts(self) -> int:
        return 0

    def _fail(self) -> None:
        if self.good > 0:
            self.good -= 1
            return
        raise ModelCallError("m: call failed after 1 attempt(s): refused", kind="connection")

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        self._fail()
        return [0.0, 10.0] if view.phase == "anchors" else [8.0] * len(outcomes)

    async def propose(self, view: NegotiationView) -> Outcome | None:
        self._fail()
        return Outcome(text="plan of " + self.id)

    async def repair(self, view: NegotiationView) -> Outcome | None:
        self._fail()
        return None


def test_unreachable_model_calls_are_counted_from_the_failure_kind() -> None:
    table = TableAgent("t", {"R0": 0, "I0": 10, "A": 9})
    neg = Negotiation(
        [table, Unreachable("m")],
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.7,
        options=[Outcome(id="A", text="a")],
    )
    cert = neg.run_sync()
    assert neg.model_calls == len(neg.unreachable) > 0
    assert connection_failure(cert, neg.model_calls, neg.unreachable) is not None


def test_one_unreachable_call_among_answered_ones_is_no_connection_failure() -> None:
    neg = Negotiation(
        [Unreachable("m", good=1), Unreachable("n", good=99)],
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.7,
    )
    cert = neg.run_sync()
    assert 0 < len(neg.unreachable) < neg.model_calls
    assert connection_failure(cert, neg.model_calls, neg.unreachable) is None


def test_a_function_agents_connection_error_is_no_model_call() -> None:
    def propose(view: NegotiationView) -> str:
        raise ConnectionError("inventory lookup: connection refused")

    agents = [
        FunctionAgent(
            "f", lambda o, v: {"R0": 0.0, "I0": 10.0}.get(o.id or "", 5.0), propose=propose
        )
    ]
    neg = Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=0.7)
    cert = neg.run_sync()
    assert cert.trajectory[0].faults and neg.model_calls == 0 and neg.unreachable == []
    assert connection_failure(cert, neg.model_calls, neg.unreachable) is None


@pytest.mark.parametrize(
    ("agents", "module"),
    [
        # a certified run whose function agent says "connection refused": 0 model calls
        (
            '  - {id: f1, kind: function, score: "agent_funcs:score1", repair: "agent_funcs:repair1"}\n'
            '  - {id: f2, kind: function, score: "agent_funcs:score2", propose: "agent_funcs:propose2"}\n',
            "def score1(outcome, view):\n"
            '    return {"R0": 0, "I0": 10, "A": 5}.get(outcome.id, 9)\n'
            "def repair1(view):\n    return 'plan c'\n"
            "def score2(outcome, view):\n"
            '    return {"R0": 0, "I0": 10}.get(outcome.id, 9)\n'
            "def propose2(view):\n"
            '    raise ConnectionError("inventory lookup: connection refused")\n',
        ),
        # a table agent's missing entry for an outcome named connection-pool
        (
            "  - {id: t, kind: table, scores: {R0: 0, I0: 10, A: 9}}\n"
            '  - {id: f, kind: function, score: "agent_funcs:score", propose: "agent_funcs:propose"}\n',
            "def score(outcome, view):\n"
            '    return {"R0": 0, "I0": 10}.get(outcome.id, 9)\n'
            "def propose(view):\n"
            '    return {"id": "connection-pool", "text": "grow the connection pool"}\n',
        ),
        # a function agent raising ValueError("invalid connection string")
        (
            '  - {id: f, kind: function, score: "agent_funcs:score"}\n',
            "def score(outcome, view):\n"
            '    if outcome.id in ("R0", "I0"):\n'
            '        return {"R0": 0, "I0": 10}[outcome.id]\n'
            '    raise ValueError("invalid connection string")\n',
        ),
    ],
)
def test_negotiate_exits_0_when_no_model_call_failed_to_connect(
    tmp_path: Path, agents: str, module: str
) -> None:
    problem = _problem(tmp_path, 'options: [{id: A, text: "plan a"}]\nagents:\n' + agents, module)
    result = cli("negotiate", problem)
    assert result.code == 0, result.err
    assert "connection failed" not in result.err


# ---------------------------------------------------------------------- 3. per-evaluation faults


def test_a_missing_table_entry_faults_that_evaluation_only(tmp_path: Path) -> None:
    problem = parse_problem(
        {
            "floor": 0.7,
            "anchors": {
                "rejected": {"id": "R0", "text": "bad"},
                "ideal": {"id": "I0", "text": "good"},
            },
            "options": [{"id": "A", "text": "a"}],
            "agents": [
                {"id": "t1", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 9}},
                {"id": "t2", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 9}},
                {
                    "id": "f",
                    "kind": "function",
                    "score": "agent_funcs:score",
                    "propose": "agent_funcs:propose",
                },
            ],
        }
    )
    (tmp_path / "agent_funcs.py").write_text(
        "def score(o, v):\n    return {'R0': 0.0, 'I0': 10.0}.get(o.id, 9.0)\n"
        "def propose(v):\n    return 'a brand new plan'\n"
    )
    cert = negotiation_for(problem, build_agents(problem, base_dir=tmp_path)).run_sync()
    assert cert.status == "certified" and cert.selected is not None and cert.selected.id == "A"
    a = next(c for c in cert.candidates if c.id == "A")
    new = next(c for c in cert.candidates if c.id != "A")
    assert all(a.scores[t].fault is None and a.scores[t].calibrated == 0.9 for t in ("t1", "t2"))
    assert all(
        new.scores[t].fault == f"no score in the table for outcome {new.id!r}" for t in ("t1", "t2")
    )
    assert [f.agent for f in cert.trajectory[0].faults] == ["t1", "t2"]
    _valid(cert)


def test_a_function_score_raising_on_one_outcome_faults_that_evaluation_only() -> None:
    def score(outcome: Outcome, view: NegotiationView) -> float:
        if outcome.id == "B":
            raise RuntimeError("no data for B")
        return {"R0": 0.0, "I0": 10.0}.get(outcome.id or "", 9.0)

    cert = negotiate_sync(
        [
            FunctionAgent("f", score, propose=lambda v: {"id": "B", "text": "b"}),
            TableAgent("t", {"R0": 0, "I0": 10, "A": 9, "B": 9}),
        ],
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.7,
        options=[Outcome(id="A", text="a")],
    )
    by_id = {c.id: c for c in cert.candidates}
    assert by_id["A"].scores["f"].calibrated == 0.9 and by_id["A"].scores["f"].fault is None
    assert by_id["B"].scores["f"].fault == "RuntimeError: no data for B"
    assert cert.status == "certified"
    _valid(cert)


@given(st.lists(st.booleans(), min_size=1, max_size=6))
def test_table_faults_exactly_the_outcomes_it_has_no_entry_for(known: list[bool]) -> None:
    table = TableAgent("t", {"R0": 0, "I0": 10} | {f"o{i}": 5 for i, k in enumerate(known) if k})
    outcomes = [Outcome(id=f"o{i}", text="x") for i in range(len(known))]
    view = NegotiationView(agent="t", phase="score", round=1, floor=0.5, margin=0.0, agents=["t"])
    got = asyncio.run(table.score(outcomes, view))
    assert [not isinstance(g, ScoreFault) for g in got] == known


# ---------------------------------------------------------------------- 6. exits from agent code

EXIT_MODULE = (
    "def ok(o, v):\n    return {'R0': 0.0, 'I0': 10.0}.get(o.id, 8.0)\n"
    "def sysexit(o, v):\n"
    "    if o.id in ('R0', 'I0'):\n        return {'R0': 0.0, 'I0': 10.0}[o.id]\n"
    "    raise SystemExit(3)\n"
    "def kbint(o, v):\n"
    "    if o.id in ('R0', 'I0'):\n        return {'R0': 0.0, 'I0': 10.0}[o.id]\n"
    "    raise KeyboardInterrupt()\n"
)


@pytest.mark.parametrize("threaded", [False, True])
def test_systemexit_from_agent_code_is_that_agents_fault(threaded: bool) -> None:
    def sysexit(outcome: Outcome, view: NegotiationView) -> float:
        if outcome.id in ("R0", "I0"):
            return {"R0": 0.0, "I0": 10.0}[outcome.id]
        raise SystemExit(3)

    agents = [
        FunctionAgent("a", lambda o, v: {"R0": 0.0, "I0": 10.0}.get(o.id or "", 8.0)),
        FunctionAgent("b", sysexit, threaded=threaded),
    ]
    cert = negotiate_sync(
        agents,
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.7,
        rounds=1,
        options=[Outcome(id="A", text="a")],
    )
    faults = [f.message for s in cert.trajectory for f in s.faults]
    assert "SystemExit: 3" in faults
    _valid(cert)


@pytest.mark.parametrize("threaded", [False, True])
def test_keyboardinterrupt_from_agent_code_cancels_the_run(threaded: bool) -> None:
    def kbint(outcome: Outcome, view: NegotiationView) -> float:
        if outcome.id in ("R0", "I0"):
            return {"R0": 0.0, "I0": 10.0}[outcome.id]
        raise KeyboardInterrupt

    agents = [
        FunctionAgent("a", lambda o, v: {"R0": 0.0, "I0": 10.0}.get(o.id or "", 8.0)),
        FunctionAgent("b", kbint, threaded=threaded),
    ]
    cert = negotiate_sync(
        agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, options=[Outcome(id="A", text="a")]
    )
    assert cert.spent.stopped == "cancelled"
    _valid(cert)


@pytest.mark.parametrize("deadline", [[], ["--deadline", "20"]])
@pytest.mark.parametrize(
    ("scorer", "stopped"), [("sysexit", "budget_exhausted"), ("kbint", "cancelled")]
)
def test_negotiate_writes_the_record_when_agent_code_exits(
    tmp_path: Path, scorer: str, stopped: str, deadline: list[str]
) -> None:
    problem = _problem(
        tmp_path,
        "rounds: 1\noptions: [{id: A, text: a}]\nagents:\n"
        '  - {id: a, kind: function, score: "agent_funcs:ok"}\n'
        f'  - {{id: b, kind: function, score: "agent_funcs:{scorer}"}}\n',
        EXIT_MODULE,
    )
    out = tmp_path / "cert.json"
    result = cli("negotiate", problem, "--out", out, *deadline)
    assert result.code == 0, result.err
    assert "Traceback" not in result.err + result.out
    data = json.loads(out.read_text())
    assert data["spent"]["stopped"] == stopped
    assert cli("verify", out).code == 0


# ---------------------------------------------------------------------- 4, 5. verify

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "concord"


def _incident() -> dict[str, Any]:
    problem = load_problem(EXAMPLES / "incident.yaml")
    cert = negotiation_for(problem, build_agents(problem, base_dir=EXAMPLES)).run_sync()
    return cert.model_dump(mode="json")


def _resealed(doc: dict[str, Any], edit: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    edit(doc)
    doc["digest"] = canonical_digest({k: v for k, v in doc.items() if k != "digest"})
    return doc


def _set(path: str, value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for part in parents:
            doc = doc[part]
        doc[last] = value

    return edit


def test_a_repeated_covered_agent_is_refused_even_with_the_bound_it_inflates() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["covered"].append("traffic")
        doc["bound"] = {"rounds": 6, "candidates": 11, "evaluations": 55, "model_calls": 51}
        doc["spent"]["model_calls"] = doc["spent"]["agent_calls"] = 50

    verdict = verify(_resealed(_incident(), edit))
    assert (verdict.valid, verdict.violated) == (False, "covered")


@pytest.mark.parametrize(
    ("edit", "prop"),
    [
        (_set("spent.stopped", "no_candidate"), "stop"),
        (_set("spent.stopped", "deadline"), "stop"),
        (_set("spent.stopped", "cancelled"), "stop"),
        (_set("budget.deadline_s", -1.0), "stop"),
        (_set("spent.agent_calls", 1), "bound"),
        (_set("spent.agent_calls", 21), "bound"),
    ],
)
def test_verify_checks_the_stop_reason_deadline_and_calls_against_the_record(
    edit: Any, prop: str
) -> None:
    doc = _incident()
    assert doc["spent"]["agent_calls"] == 22  # 4 anchors + 4 proposals + 4 + 2 x (1 + 4)
    verdict = verify(_resealed(doc, edit))
    assert (verdict.valid, verdict.violated) == (False, prop), verdict


def test_a_certified_run_stopped_for_its_budget_is_refused() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["budget"]["rounds"] = 2
        doc["bound"] = compute_bound(4, 2).model_dump()
        doc["spent"]["stopped"] = "budget_exhausted"

    verdict = verify(_resealed(_incident(), edit))
    assert (verdict.valid, verdict.violated) == (False, "stop")


def test_a_deadline_stop_without_a_deadline_is_refused() -> None:
    agents = [SlowAgent("a0", 1), SlowAgent("a1", 1)]
    cert = Negotiation(agents, rejected=REJECTED, ideal=IDEAL, floor=1.0, deadline_s=0.1).run_sync()
    doc = cert.model_dump(mode="json")
    assert doc["spent"]["stopped"] == "deadline" and verify(doc).valid
    verdict = verify(_resealed(doc, _set("budget.deadline_s", None)))
    assert (verdict.valid, verdict.violated) == (False, "stop")


def test_a_fault_naming_an_agent_that_is_not_covered_is_refused() -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["trajectory"][0]["faults"] = [{"agent": "ghost", "phase": "score", "message": "x"}]

    verdict = verify(_resealed(_incident(), edit))
    assert (verdict.valid, verdict.violated) == (False, "covered")


@pytest.mark.parametrize("name", ["incident.yaml", "region-table.yaml"])
def test_the_examples_certificates_still_verify(name: str) -> None:
    problem = load_problem(EXAMPLES / name)
    cert = negotiation_for(problem, build_agents(problem, base_dir=EXAMPLES)).run_sync()
    _valid(cert)


@given(agents_strategy(), controls, st.sampled_from([None, 0.0, 3.0, 12.0, 40.0]))
@settings(max_examples=80, deadline=None)
def test_every_certificate_a_run_writes_passes_the_new_checks(agents, ctl, deadline) -> None:  # type: ignore[no-untyped-def]
    neg = Negotiation(
        agents, rejected=REJECTED, ideal=IDEAL, deadline_s=deadline, clock=SteppingClock(), **ctl
    )
    cert = neg.run_sync()
    _valid(cert)
    assert (cert.spent.stopped == "floor_cleared") == (cert.status == "certified")


# ---------------------------------------------------------------------- 8. packets


@pytest.mark.parametrize("as_json", [False, True])
def test_verify_calls_a_packet_without_a_key_invalid_schema(tmp_path: Path, as_json: bool) -> None:
    packet = tmp_path / "packet.json"
    packet.write_text(
        json.dumps({"task_id": "t", "residual_objections": [], "minority_report": []})
    )
    result = cli("verify", packet, *(["--json"] if as_json else []))
    assert result.code == 1, result.err
    if as_json:
        verdict = json.loads(result.out)
        assert (verdict["valid"], verdict["violated"]) == (False, "schema")
    else:
        assert result.out.startswith("invalid: schema: a decision packet, not a certificate")
        assert "--public-key" in result.out


def _region() -> dict[str, Any]:
    problem = load_problem(EXAMPLES / "region-table.yaml")
    cert = negotiation_for(problem, build_agents(problem, base_dir=EXAMPLES)).run_sync()
    return cert.model_dump(mode="json")


_REGION: dict[str, dict[str, Any]] = {}
"""The region-table certificate, negotiated once for the property test."""


def _shown_scores(message: str | None) -> tuple[str, str]:
    """The two numbers of a ``scores`` violation: the standing's and the candidate's."""
    assert message is not None
    found = re.search(r"score (\S+) differs from the selected candidate's (\S+)$", message)
    assert found is not None, message
    return found.group(1), found.group(2)


def test_a_standing_differing_from_the_selected_candidate_names_what_differs() -> None:
    """A standing whose raw score differs from the selected candidate's read ``standing
    0.7 differs from the selected candidate's 0.7`` (the calibrated scores, equal): the
    message names the score that differs and shows both values."""
    region = _region()
    verdict = verify(_resealed(region, _set("scores.security.raw", 9)))
    assert (verdict.valid, verdict.violated) == (False, "scores"), verdict
    assert (verdict.message or "").endswith(
        "agent security: standing raw score 9.0 differs from the selected candidate's 7.0"
    ), verdict.message


@given(
    st.sampled_from(["raw", "calibrated"]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_two_scores_a_scores_violation_shows_never_read_the_same(
    part: str, value: float
) -> None:
    region = _REGION.setdefault("doc", _region())
    kept = region["scores"]["security"][part]
    verdict = verify(_resealed(region, _set(f"scores.security.{part}", value)))
    if value == kept:
        return
    assert verdict.violated == "scores", verdict
    mine, theirs = _shown_scores(verdict.message)
    assert mine != theirs and float(mine) == value and float(theirs) == kept, verdict.message
