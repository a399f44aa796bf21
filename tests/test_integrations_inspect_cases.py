"""The Inspect reducer's panels as cases: their ids, the sample they are of, the journal
they go to and the options a re-ask is given.

inspect_ai is imported by the tests that use it, not at collection.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from inspect_ai.model import ModelOutput
    from inspect_ai.scorer import Score, Scorer


@pytest.fixture(autouse=True, scope="module")
def _inspect_ai() -> Iterator[None]:
    pytest.importorskip("inspect_ai")
    yield


POLICY = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}


def _score(value: str, **meta: Any) -> Score:
    from inspect_ai.scorer import Score

    return Score(value=value, explanation=f"says {value}", metadata=meta or None)


def _grader(name: str, value: str) -> Scorer:
    from inspect_ai.scorer import Score, accuracy, scorer

    @scorer(metrics=[accuracy()], name=name)
    def make() -> Scorer:
        async def score(*_: Any) -> Score:
            return Score(value=value, explanation=f"{name} says {value}")

        return score

    return make()


def _answer(*_: Any) -> ModelOutput:
    from inspect_ai.model import ModelOutput, ModelUsage

    out = ModelOutput.from_content(model="mockllm/model", content="4")
    out.usage = ModelUsage(input_tokens=8, output_tokens=1, total_tokens=9)
    return out


def _eval(tmp_path: Path, reducer: Any) -> dict[str, Score]:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import get_model
    from inspect_ai.scorer import multi_scorer
    from inspect_ai.solver import generate

    task = Task(
        dataset=[
            Sample(id="q1", input="2 + 2 = ?", target="4"),
            Sample(id="q2", input="Capital of France?", target="Paris"),
        ],
        solver=generate(),
        scorer=multi_scorer(scorers=[_grader("g1", "C"), _grader("g2", "I")], reducer=reducer),
    )
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=_answer),
        log_dir=str(tmp_path / "logs"),
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


@pytest.mark.parametrize(
    "meta",
    [
        {"evidence": [{"source": "kb:manual"}]},
        {"family": "gpt"},
        {"confidence": 0.9},
        {"sample_id": "q2"},
        {"question": "Capital of France?"},
    ],
)
def test_panels_that_differ_in_anything_read_have_different_ids(meta: dict[str, Any]) -> None:
    from dissensus.integrations.inspect import scores_panel

    plain = scores_panel([_score("C"), _score("C")])
    other = scores_panel([_score("C", **meta), _score("C")])
    assert plain.id != other.id
    assert scores_panel([_score("C", **meta), _score("C")]).id == other.id  # and stable


def test_the_scores_metadata_names_the_sample_of_the_panel() -> None:
    from dissensus.integrations.inspect import scores_panel

    panel = scores_panel(
        [
            _score("C", sample_id="q7", question="2 + 2 = ?", target="4"),
            _score("I", sample_id="ignored", question="ignored"),
        ]
    )
    assert panel.meta == {
        "source": "inspect",
        "sample_id": "q7",
        "question": "2 + 2 = ?",
        "target": "4",
    }
    assert panel.id.startswith("inspect-q7-")
    # A sample id that is no plain token is in meta only.
    odd = scores_panel([_score("C", sample_id="a b/c"), _score("C")])
    assert odd.meta["sample_id"] == "a b/c" and odd.id.startswith("inspect-") and " " not in odd.id


def test_a_sample_field_that_is_not_text_is_left_out_and_noted() -> None:
    from dissensus.integrations.inspect import scores_panel

    notes: list[str] = []
    panel = scores_panel([_score("C", question=["a", "list"]), _score("C")], notes=notes)
    assert "question" not in panel.meta
    assert notes == ["sample: metadata.question left out (not text or a whole number)"]


def test_each_sample_of_an_eval_is_its_own_case_with_its_question(tmp_path: Path) -> None:
    from dissensus.integrations.inspect import dissensus_reducer
    from dissensus.pipeline.review import find_item
    from dissensus.store import Journal

    path = tmp_path / "insp.sqlite"
    scores = _eval(tmp_path, dissensus_reducer(policy=POLICY, journal=str(path)))
    with Journal(path) as journal:
        items = {
            sid: find_item(journal, str(s.metadata["review_id"])).item
            for sid, s in scores.items()
            if s.metadata
        }
    assert set(items) == {"q1", "q2"}
    assert items["q1"].id != items["q2"].id
    assert items["q1"].id.startswith("inspect-q1-") and items["q2"].id.startswith("inspect-q2-")
    meta = {sid: item.panel["meta"] for sid, item in items.items()}
    assert meta["q1"] == {
        "source": "inspect",
        "sample_id": "q1",
        "epoch": 1,
        "question": "2 + 2 = ?",
        "target": "4",
    }
    assert meta["q2"]["question"] == "Capital of France?" and meta["q2"]["target"] == "Paris"


@pytest.mark.parametrize("kind", ["directory", "missing folder", "number", "bytes"])
def test_a_journal_that_cannot_be_opened_is_refused_when_the_reducer_is_made(
    tmp_path: Path, kind: str
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    (tmp_path / "jdir").mkdir()
    journal: Any = {
        "directory": str(tmp_path / "jdir"),
        "missing folder": str(tmp_path / "nowhere" / "j.sqlite"),
        "number": 5,
        "bytes": b"j.sqlite",
    }[kind]
    with pytest.raises(ConfigError) as caught:
        dissensus_reducer(policy=POLICY, journal=journal)
    assert caught.value.field == "journal"
    assert not (tmp_path / "5").exists()


def test_a_journal_made_when_the_reducer_is_made(tmp_path: Path) -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    dissensus_reducer(policy=POLICY, journal=str(tmp_path / "new.sqlite"))
    assert (tmp_path / "new.sqlite").is_file()


def test_a_journal_gone_bad_at_a_reduction_is_the_journals_error_not_the_samples(
    tmp_path: Path,
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    path = tmp_path / "j.sqlite"
    reduce = dissensus_reducer(policy=POLICY, journal=str(path))
    assert reduce([_score("C"), _score("C")]).answer in ("auto", "auto_explain", "escalate")
    path.unlink()
    path.mkdir()
    with pytest.raises(ConfigError) as caught:
        reduce([_score("C"), _score("I")])
    assert caught.value.field == "journal" and "not a regular file" in str(caught.value)


def test_a_relative_journal_resolves_where_the_reducer_is_made_as_the_policy_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from dissensus.integrations.inspect import dissensus_reducer
    from dissensus.store import Journal

    task, launch = tmp_path / "task", tmp_path / "launch"
    task.mkdir(), launch.mkdir()
    (task / "policy.json").write_text(json.dumps(POLICY), encoding="utf-8")
    monkeypatch.chdir(task)  # where Inspect makes the task
    reduce = dissensus_reducer(policy="policy.json", journal="j.sqlite")
    monkeypatch.chdir(launch)  # where it reduces
    score = reduce([_score("C"), _score("I")])
    assert score.metadata is not None and score.metadata["review_id"] is not None
    assert not (launch / "j.sqlite").exists()
    with Journal(task / "j.sqlite") as journal:
        assert len(journal.runs()) == 1


def _reask_policy(tmp_path: Path) -> dict[str, Any]:
    import json

    reask = {"default": json.dumps({"decision": "C", "reasoning": "On a second look, C."})}
    (tmp_path / "reask.json").write_text(json.dumps(reask), encoding="utf-8")
    return {
        "reading": {"similarity": "tfidf", "theta_s": 0.3},
        "routing": {"defaults": {"DD": "seek_context", "CD": "seek_context"}},
        "seek_context": {"model": f"scripted:{tmp_path / 'reask.json'}"},
    }


def test_the_options_passed_let_the_follow_up_model_re_ask(tmp_path: Path) -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    split = [_score("C"), _score("I")]
    without = dissensus_reducer(policy=_reask_policy(tmp_path))(split)
    assert without.metadata is not None
    assert "the case has no explicit options to re-ask" in without.metadata["reason"]
    with_options = dissensus_reducer(policy=_reask_policy(tmp_path), options=["C", "I"])(split)
    assert with_options.metadata is not None
    reason = with_options.metadata["reason"]
    assert "no explicit options" not in reason and "live re-ask" in reason, reason


@pytest.mark.parametrize("options", [["C"], ["C", "C"], "CI", ["C", ""], ["C", "I\n"], [1, 2]])
def test_options_no_re_ask_can_offer_are_refused_when_the_reducer_is_made(options: Any) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError) as caught:
        dissensus_reducer(policy=POLICY, options=options)
    assert str(caught.value.field).startswith("options")
