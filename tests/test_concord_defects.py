"""CONCORD defects, each pinned by a test that failed before its fix.

1. finite anchors whose span overflows: an agent's fault, never a crash or a NaN;
2. ``verify --public-key`` on a ``deliberate --json`` line: the outer fields restating the
   signed packet must agree with it, and the ones it does not cover are named;
3. ``negotiate --compare``: the record is kept (printed, ``--out``) before the comparison;
   Ctrl-C and ``--deadline`` bound the comparison;
4. control characters of untrusted ids are escaped in ``negotiate`` and ``verify``;
5. ``verify`` compares types (``1`` is not ``true``, ``2.0`` is not ``2``);
6. strict inputs: problem-file numbers, decide's utilities and option ids;
7. the floor is compared with the unrounded calibrated score.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from concord_helpers import IDEAL, REJECTED
from dissensus.canonical import canonical
from dissensus.concord import verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.problem import parse_problem
from dissensus.concord.protocol import negotiate_sync
from dissensus.concord.reference import ref_bottleneck, ref_rescale
from dissensus.concord.rules import bottleneck
from dissensus.concord.scale import check_anchors, rescale
from dissensus.errors import ConfigError

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
EXAMPLES = REPO / "examples" / "concord"


class FixedAgent:
    """Answers given raw anchors, then raw scores from ``scores`` in turn (cycling)."""

    kind = "function"
    uses_model = False
    timeout: float | None = None

    def __init__(self, agent_id: str, anchors: Sequence[float], scores: Sequence[float]) -> None:
        self.id = agent_id
        self._anchors = list(anchors)
        self._scores = list(scores)
        self._next = 0

    def attempts(self) -> int:
        return 0

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> list[float]:
        if view.phase == "anchors":
            return list(self._anchors)
        out = []
        for _ in outcomes:
            out.append(self._scores[self._next % len(self._scores)])
            self._next += 1
        return out

    async def propose(self, view: NegotiationView) -> Outcome:
        return Outcome(text=f"plan of {self.id}")

    async def repair(self, view: NegotiationView) -> Outcome:
        return Outcome(text=f"repair of {self.id} in round {view.round}")


def _no_nan(doc: Any) -> bool:
    try:
        canonical(doc)  # refuses NaN and infinities
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------- 1. overflowing spans


def test_an_overflowing_anchor_span_is_a_fault_of_that_agent_not_a_crash() -> None:
    agents = [
        FixedAgent("a", [-1.7e308, 1.7e308], [1e308]),
        FixedAgent("b", [0.0, 10.0], [8.0]),
    ]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, rounds=2)
    doc = cert.model_dump(mode="json")
    assert _no_nan(doc)
    assert cert.status == "best_effort"
    assert cert.scores["a"].fault is not None and "span" in cert.scores["a"].fault
    assert cert.scores["a"].anchors.rejected is None
    assert [s.agent for s in cert.shortfall] == ["a"]
    assert verify(doc).valid


def test_an_overflowing_span_in_a_problem_file_names_the_field() -> None:
    data = {
        "floor": 0.7,
        "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
        "options": [{"id": "A", "text": "a"}],
        "agents": [{"id": "a", "kind": "table", "scores": {"R0": -1.7e308, "I0": 1.7e308, "A": 1}}],
    }
    with pytest.raises(ConfigError) as info:
        parse_problem(data)
    assert info.value.field == "agents.0.scores"


def test_scale_reference_and_bottleneck_refuse_or_rank_what_is_not_a_number() -> None:
    assert check_anchors(-1.7e308, 1.7e308) is not None
    for fn in (rescale, ref_rescale):
        with pytest.raises(ValueError):
            fn(1e308, -1.7e308, 1.7e308)
    scores = {"a": 0.5, "b": math.nan, "c": 0.2}
    assert bottleneck(scores, ["a", "b", "c"])[0] == "b"
    assert ref_bottleneck(scores, ["a", "b", "c"]) == "b"


def test_verify_names_calibration_for_a_recorded_overflowing_span() -> None:
    cert = negotiate_sync(
        [FixedAgent("a", [0.0, 10.0], [8.0])], rejected=REJECTED, ideal=IDEAL, floor=0.7
    )
    doc = cert.model_dump(mode="json")
    doc["scores"]["a"]["anchors"] = {"rejected": -1.7e308, "ideal": 1.7e308}
    verdict = verify(doc)
    assert not verdict.valid and verdict.violated == "calibration"


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(finite, finite, st.lists(finite, min_size=1, max_size=4)), min_size=1, max_size=3
    ),
    st.sampled_from([0.0, 0.5, 0.7, 1.0]),
    st.integers(0, 3),
)
def test_any_finite_anchors_and_scores_never_raise_nor_record_nan(
    specs: list[tuple[float, float, list[float]]], floor: float, rounds: int
) -> None:
    agents = [FixedAgent(f"a{i}", [r, i_], s) for i, (r, i_, s) in enumerate(specs)]
    try:
        cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=floor, rounds=rounds)
    except ConfigError as exc:  # equal anchors, as documented; nothing else
        assert any(r == i_ for r, i_, _ in specs), exc
        return
    doc = cert.model_dump(mode="json")
    assert _no_nan(doc)
    verdict = verify(doc)
    assert verdict.valid, verdict
    if cert.status == "certified":
        for agent, (rej, ideal, _) in zip(cert.covered, specs, strict=True):
            raw = cert.scores[agent].raw
            assert raw is not None  # a fault never clears the floor, even a floor of 0
            assert (raw - rej) / (ideal - rej) >= floor


# ---------------------------------------------------------------- 7. the floor, unrounded


def _table_problem(raw: float, floor: float) -> dict[str, Any]:
    return {
        "floor": floor,
        "rounds": 0,
        "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
        "options": [{"id": "A", "text": "plan A"}],
        "agents": [{"id": "a", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": raw}}],
    }


def test_rounding_never_lifts_a_score_onto_the_floor(tmp_path: Path) -> None:
    problem = tmp_path / "p.yaml"
    problem.write_text(json.dumps(_table_problem(6.9999999999996, 0.7)), encoding="utf-8")
    out = tmp_path / "cert.json"
    res = cli("negotiate", problem, "--json", "--out", out)
    assert res.code == 0, res.err
    doc = json.loads(out.read_text())
    assert doc["scores"]["a"]["calibrated"] == 0.7  # what the record shows, rounded
    assert doc["status"] == "best_effort"
    assert [s["agent"] for s in doc["shortfall"]] == ["a"]
    assert 0 < doc["shortfall"][0]["gap"] < 1e-12
    assert verify(doc).valid
    # a forged "certified" (resealed or not) does not verify
    forged = dict(doc, status="certified", shortfall=[])
    assert verify(forged).violated == "status"
    human = cli("negotiate", problem, env={"COLUMNS": "200"})
    assert "below floor" in human.out and "Shortfall: a 0.69999999999996 (gap 4e-14)" in human.out


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([0.3, 0.5, 0.7, 0.9]),
    st.lists(st.integers(-6, 6), min_size=1, max_size=3),
    st.sampled_from([(0.0, 10.0), (100.0, 0.0), (-3.0, 7.0)]),
)
def test_certified_means_every_unrounded_score_clears_the_floor(
    floor: float, ulps: list[int], scale: tuple[float, float]
) -> None:
    """Scores a few ulps around the floor: certification follows the unrounded value."""
    rej, ideal = scale
    agents = []
    for k, step in enumerate(ulps):
        at = rej + floor * (ideal - rej)
        raw = at
        for _ in range(abs(step) * 100):
            raw = math.nextafter(raw, math.inf if step > 0 else -math.inf)
        lo, hi = min(rej, ideal), max(rej, ideal)
        agents.append(FixedAgent(f"a{k}", [rej, ideal], [min(hi, max(lo, raw))]))
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=floor, rounds=0)
    exact = {
        a: (cert.scores[a].raw - rej) / (ideal - rej)  # type: ignore[operator]
        for a in cert.covered
    }
    assert (cert.status == "certified") == all(v >= floor for v in exact.values())
    assert {s.agent for s in cert.shortfall} == {a for a, v in exact.items() if v < floor}
    assert all(s.gap > 0 for s in cert.shortfall)
    assert verify(cert.model_dump(mode="json")).valid


# ---------------------------------------------------------------- 5. type-aware verify


@pytest.fixture(scope="module")
def incident() -> dict[str, Any]:
    from dissensus.agents.assembly import build_agents
    from dissensus.concord import load_problem, negotiation_for

    problem = load_problem(EXAMPLES / "incident.yaml")
    agents = build_agents(problem, base_dir=EXAMPLES)
    doc: dict[str, Any] = negotiation_for(problem, agents).run_sync().model_dump(mode="json")
    return doc


@pytest.mark.parametrize(
    "edit",
    [
        lambda d: d["trajectory"][1].__setitem__("accepted", 1),
        lambda d: d["trajectory"][1].__setitem__("round", 2.0),
        lambda d: d["candidates"][0]["scores"]["telemetry"].__setitem__(
            "raw", int(d["candidates"][0]["scores"]["telemetry"]["raw"])
        ),
        lambda d: d["spent"].__setitem__("within_bound", 1),
        lambda d: d["scores"]["telemetry"]["anchors"].__setitem__(
            "ideal", int(d["scores"]["telemetry"]["anchors"]["ideal"])
        ),
    ],
    ids=["bool_as_int", "int_as_float", "float_as_int", "within_bound_1", "anchor_as_int"],
)
def test_an_edit_python_equality_hides_is_rejected(incident: dict[str, Any], edit: Any) -> None:
    assert verify(incident).valid
    doc = json.loads(json.dumps(incident))
    assert float(doc["candidates"][0]["scores"]["telemetry"]["raw"]).is_integer()
    assert float(doc["scores"]["telemetry"]["anchors"]["ideal"]).is_integer()
    edit(doc)
    assert doc == incident and canonical(doc) != canonical(incident)  # equal, yet not the same
    verdict = verify(doc)
    assert not verdict.valid and verdict.violated == "digest", verdict


# ---------------------------------------------------------------- 6. strict inputs


@pytest.mark.parametrize(
    ("field", "value"),
    [("floor", True), ("floor", "0.7"), ("margin", False), ("rounds", 2.0), ("rounds", True)],
)
def test_problem_file_numbers_are_strict(field: str, value: object) -> None:
    data = _table_problem(7.0, 0.7)
    data[field] = value
    with pytest.raises(ConfigError) as info:
        parse_problem(data)
    assert info.value.field == field


@pytest.mark.parametrize("value", [True, "7"])
def test_table_scores_are_strict(value: object) -> None:
    data = _table_problem(7.0, 0.7)
    data["agents"][0]["scores"]["A"] = value
    with pytest.raises(ConfigError) as info:
        parse_problem(data)
    assert info.value.field == "agents.0.scores.A"


def _panel(options: Any, utilities: dict[str, dict[str, Any]]) -> Any:
    from dissensus.types import Panel

    return Panel.model_validate(
        {
            "id": "p",
            "meta": {"options": options, "utilities": utilities},
            "outputs": [
                {"agent": a, "decision": next(iter(u)), "reasoning": "r"}
                for a, u in utilities.items()
            ],
        }
    )


def test_a_string_utility_is_refused_naming_the_field() -> None:
    from dissensus.cases import CaseSpec
    from dissensus.pipeline.negotiate import concord_refusal

    panel = _panel({"x": "X", "y": "Y"}, {"a": {"x": "0.9", "y": 0.5}, "b": {"x": 0.8, "y": 0.9}})
    assert CaseSpec.from_meta(panel.meta).utilities is None
    why = concord_refusal(panel)
    assert why is not None and "meta.utilities.a.x" in why


def test_a_repeated_option_id_is_refused_naming_the_field() -> None:
    from dissensus.pipeline.negotiate import concord_refusal

    options = [{"id": "x", "text": "X"}, {"id": "x", "text": "X2"}, {"id": "y"}]
    panel = _panel(options, {"a": {"x": 0.9, "y": 0.5}, "b": {"x": 0.8, "y": 0.9}})
    why = concord_refusal(panel)
    assert why is not None and "meta.options.1.id" in why


@pytest.mark.parametrize("anchor", ["__rejected__", "__ideal__"])
def test_an_option_named_like_an_anchor_is_decided_by_its_own_id(anchor: str) -> None:
    from dissensus.pipeline.negotiate import concord_refusal, run_concord
    from dissensus.pipeline.policy import ConcordSettings

    panel = _panel(
        {anchor: "the option", "y": "Y"},
        {"a": {anchor: 0.95, "y": 0.5}, "b": {anchor: 0.9, "y": 0.6}},
    )
    assert concord_refusal(panel) is None
    step = asyncio.run(run_concord(panel, ConcordSettings(enabled=True, floor=0.7)))
    assert step.status == "certified"
    assert step.decision == anchor  # one of the panel's options, not a renamed C1
    assert verify(step.certificate.model_dump(mode="json")).valid


# ---------------------------------------------------------------- 4. control characters


def test_untrusted_ids_are_escaped_in_human_output(tmp_path: Path) -> None:
    bad = "\x1b[31mred\u202e"
    problem = {
        "floor": 0.9,
        "rounds": 1,
        "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
        "options": [{"id": "A", "text": "plan A"}, {"id": "B", "text": "plan B"}],
        "agents": [
            {"id": "ok", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 5, "B": 9}},
            {"id": bad, "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 2, "B": 3}},
            {"id": "far\x07", "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 2, "B": 3}},
        ],
        "topology": {"edges": [["ok", bad]]},
    }
    path = tmp_path / "p.yaml"
    path.write_text(json.dumps(problem), encoding="utf-8")
    out = tmp_path / "cert.json"
    res = cli("negotiate", path, "--out", out, env={"COLUMNS": "200"})
    assert res.code == 0, res.err
    assert "\x1b" not in res.out and "\u202e" not in res.out and "\x07" not in res.out
    assert "Shortfall: " in res.out and "\\x1b[31mred\\u202e" in res.out
    assert "Unknown (not connected by the graph): far\\x07" in res.out
    doc = json.loads(out.read_text())
    doc["candidates"][0]["worst_off"] = 0.99  # any violation whose message names an id
    doc["candidates"][0]["id"] = "C\x1b[2J"
    bad_file = tmp_path / "bad.json"
    bad_file.write_text(json.dumps(doc), encoding="utf-8")
    res = cli("verify", bad_file)
    assert res.code == 1
    assert "\x1b" not in res.out and "\\x1b[2J" in res.out


# ---------------------------------------------------------------- 2. deliberate lines


@pytest.fixture(scope="module")
def signed_line(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    from dissensus.signing import SIGNING_KEY_ENV, Signer

    key = Signer.generate()
    folder = tmp_path_factory.mktemp("signed")
    pub = folder / "pub.pem"
    pub.write_text(key.public_key.pem(), encoding="utf-8")
    task = str(REPO / "examples" / "dci" / "hidden_profile.yaml")
    res = cli("deliberate", task, "--json", env={SIGNING_KEY_ENV: key.private_pem()})
    assert res.code == 0, res.err
    return json.loads(res.out.strip()), pub


def _verify_line(tmp_path: Path, line: dict[str, Any], pub: Path, *flags: str) -> Any:
    path = tmp_path / "line.json"
    path.write_text(json.dumps(line), encoding="utf-8")
    return cli("verify", path, "--public-key", pub, *flags)


def test_a_signed_line_says_which_fields_the_signature_does_not_cover(
    tmp_path: Path, signed_line: tuple[dict[str, Any], Path]
) -> None:
    line, pub = signed_line
    res = _verify_line(tmp_path, line, pub)
    assert res.code == 0, res.out
    assert "signature signed" in res.out and "not covered by the signature: " in res.out
    assert "model" in res.out and "usage.cost" in res.out
    res = _verify_line(tmp_path, line, pub, "--json")
    doc = json.loads(res.out)
    assert doc["signature"] == "signed" and "usage.cost" in doc["unsigned_fields"]
    assert "answer" not in doc["unsigned_fields"]


@pytest.mark.parametrize(
    ("field", "edit"),
    [
        ("answer", lambda d: d.__setitem__("answer", "FORGED ANSWER")),
        ("selected_option", lambda d: d.__setitem__("selected_option", "managed")),
        ("status", lambda d: d.__setitem__("status", "budget_exhausted")),
        ("usage.calls", lambda d: d["usage"].__setitem__("calls", 1)),
        ("task_id", lambda d: d.__setitem__("task_id", "other")),
        ("extras.path", lambda d: d["extras"].__setitem__("path", "fallback")),
    ],
)
def test_a_forged_outer_field_of_a_signed_line_is_not_signed(
    tmp_path: Path, signed_line: tuple[dict[str, Any], Path], field: str, edit: Any
) -> None:
    line, pub = signed_line
    forged = json.loads(json.dumps(line))
    edit(forged)
    res = _verify_line(tmp_path, forged, pub)
    assert res.code == 1
    assert "signature invalid" in res.out and field in res.out, res.out
    res = _verify_line(tmp_path, forged, pub, "--json")
    doc = json.loads(res.out)
    assert doc["signature"] == "invalid" and doc["differs"] == field


# ---------------------------------------------------------------- 3. --compare, interrupted


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(REPO / "src"), str(TESTS), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "200", **extra}


@pytest.fixture
def hanging_server() -> Any:
    from dissensus.llm.fakeserver import FakeServer, ServerSettings

    server = FakeServer(settings=ServerSettings(latency_s=120)).start()
    try:
        yield server
    finally:
        server.stop()


def _compare_cmd(out: Path, *extra: str) -> list[str]:
    problem = EXAMPLES / "region-table.yaml"
    return [
        sys.executable,
        "-m",
        "dissensus",
        "negotiate",
        str(problem),
        "--compare",
        "--model",
        "openai:fake-model",
        "--out",
        str(out),
        *extra,
    ]


@pytest.mark.parametrize("as_json", [False, True])
def test_ctrl_c_during_compare_keeps_the_certificate(
    tmp_path: Path, hanging_server: Any, as_json: bool
) -> None:
    out = tmp_path / "cert.json"
    env = _env(OPENAI_BASE_URL=hanging_server.base_url, OPENAI_API_KEY="test")
    cmd = _compare_cmd(out, *(["--json"] if as_json else []))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        limit = time.monotonic() + 60
        while hanging_server.requests_received == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < limit
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.strip()] == [
        "interrupted: the comparison was not run to its end; the certificate stands"
    ]
    cert = json.loads(out.read_text())
    assert verify(cert).valid
    if as_json:
        doc = json.loads(stdout)
        assert doc["certificate"] == cert and doc["comparison"] is None
    else:
        assert stdout.startswith("CONCORD ") and cert["digest"] in stdout


def test_the_deadline_bounds_the_comparison_too(tmp_path: Path, hanging_server: Any) -> None:
    out = tmp_path / "cert.json"
    env = _env(OPENAI_BASE_URL=hanging_server.base_url, OPENAI_API_KEY="test")
    started = time.monotonic()
    res = subprocess.run(
        _compare_cmd(out, "--deadline", "3", "--json"),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert res.returncode == 0, res.stderr
    assert "deadline" in res.stderr and "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    assert doc["comparison"] is None and verify(doc["certificate"]).valid
    assert json.loads(out.read_text()) == doc["certificate"]


def test_a_problem_error_names_a_huge_key_in_bounded_length() -> None:
    """An unknown key of 100,000 characters is named cut to 64 (it was echoed whole, twice,
    in the error ``POST /v1/negotiate`` answered: 200 KB)."""
    from pathlib import Path

    import yaml

    from dissensus.concord.problem import parse_problem
    from dissensus.errors import ConfigError, field_path

    root = Path(__file__).resolve().parents[1]
    data = yaml.safe_load((root / "examples" / "concord" / "incident.yaml").read_text())
    data["k" * 100_000] = 1
    try:
        parse_problem(data)
    except ConfigError as exc:
        said = str(exc)
    else:
        raise AssertionError("an unknown key was accepted")
    assert len(said) < 1_000 and "k" * 63 + "\u2026" in said
    assert field_path("agents", 0, "id") == "agents.0.id"
