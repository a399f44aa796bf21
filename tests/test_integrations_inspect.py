"""The Inspect AI reducer with the real inspect_ai: an offline eval on the mock model.

inspect_ai is imported by the tests that use it, not at collection (it takes seconds to
import, paid by every test worker otherwise).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score, Scorer, Target
    from inspect_ai.solver import TaskState


@pytest.fixture(autouse=True, scope="module")
def _inspect_ai() -> Iterator[None]:
    pytest.importorskip("inspect_ai")
    yield


POLICY = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}
KB = {"g1": "kb:manual", "g2": "kb:faq", "g3": "kb:tickets"}

# Each sample scripts its graders: a value, None (the scorer declines) or "nan" (unscored).
CASES: dict[str, dict[str, Any]] = {
    "agree": {"g1": "C", "g2": "C", "g3": "C", "evidence": True},
    "tie": {"g1": "C", "g2": "I", "g3": None},
    "tie_swapped": {"g1": "I", "g2": "C", "g3": None},
    "declined": {"g1": "C", "g2": "C", "g3": None},
    "unscored": {"g1": "I", "g2": "nan", "g3": "I"},
    "majority": {"g1": "I", "g2": "C", "g3": "C"},
}


def _grader(name: str, *, tag: bool) -> Scorer:
    from inspect_ai.scorer import Score, accuracy, scorer

    @scorer(metrics=[accuracy()], name=name)
    def make() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score | None:
            case = CASES[str(state.sample_id)]
            value = case[name]
            if value is None:
                return None
            meta: dict[str, Any] = {"grader": name} if tag else {}
            if case.get("evidence"):
                meta["evidence"] = [{"source": KB[name]}]
            if value == "nan":
                return Score.unscored(reason="grader could not parse", metadata=meta)
            return Score(
                value=value,
                explanation=f"{name} finds the answer {'correct' if value == 'C' else 'wrong'}.",
                metadata=meta,
            )

        return score

    return make()


def _answer(*_: Any) -> ModelOutput:
    # The mock model's own usage estimate loads a tokenizer file from the network; an
    # output that states its usage keeps the run offline.
    from inspect_ai.model import ModelOutput, ModelUsage

    out = ModelOutput.from_content(model="mockllm/model", content="4")
    out.usage = ModelUsage(input_tokens=8, output_tokens=1, total_tokens=9)
    return out


def _run(tmp_path: Path, reducer: Any, *, tag: bool) -> dict[str, Score]:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import multi_scorer
    from inspect_ai.solver import generate

    task = Task(
        dataset=[Sample(id=sid, input="What is 2 + 2?", target="4") for sid in CASES],
        solver=generate(),
        scorer=multi_scorer(
            scorers=[_grader(n, tag=tag) for n in ("g1", "g2", "g3")], reducer=reducer
        ),
    )
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=_answer),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None
    out = {}
    for sample in log.samples:
        assert sample.scores is not None
        (score,) = sample.scores.values()
        out[str(sample.id)] = score
    return out


def _check(scores: dict[str, Score], *, tagged: bool) -> None:
    agree = scores["agree"]
    assert (agree.value, agree.answer) == ("C", "auto")
    assert (
        agree.metadata is not None
        and agree.metadata["escalate"] is False
        and agree.metadata["state"] == "CA"
    )
    assert (
        agree.metadata["support"] == 1.0
        and agree.metadata["n_graders"] == 3
        and agree.metadata["n_eff"] > 1
    )

    # C against I with the third grader declining: a tie, broken by the posterior and then
    # the smallest label -- never by the graders' order -- and escalated.
    for sid in ("tie", "tie_swapped"):
        tie = scores[sid]
        assert tie.value == "C" and tie.answer == "escalate"
        assert tie.metadata is not None
        meta = tie.metadata
        assert meta["escalate"] is True and meta["decision"] is None and meta["tie"] == ["C", "I"]
        assert (meta["n_graders"], meta["abstentions"]) == (3, 1)
        assert meta["support"] == pytest.approx(1 / 3)
        assert meta["state"] in ("CD", "DD")

    # Two of three graders agree and the third declined: the declined grader stays in the
    # panel, so the value's support is 2/3, not 2/2. No evidence: the guard refuses to
    # take the agreement at face value and the case escalates with the majority as value.
    declined = scores["declined"]
    assert declined.value == "C" and declined.metadata is not None
    assert (
        declined.metadata["support"] == pytest.approx(2 / 3)
        and declined.metadata["agreement"] == 1.0
    )
    assert declined.metadata["abstentions"] == 1 and declined.metadata["escalate"] is True
    # Untagged scores with one dropped by multi_scorer cannot be told apart: the names are
    # positional and the missing grader is counted without a name.
    named = (
        {"g1": "C", "g2": "C", "g3": None}
        if tagged
        else {"grader-1": "C", "grader-2": "C", "declined-1": None}
    )
    assert declined.metadata["graders"] == named

    unscored = scores["unscored"]
    assert unscored.value == "I" and unscored.metadata is not None
    assert unscored.metadata["graders"] == {"g1": "I", "g2": None, "g3": "I"}
    assert unscored.metadata["support"] == pytest.approx(2 / 3)

    majority = scores["majority"]
    assert majority.value == "C" and majority.metadata is not None
    assert majority.metadata["support"] == pytest.approx(2 / 3) and majority.metadata["tie"] == []


def test_eval_with_named_graders_and_the_registered_name(tmp_path: Path) -> None:
    # Registered under "dissensus": the string form with the default policy would load
    # the embedding model, so the factory is called with a fast offline policy here and
    # the name is checked separately.
    from inspect_ai._util.registry import registry_info

    from dissensus.integrations.inspect import dissensus_reducer

    reducer = dissensus_reducer(graders=["g1", "g2", "g3"], policy=POLICY)
    assert registry_info(reducer).name == "dissensus"
    _check(_run(tmp_path, reducer, tag=True), tagged=True)


def test_eval_with_graders_named_by_the_reducer(tmp_path: Path) -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    _check(
        _run(tmp_path, dissensus_reducer(graders=["g1", "g2", "g3"], policy=POLICY), tag=False),
        tagged=False,
    )


def test_without_the_grader_list_a_scorer_that_returned_none_is_unseen(tmp_path: Path) -> None:
    # multi_scorer drops None before the reducer runs: only `graders` can bring it back.
    from dissensus.integrations.inspect import dissensus_reducer

    scores = _run(tmp_path, dissensus_reducer(policy=POLICY), tag=True)
    assert scores["declined"].metadata is not None and scores["declined"].metadata["n_graders"] == 2
    assert scores["unscored"].metadata is not None and scores["unscored"].metadata["n_graders"] == 3


_RESOLVE = """
import sys
from inspect_ai.scorer._reducer.registry import create_reducers
from inspect_ai._util.registry import registry_info
if sys.argv[1] == "get_model":
    from inspect_ai.model import get_model
    get_model("mockllm/model")
try:
    (reducer,) = create_reducers(sys.argv[2])
    print(registry_info(reducer).name)
except LookupError as exc:
    print("LookupError:", exc)
"""


def _resolve_fresh(name: str, before: str = "nothing") -> str:
    """How ``name`` resolves in a fresh process, where nothing imported this module."""
    import os
    import subprocess
    import sys
    from importlib.metadata import entry_points

    if not entry_points(group="inspect_ai", name="dissensus"):
        pytest.skip("dissensus is not installed with its inspect_ai entry point")
    done = subprocess.run(
        [sys.executable, "-c", _RESOLVE, before, name],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_namespaced_reducer_name_resolves_with_nothing_imported() -> None:
    """``"dissensus/dissensus"``: Inspect loads the package's entry point for it."""
    assert _resolve_fresh("dissensus/dissensus") == "dissensus/dissensus"


def test_the_plain_reducer_name_resolves_once_inspect_has_loaded_entry_points() -> None:
    """A plain name loads no entry point: ``"dissensus"`` is unknown until the module is
    imported or Inspect loads every entry point (``get_model``, ``eval``)."""
    assert _resolve_fresh("dissensus") == "LookupError: dissensus was not found in the registry"
    assert _resolve_fresh("dissensus", before="get_model") == "dissensus"


def test_both_names_make_the_same_reducer() -> None:
    from inspect_ai._util.registry import registry_info
    from inspect_ai.scorer import Score
    from inspect_ai.scorer._reducer.registry import create_reducers

    from dissensus.integrations.inspect import _namespaced_reducer  # registers both names

    (plain,) = create_reducers("dissensus")
    (namespaced,) = create_reducers("dissensus/dissensus")
    assert (registry_info(plain).name, registry_info(namespaced).name) == (
        "dissensus",
        "dissensus/dissensus",
    )

    reduce = _namespaced_reducer(policy=POLICY)
    out = reduce([Score(value="C", metadata={"grader": g}) for g in ("g1", "g2", "g3")])
    assert out.value == "C" and out.metadata is not None and out.metadata["n_graders"] == 3


@pytest.mark.parametrize(
    ("given", "read"),
    [(0.75, 0.75), (1, 1.0), ("0.6", 0.6), (True, None), ("high", None), (float("nan"), None)],
)
def test_a_graders_confidence_is_read_leniently(given: object, read: float | None) -> None:
    """Panels take strict numbers; a grader's metadata is foreign, so a numeric string is
    read as its number and anything else as no confidence, never a failed sample."""
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import scores_panel

    panel = scores_panel(
        [Score(value=1, metadata={"confidence": given}), Score(value=0)], ["a", "b"]
    )
    assert panel.outputs[0].confidence == read


def test_scores_panel_names_and_abstentions() -> None:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import scores_panel

    scores = [Score(value=1, explanation="fine"), Score(value=float("nan"))]
    panel = scores_panel(scores, ["a", "b", "c"])
    assert [(o.agent, o.decision) for o in panel.outputs] == [
        ("grader-1", "1"),
        ("grader-2", None),
        ("declined-1", None),
    ]
    same = scores_panel(list(scores), ["a", "b", "c"])
    assert same.id == panel.id and panel.id.startswith("inspect-")
    named = scores_panel(
        [Score(value=True, metadata={"grader": "b"}), Score(value=0.5, metadata={"grader": "a"})],
        ["a", "b", "c"],
    )
    assert [(o.agent, o.decision) for o in named.outputs] == [
        ("b", "true"),
        ("a", "0.5"),
        ("c", None),
    ]


@pytest.mark.parametrize(
    ("tags", "graders", "error"),
    [
        (
            ["grader1", "grader2", "grader3"],
            ["g1", "g2", "g3"],
            "grader 'grader1' is not one of graders",
        ),
        (["g1", None, "g3"], ["g1", "g2", "g3"], "2 of 3 scores name their grader"),
        (["g1", None, None], None, "1 of 3 scores name their grader"),
        ([None, None, None], ["g1", "g2"], "3 scores for the 2 graders listed"),
    ],
    ids=["not-listed", "partly-tagged", "partly-tagged-no-list", "more-than-listed"],
)
def test_scores_whose_graders_do_not_match_the_list_are_refused(
    tags: list[str | None], graders: list[str] | None, error: str
) -> None:
    """Tags that name no listed grader made a panel of six from three scores (three
    phantom abstentions, the support halved) without a note; a partly tagged list lost
    its tags."""
    from inspect_ai.scorer import Score

    from dissensus.errors import InputError
    from dissensus.integrations.inspect import scores_panel

    scores = [
        Score(value="C", metadata={"grader": t} if t else None, explanation="right") for t in tags
    ]
    with pytest.raises(InputError, match=error):
        scores_panel(scores, graders)


def test_untagged_scores_fewer_than_the_graders_are_noted() -> None:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import scores_panel

    notes: list[str] = []
    panel = scores_panel([Score(value=1), Score(value=0)], ["a", "b", "c"], notes)
    assert [o.agent for o in panel.outputs] == ["grader-1", "grader-2", "declined-1"]
    assert len(notes) == 1 and "counted as declined" in notes[0]


def test_a_grader_scoring_twice_is_named_not_a_validation_error() -> None:
    from inspect_ai.scorer import Score

    from dissensus.errors import InputError
    from dissensus.integrations.inspect import scores_panel

    twice = [Score(value=1, metadata={"grader": "g"}), Score(value=0, metadata={"grader": "g"})]
    with pytest.raises(InputError, match="grader 'g' gave more than one score"):
        scores_panel(twice, ["g", "h"])


def test_a_grader_scoring_twice_fails_its_sample_not_the_eval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Sample ``dup``: the second scorer tags itself as the first. That sample is unscored
    naming the grader, with a warning; the eval succeeds and the other sample is decided."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import Score, accuracy, multi_scorer, scorer

    from dissensus.integrations.inspect import dissensus_reducer

    def grader(name: str) -> Scorer:
        @scorer(metrics=[accuracy()], name=name)
        def make() -> Scorer:
            async def score(state: TaskState, target: Target) -> Score:
                tag = "g1" if state.sample_id == "dup" else name
                return Score(value="C", explanation=f"{name} agrees.", metadata={"grader": tag})

            return score

        return make()

    task = Task(
        dataset=[Sample(id=sid, input="What is 2 + 2?", target="4") for sid in ("dup", "ok")],
        solver=[],
        scorer=multi_scorer(
            [grader("g1"), grader("g2"), grader("g3")], reducer=dissensus_reducer(policy=POLICY)
        ),
    )
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=_answer),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None
    scores = {str(s.id): next(iter((s.scores or {}).values())) for s in log.samples}
    dup = scores["dup"]
    assert dup.answer == "error" and dup.metadata is not None
    assert dup.metadata["error"].startswith("grader 'g1' gave more than one score")
    assert (scores["ok"].value, scores["ok"].metadata["n_graders"]) == ("C", 3)  # type: ignore[index]
    assert any("sample not decided: grader 'g1'" in r.getMessage() for r in caplog.records)


def _guard_calibration(path: Path) -> Path:
    from dissensus.guard import fit_reliability
    from dissensus.types import Vote, VoteCase

    def v(agent: str, answer: str, source: str) -> Vote:
        return Vote(
            agent=agent,
            answer=answer,
            evidence_source=source,
            evidence_present=source != "parametric",
        )

    cases = [
        VoteCase(
            id=str(i),
            votes=[
                v("g1", "C", "kb:a"),
                v("g2", "C" if i % 4 else "I", "kb:b"),
                v("g3", "C", "parametric"),
            ],
            gold="C",
        )
        for i in range(40)
    ]
    path.write_text(fit_reliability(cases).model_dump_json(), encoding="utf-8")
    return path


def test_acceptance_and_guard_calibration_are_passed_to_the_pipeline(tmp_path: Path) -> None:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    acceptance = Path(__file__).resolve().parents[1] / "examples" / "llmbar-reliability.json"
    cal = _guard_calibration(tmp_path / "guard.json")
    journal = tmp_path / "j.sqlite"
    markers = {
        "concession": ["however", "both", "also", "more detailed", "more comprehensive"],
        "grounding": ["instruction", "instructions"],
    }
    reducer = dissensus_reducer(
        graders=["g1", "g2", "g3"],
        policy={**POLICY, "acceptance": {"markers": markers}},
        acceptance=str(acceptance),
        guard_calibration=str(cal),
        journal=str(journal),
    )
    evidence = {"g1": "kb:a", "g2": "kb:b", "g3": "kb:c"}
    scores = [
        Score(
            value="C",
            explanation=f"{g} checked it.",
            metadata={"grader": g, "evidence": [{"source": s}]},
        )
        for g, s in evidence.items()
    ]
    out = reducer(scores)  # outside an event loop too
    assert out.value == "C" and out.metadata is not None and out.metadata["confidence"] is not None
    from dissensus.pipeline.durable import case_step
    from dissensus.store import Journal

    with Journal(journal) as store:
        (run,) = store.runs()
        guard = case_step(store, run.run_id, 1, "guard")
        assert guard is not None
        bounded = guard["decision"]["invariants"][2]
        assert bounded["number"] == 3 and "no calibration" not in bounded["message"]  # it was read


def test_an_unreadable_guard_calibration_names_the_argument(tmp_path: Path) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError, match="guard_calibration"):
        dissensus_reducer(policy=POLICY, guard_calibration=str(tmp_path / "missing.json"))


def test_a_calibrate_acceptance_file_becomes_the_policys_acceptance_model(repo_root: Path) -> None:
    from dissensus.integrations.inspect import _spec
    from dissensus.pipeline.spec import file_sha256

    accept = repo_root / "examples" / "llmbar-accept.json"
    spec = _spec({"reading": {"similarity": "minilm"}}, str(accept), None)
    assert spec.acceptance is not None
    assert spec.digests()["acceptance.model"] == file_sha256(accept)
    assert spec.policy.acceptance.calibration is None
    reliability = repo_root / "examples" / "llmbar-reliability.json"
    lexicon = json.loads(reliability.read_text(encoding="utf-8"))["lexicon"]
    policy = {"reading": {"similarity": "tfidf"}, "acceptance": {"markers": lexicon}}
    spec = _spec(policy, str(reliability), None)
    assert spec.policy.acceptance.calibration == str(reliability.resolve())
    assert spec.calibration is not None and spec.acceptance is None


def test_a_runspec_keeps_its_acceptance_model_and_files_when_files_are_added(
    repo_root: Path, tmp_path: Path
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import _spec
    from dissensus.pipeline import RunSpec

    accept = repo_root / "examples" / "llmbar-accept.json"
    policy = tmp_path / "policy.yaml"
    policy.write_text("reading: {similarity: minilm}\n", encoding="utf-8")
    script = tmp_path / "reask.yaml"
    script.write_text("rules: []\n", encoding="utf-8")
    spec = RunSpec.from_policy(
        str(policy), acceptance=accept, model=f"scripted:{script}", deadline_s=30
    )
    cal = _guard_calibration(tmp_path / "guard.json")
    out = _spec(spec, None, str(cal))
    assert out.acceptance == spec.acceptance and out.model == spec.model
    assert out.policy.deadline_s == 30 and out.policy_file == spec.policy_file
    assert out.guard_calibration is not None
    assert [f.role for f in out.files] == ["policy", "acceptance.model", "guard.calibration"]
    assert out.policy.guard.calibration == str(cal.resolve())
    # A file the spec already has is refused, not silently replaced.
    with pytest.raises(ConfigError, match="already has") as err:
        _spec(spec, str(accept), None)
    assert err.value.field == "acceptance"
    with pytest.raises(ConfigError, match="already has") as err:
        _spec(out, None, str(cal))
    assert err.value.field == "guard_calibration"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, repo_root: Path) -> Path:
    """``plain.yaml`` (tfidf, no guard calibration) and ``guarded.yaml`` (the same with
    the guard calibration ``guard.json``), and the acceptance files calibrated under each:
    ``P.json`` records no guard calibration, ``G.json`` records ``guard.json``'s sha256."""
    from cli_helpers import cli

    root = tmp_path_factory.mktemp("guarded")
    _guard_calibration(root / "guard.json")
    (root / "plain.yaml").write_text("reading: {similarity: tfidf}\n", encoding="utf-8")
    (root / "guarded.yaml").write_text(
        "reading: {similarity: tfidf}\nguard: {calibration: guard.json}\n", encoding="utf-8"
    )
    panels = repo_root / "examples" / "llmbar-swap.jsonl"
    for policy, out in (("plain.yaml", "P.json"), ("guarded.yaml", "G.json")):
        res = cli(
            "calibrate-acceptance", panels, "--policy", root / policy, "--out", root / out,
            "--target-precision", "0.8",
        )  # fmt: skip
        assert res.code == 0, res.err
    return root


def test_a_runspecs_guard_calibration_is_what_acceptance_is_checked_against(
    guarded: Path,
) -> None:
    """An acceptance file calibrated with the spec's own guard calibration was refused (the
    reducer's side specification had none), though the reducer decides with it."""
    from dissensus.acceptance import load_acceptance
    from dissensus.integrations.inspect import _spec
    from dissensus.pipeline import RunSpec
    from dissensus.pipeline.spec import file_sha256

    spec = RunSpec.from_policy(str(guarded / "guarded.yaml"))
    out = _spec(spec, str(guarded / "G.json"), None)
    assert out.acceptance is not None
    assert out.acceptance["sha256"] == load_acceptance(guarded / "G.json").sha256
    assert out.guard_calibration == spec.guard_calibration
    assert out.digests()["guard.calibration"] == file_sha256(guarded / "guard.json")
    assert [f.role for f in out.files] == ["policy", "guard.calibration", "acceptance.model"]


def test_an_acceptance_file_calibrated_without_the_reducers_guard_calibration_is_refused(
    guarded: Path,
) -> None:
    """The reducer decides with the spec's guard calibration, or with ``guard_calibration=``:
    an acceptance file calibrated without it was taken (the side specification compared
    no guard calibration with none, or did not compare the spec's own file at all)."""
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer
    from dissensus.pipeline import RunSpec

    spec = RunSpec.from_policy(str(guarded / "guarded.yaml"))
    with pytest.raises(ConfigError, match="calibrated with no guard calibration") as err:
        dissensus_reducer(policy=spec, acceptance=str(guarded / "P.json"))
    assert err.value.field == "guard.calibration"
    # The spec's own acceptance file, and the guard calibration passed beside it.
    learned = RunSpec.from_policy(str(guarded / "plain.yaml"), acceptance=guarded / "P.json")
    with pytest.raises(ConfigError, match="calibrated with no guard calibration") as err:
        dissensus_reducer(policy=learned, guard_calibration=str(guarded / "guard.json"))
    assert err.value.field == "guard.calibration"
    # The same files in agreement are taken.
    plain = RunSpec.from_policy(str(guarded / "plain.yaml"))
    made = dissensus_reducer(
        policy=plain,
        acceptance=str(guarded / "G.json"),
        guard_calibration=str(guarded / "guard.json"),
    )
    assert callable(made)


def test_a_policy_file_is_journalled_with_its_digest(tmp_path: Path) -> None:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer
    from dissensus.pipeline.spec import file_sha256
    from dissensus.store import Journal

    policy = tmp_path / "policy.yaml"
    policy.write_text("reading: {similarity: tfidf}\n", encoding="utf-8")
    cal = _guard_calibration(tmp_path / "guard.json")
    scores = [Score(value="C", explanation=f"{g} checked.", metadata={"grader": g}) for g in "ab"]
    for n, guard in enumerate((None, str(cal))):
        journal = tmp_path / f"j{n}.sqlite"
        dissensus_reducer(policy=str(policy), guard_calibration=guard, journal=str(journal))(scores)
        with Journal(journal) as store:
            (run,) = store.runs()
            started = store.get(run.run_id, "run/started")
            assert started is not None
            files = {f["role"]: f["sha256"] for f in started.payload["files"]}
        assert files["policy"] == file_sha256(policy)
        assert ("guard.calibration" in files) == (guard is not None)


# -- one bad score fails one sample, never the eval ------------------------------------------


def _three(**first: Any) -> list[Score]:
    from inspect_ai.scorer import Score

    explanation = first.pop("explanation", "g1 finds the answer correct.")
    return [
        Score(value="C", explanation=explanation, metadata={"grader": "g1", **first}),
        Score(value="C", explanation="g2 finds the answer correct.", metadata={"grader": "g2"}),
        Score(value="I", explanation="g3 finds the answer wrong.", metadata={"grader": "g3"}),
    ]


@pytest.mark.parametrize(
    ("first", "note"),
    [
        ({"explanation": "long reasoning " * 3000}, "g1: explanation: cut from 44999 to 32768"),
        ({"explanation": "lone \ud800 surrogate"}, "g1: explanation: a lone surrogate"),
        ({"family": ["openai"]}, "g1: metadata.family left out"),
        ({"family": 7}, "g1: metadata.family left out"),
        ({"evidence": [{"nope": 1}]}, "g1: metadata.evidence left out"),
        ({"evidence": "kb:manual"}, "g1: metadata.evidence left out"),
    ],
)
def test_a_score_the_panel_cannot_hold_is_made_to_fit_and_noted(
    tmp_path: Path, first: dict[str, Any], note: str
) -> None:
    from dissensus.integrations.inspect import dissensus_reducer
    from dissensus.store import Journal

    path = tmp_path / "j.sqlite"
    reduce = dissensus_reducer(policy=POLICY, journal=str(path))
    score = reduce(_three(**first))
    assert score.value == "C" and score.answer != "error"
    assert score.metadata is not None
    assert any(n.startswith(note) for n in score.metadata["notes"]), score.metadata["notes"]
    assert score.metadata["n_graders"] == 3
    with Journal(path) as journal:
        (run,) = journal.runs()
        assert journal.verify(run.run_id).ok


def test_a_clean_sample_has_no_notes() -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    score = dissensus_reducer(policy=POLICY)(_three())
    assert score.metadata is not None and score.metadata["notes"] == []


def test_a_sample_still_refused_is_unscored_and_the_next_one_decided(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nine graders of 32,768 characters each: more text than one record holds. That
    sample is unscored with the reason; the reducer goes on deciding the next."""
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    reduce = dissensus_reducer(policy=POLICY)
    huge = [
        Score(value="C", explanation=f"{i} " + "x" * 32_760, metadata={"grader": f"g{i}"})
        for i in range(9)
    ]
    refused = reduce(huge)
    assert refused.answer == "error" and refused.metadata is not None
    assert "characters" in refused.metadata["error"]
    assert refused.explanation is not None and refused.explanation.startswith("not decided: ")
    assert any("sample not decided" in r.getMessage() for r in caplog.records)
    assert reduce(_three()).value == "C"


def _scores(first: Any = "C", **meta: Any) -> list[Score]:
    from inspect_ai.scorer import Score

    return [
        Score(value=first, explanation="g1 says so.", metadata={"grader": "g1", **meta}),
        Score(value="C", explanation="g2 says so.", metadata={"grader": "g2"}),
        Score(value="I", explanation="g3 says not.", metadata={"grader": "g3"}),
    ]


@pytest.mark.parametrize(
    ("scores", "error"),
    [
        (lambda: _scores(10**5000), "g1: value: no label can hold it (holds an integer of more"),
        (lambda: _scores([1, 10**5000]), "g1: value: no label can hold it (holds an integer"),
        (lambda: _scores()[:1], "1 grader(s) scored this sample: a panel needs at least two"),
        (lambda: [], "0 grader(s) scored this sample: a panel needs at least two"),
    ],
    ids=["huge-int", "huge-int-in-list", "one-score", "no-score"],
)
def test_scores_that_make_no_panel_fail_their_sample_with_one_line(
    scores: Any, error: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A value no label holds, or fewer than two scores, is this sample's fault: it is
    unscored with a one-line reason (never a raw ValueError or a pydantic dump), and the
    next sample is decided."""
    from dissensus.integrations.inspect import dissensus_reducer

    reduce = dissensus_reducer(policy=POLICY)
    refused = reduce(scores())
    assert refused.answer == "error" and refused.metadata is not None
    assert refused.metadata["error"].startswith(error), refused.metadata["error"]
    assert "\n" not in refused.metadata["error"] and "pydantic" not in refused.metadata["error"]
    assert refused.explanation == f"not decided: {refused.metadata['error']}"
    assert any("sample not decided" in r.getMessage() for r in caplog.records)
    assert reduce(_scores()).value == "C"


@pytest.mark.parametrize(
    "confidence", [10**5000, 5, -0.5, "1e999"], ids=["huge-int", "5", "-0.5", "1e999"]
)
def test_a_confidence_out_of_range_or_too_large_is_left_out_and_noted(confidence: Any) -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    score = dissensus_reducer(policy=POLICY)(_scores(confidence=confidence))
    assert score.value == "C" and score.answer != "error" and score.metadata is not None
    assert score.metadata["notes"] == ["g1: metadata.confidence left out (not a number in [0, 1])"]


@pytest.mark.parametrize(
    ("graders", "message"),
    [(["g1"], r"1 grader\(s\) named"), (["g1", "g1"], "'g1' is named twice"), ("g1g2", "a list")],
)
def test_a_grader_list_no_panel_can_come_from_is_refused_when_the_reducer_is_made(
    graders: Any, message: str
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError, match=message) as err:
        dissensus_reducer(graders=graders, policy=POLICY)
    assert err.value.field == "graders"


def test_a_long_grader_name_is_named_by_its_first_80_characters_in_notes() -> None:
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    long = "g" * 40_000
    scores = _three(family=7)
    scores[0] = Score(value="C", explanation="fine", metadata={"grader": long, "family": 7})
    score = dissensus_reducer(policy=POLICY)(scores)
    assert score.metadata is not None
    notes = score.metadata["notes"]
    assert notes and all(len(n) < 200 for n in notes), [len(n) for n in notes]
    assert notes[0].startswith("g" * 80 + "…: grader: cut from 40000 to 32768")
    assert "g" * 80 + "…: metadata.family left out (not a non-empty string)" in notes


def test_a_graders_name_in_a_reason_is_escaped() -> None:
    """A grader named with an ANSI escape reached the sample's reason (and the log) raw."""
    from inspect_ai.scorer import Score

    from dissensus.errors import InputError
    from dissensus.integrations.inspect import scores_panel

    scores = [
        Score(value="x", metadata={"grader": "g\x1b[31mRED"}),
        Score(value="y", metadata={"grader": "g2"}),
    ]
    with pytest.raises(InputError) as refused:
        scores_panel(scores)
    assert "\x1b" not in str(refused.value) and "g\\x1b[31mRED" in str(refused.value)


def test_a_long_value_with_no_explanation_is_cut_not_refused() -> None:
    """A value cut to 32,768 characters and no explanation: the reasoning the reducer
    stands in (``name: value``) was longer than a field holds, and the sample was
    refused for a reasoning the grader never gave
    (``field 'outputs.0.reasoning': 32772 characters``)."""
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    scores = _three()
    scores[0] = Score(value="x" * 40_000, metadata={"grader": "g1"})
    score = dissensus_reducer(policy=POLICY)(scores)
    assert score.answer != "error", score.explanation
    assert score.metadata is not None
    assert score.metadata["notes"] == ["g1: value: cut from 40000 to 32768 characters (the most a field holds)"]  # fmt: skip
    assert score.metadata["n_graders"] == 3 and score.value == "C"


@pytest.mark.parametrize(
    ("values", "reduced"),
    [
        ([4, 4, 3], 4),
        ([1.0, 1, "1"], 1.0),
        ([True, True, False], True),
        (
            [{"correct": 1, "style": 0}] * 2 + [{"correct": 0, "style": 0}],
            {"correct": 1, "style": 0},
        ),
        (["C", "C", "I"], "C"),
    ],
)
def test_the_reduced_value_is_the_graders_own_value(values: list[Any], reduced: Any) -> None:
    """The panel reads labels, but the reduced score holds the value a grader gave for the
    label decided (``4``, not ``"4"``; a dict, not its JSON text)."""
    from inspect_ai.scorer import Score

    from dissensus.integrations.inspect import dissensus_reducer

    out = dissensus_reducer(policy=POLICY)([Score(value=v) for v in values])
    assert out.value == reduced and type(out.value) is type(reduced)
    assert out.metadata is not None and out.answer != "error"


def test_a_dict_valued_panel_reduces_under_a_dict_of_metrics(tmp_path: Path) -> None:
    """Graders scoring several values at once (a dict) under a scorer with a dict of
    metrics: the eval succeeds and each metric reads its key of the reduced value (a JSON
    string failed the eval: ``A dictionary of metrics specified for a non-dictionary
    score``)."""
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import Score, mean, multi_scorer, scorer
    from inspect_ai.solver import generate

    from dissensus.integrations.inspect import dissensus_reducer

    metrics: Any = {"correct": [mean()], "style": [mean()]}

    def grader(name: str, value: dict[str, int]) -> Scorer:
        @scorer(metrics=metrics, name=name)
        def make() -> Scorer:
            async def score(state: TaskState, target: Target) -> Score:
                return Score(value=value, explanation=f"{name}: right, and well put.")

            return score

        return make()

    @scorer(metrics=metrics, name="panel")
    def panel() -> Scorer:
        graders = [grader(f"g{i}", {"correct": 1, "style": int(i < 3)}) for i in (1, 2, 3)]
        return multi_scorer(graders, reducer=dissensus_reducer(policy=POLICY))

    task = Task(dataset=[Sample(input="2 + 2?", target="4")], solver=generate(), scorer=panel())
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=_answer),
        log_dir=str(tmp_path),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None and log.samples[0].scores is not None
    (score,) = log.samples[0].scores.values()
    assert score.value == {"correct": 1, "style": 1}
    assert log.results is not None
    got = {s.name: s.metrics["mean"].value for s in log.results.scores}
    assert got == {"correct": 1.0, "style": 1.0}
