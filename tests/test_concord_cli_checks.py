"""``negotiate`` and ``verify``: what the commands refuse, and what they keep when a
part of the run fails."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from concord_helpers import IDEAL, REJECTED, unit
from dissensus.concord import verify
from dissensus.concord.agent import NegotiationView, Outcome, ScoreFault
from dissensus.concord.function import as_outcome
from dissensus.concord.protocol import negotiate_sync
from dissensus.concord.record import canonical_digest
from dissensus.signing import Signer

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "concord"


@pytest.fixture
def examples(tmp_path: Path) -> Path:
    """A copy of ``examples/concord`` (its files may be written to)."""
    return Path(shutil.copytree(EXAMPLES, tmp_path / "cc"))


@pytest.mark.parametrize("where", ["flag", "file"])
def test_a_recording_that_is_a_function_agents_module_is_refused(
    examples: Path, where: str
) -> None:
    module = examples / "cost_model.py"
    before = module.read_bytes()
    problem = examples / "llm-checkout.yaml"
    if where == "flag":
        spec = f"record:{module}:scripted:{examples / 'llm-checkout.script.yaml'}"
        res = cli("negotiate", problem, "--model", spec)
    else:
        text = problem.read_text(encoding="utf-8").replace(
            "model: scripted:", "model: record:cost_model.py:scripted:"
        )
        problem.write_text(text, encoding="utf-8")
        res = cli("negotiate", problem)
    assert res.code == 2, res.err
    assert "field 'model'" in res.err and "agents.2.score" in res.err, res.err
    assert "refusing to append" in res.err
    assert module.read_bytes() == before and res.out == ""


@pytest.mark.parametrize(
    ("script", "why"),
    [
        ('rules: []\ndefault: "{not json"\n', "no valid PickReply"),
        ("rules:\n  - {match: {stage: concord.nothing}, json: {id: x}}\n", "no rule matches"),
    ],
)
def test_an_arbiter_that_fails_leaves_the_certificate(
    tmp_path: Path, script: str, why: str
) -> None:
    (tmp_path / "arbiter.yaml").write_text(script, encoding="utf-8")
    model = f"scripted:{tmp_path / 'arbiter.yaml'}"
    out = tmp_path / "cert.json"
    problem = EXAMPLES / "incident.yaml"
    res = cli("negotiate", problem, "--compare", "--json", "--model", model, "--out", out)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["comparison"] is None and doc["certificate"]["status"] == "certified"
    assert verify(doc["certificate"]).valid
    assert json.loads(out.read_text(encoding="utf-8")) == doc["certificate"]
    lines = res.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("the comparison failed: "), res.err
    assert why in lines[0] and lines[0].endswith("the certificate stands")
    human = cli("negotiate", problem, "--compare", "--model", model, env={"COLUMNS": "200"})
    assert human.code == 0 and "CONCORD certified" in human.out
    assert "Comparison on identical scores" not in human.out
    assert human.err.startswith("the comparison failed: ")


def _resealed(doc: dict[str, Any], **spent: int) -> dict[str, Any]:
    edited = json.loads(json.dumps(doc))
    edited["spent"].update(spent)
    edited.pop("digest")
    edited["digest"] = canonical_digest(edited)
    return edited


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("messages", 10**30),
        ("messages", -1),
        ("messages", 34),
        ("messages", 36),
        ("hops", 10**30),
        ("hops", -1),
        ("hops", 1),
        ("hops", 3),
        ("agent_calls", 10**6),
    ],
)
def test_verify_recounts_the_relayed_spend(field: str, value: int) -> None:
    res = cli("negotiate", EXAMPLES / "llm-checkout.yaml", "--json")
    doc = json.loads(res.out)
    assert (doc["spent"]["messages"], doc["spent"]["hops"]) == (35, 2)  # the graph's costs
    assert verify(doc).valid
    verdict = verify(_resealed(doc, **{field: value}))
    assert not verdict.valid and verdict.violated == "bound"
    assert field in (verdict.message or ""), verdict.message


class _Flaky:
    """A function-like agent: a hashed score, failing a whole scoring call (``raise``) or
    one outcome (a ``ScoreFault``) on chosen texts."""

    kind = "function"
    uses_model = False
    timeout: float | None = None

    def __init__(self, agent_id: str, seed: int, whole: int, one: int) -> None:
        self.id, self.seed, self.whole, self.one = agent_id, seed, whole, one

    def attempts(self) -> int:
        return 0

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> list[Any]:
        if view.phase != "anchors" and unit(self.seed, "whole", outcomes[0].text) < self.whole / 4:
            raise RuntimeError("scoring failed")
        out: list[Any] = []
        for o in outcomes:
            if o.id in ("R0", "I0"):
                out.append(0.0 if o.id == "R0" else 10.0)
            elif unit(self.seed, "one", o.text) < self.one / 4:
                out.append(ScoreFault(message="cannot score this one"))
            else:
                out.append(10 * unit(self.seed, self.id, o.text))
        return out

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return Outcome(text=f"plan of {self.id}")

    async def repair(self, view: NegotiationView) -> Outcome | None:
        return Outcome(text=f"repair of {self.id} in round {view.round}")


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 5),
    seed=st.integers(0, 10**6),
    whole=st.integers(0, 2),
    one=st.integers(0, 2),
    graph=st.booleans(),
)
def test_the_relayed_spend_of_any_run_verifies(
    n: int, seed: int, whole: int, one: int, graph: bool
) -> None:
    agents = [_Flaky(f"a{i}", seed + i, whole, one) for i in range(n)]
    edges = [(f"a{i}", f"a{i + 1}") for i in range(n - 1)] if graph and n > 1 else None
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.6, rounds=3, edges=edges)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid, verify(doc).message
    verdict = verify(_resealed(doc, messages=cert.spent.messages + 10**6))
    assert verdict.violated == "bound" and "messages" in (verdict.message or "")


def _reseal_doc(doc: dict[str, Any], **fields: Any) -> dict[str, Any]:
    edited = json.loads(json.dumps(doc))
    edited.update(fields)
    edited.pop("digest")
    edited["digest"] = canonical_digest(edited)
    return edited


def test_a_cleared_floor_the_selection_does_not_clear_is_named(tmp_path: Path) -> None:
    doc = json.loads(cli("negotiate", EXAMPLES / "llm-checkout.yaml", "--json").out)
    assert doc["status"] == "certified" and doc["spent"]["stopped"] == "floor_cleared"
    path = tmp_path / "cert.json"
    path.write_text(json.dumps(_reseal_doc(doc, floor=0.99)), encoding="utf-8")
    res = cli("verify", path)
    assert res.code == 1
    assert res.out.strip() == (
        "invalid: stop: stopped for a cleared floor, yet the selected candidate does not clear it"
    )


@pytest.mark.parametrize("command", ["verify", "runs verify"])
def test_a_private_key_is_refused_as_the_public_key(tmp_path: Path, command: str) -> None:
    key = Signer.generate()
    private = tmp_path / "key.pem"
    private.write_text(key.private_pem(), encoding="utf-8")
    cert = tmp_path / "cert.json"
    res = cli(
        "negotiate", EXAMPLES / "region-table.yaml", "--out", cert,
        env={"DISSENSUS_SIGNING_KEY": key.private_pem()},
    )  # fmt: skip
    assert res.code == 0, res.err
    target = str(cert) if command == "verify" else "some-run"
    res = cli(*command.split(), target, "--public-key", private)
    assert res.code == 2 and res.out == "", res.out
    assert "a private key; a public key is needed" in res.err and str(private) in res.err
    assert "signed" not in res.err


@pytest.mark.parametrize("value", ["", "   ", "\n\t", {"text": " "}, Outcome(text="  ")])
def test_a_function_agents_empty_text_passes(value: object) -> None:
    assert as_outcome(value) is None


def test_a_function_agents_unusable_outcome_is_a_one_line_fault(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(
        "def score(o, v):\n    return {'r': 0.0, 'i': 10.0}.get(o.text, 5.0)\n"
        "def empty(v):\n    return ''\n"
        "def blank(v):\n    return '   '\n"
        "def bad_id(v):\n    return {'id': 5, 'text': 'x'}\n",
        encoding="utf-8",
    )
    (tmp_path / "p.yaml").write_text(
        "floor: 0.4\nrounds: 0\n"
        "anchors: {rejected: {id: R0, text: r}, ideal: {id: I0, text: i}}\n"
        "agents:\n"
        "  - {id: a, kind: function, score: 'p:score', propose: 'p:empty'}\n"
        "  - {id: b, kind: function, score: 'p:score', propose: 'p:blank'}\n"
        "  - {id: d, kind: function, score: 'p:score', propose: 'p:bad_id'}\n",
        encoding="utf-8",
    )
    res = cli("negotiate", tmp_path / "p.yaml", "--json")
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    assert doc["candidates"] == []
    opening = doc["trajectory"][0]
    assert {"a passed", "b passed"} <= set(opening["notes"])
    assert opening["faults"] == [
        {
            "agent": "d",
            "phase": "propose",
            "message": "ValueError: not an outcome: id: Input should be a valid string",
        }
    ]


@pytest.mark.parametrize(
    ("problem", "extra"), [("llm-checkout.yaml", []), ("incident.yaml", ["--compare"])]
)
def test_a_bad_model_in_the_problem_file_names_the_field(
    examples: Path, problem: str, extra: list[str]
) -> None:
    path = examples / problem
    text = "\n".join(
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if not line.startswith("model:")
    )
    path.write_text(text + "\nmodel: scripted:nope.yaml\n", encoding="utf-8")
    out = examples / "cert.json"
    res = cli("negotiate", path, "--out", out, *extra)
    assert res.code == 2 and res.out == "" and not out.exists()
    assert res.err.startswith(f"error: {path}: field 'model': model spec "), res.err
    assert "nope.yaml" in res.err
    # Not used (no LLM agent, no --compare) or overridden by --model: the run goes on.
    if extra:
        assert cli("negotiate", path, "--json").code == 0
    model = f"scripted:{examples / 'llm-checkout.script.yaml'}"
    assert cli("negotiate", path, "--json", "--model", model, *extra).code == 0
