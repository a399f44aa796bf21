"""Public functions raise dissensus's own errors, never a bare ``ValueError``.

Regression tests: each of these raised ``ValueError`` before, and callers had to catch
``(DissensusError, ValueError)`` to report it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dissensus.acceptance import select_threshold
from dissensus.convert.llmbar import JudgeAnswer, LLMBarItem, item_to_panel, item_to_votes
from dissensus.convert.varierrnli import item_to_panel as varierrnli_panel
from dissensus.errors import ConfigError, DissensusError, InputError
from dissensus.pipeline import decide, policy_from_dict
from dissensus.pipeline.followup import live_reask
from dissensus.pipeline.steps import FollowupStep
from dissensus.states import Thresholds, read_from_matrix
from dissensus.store import Journal
from pipeline_cases import agent_models, as_panel, panel


def _not_a_value_error(exc: pytest.ExceptionInfo[DissensusError]) -> None:
    assert not isinstance(exc.value, ValueError)


@pytest.mark.parametrize(
    "meta",
    [
        {"question": ""},  # no question
        {"options": {"1": "only one option"}},  # one option
    ],
)
def test_a_live_re_ask_without_question_or_two_options_is_an_input_error(
    meta: dict[str, Any],
) -> None:
    case = as_panel(panel("p", ["1", "2"], meta=meta))
    with pytest.raises(InputError, match=r"needs meta\.question") as exc:
        asyncio.run(live_reask(case, None, perturbation="swap_order", context=""))  # type: ignore[arg-type]
    _not_a_value_error(exc)


def test_the_pipeline_records_a_failed_re_ask_and_goes_on(tmp_path: Path) -> None:
    """The engine catches only DissensusError around the re-ask: the case is recorded."""
    models = agent_models(tmp_path / "models", {"a1": "1", "a2": "1", "a3": "1"})
    policy = policy_from_dict(
        {
            "reading": {"similarity": "tfidf", "theta_s": 0.3},
            "seek_context": {"use_recorded": False, "models": models},
        }
    )
    journal = Journal(":memory:")
    record = decide(
        as_panel(panel("p", ["1", "1", "1"], meta={"question": ""})),
        policy,
        journal=journal,
        run_id="r",
    )
    event = journal.get("r", "case/1/followup0")
    assert event is not None
    step = FollowupStep.model_validate(event.payload)
    assert step.source == "none" and step.answers == {}
    assert step.why is not None and step.why.startswith("re-ask failed: case p: a live re-ask")
    assert record.id == "p" and not record.auto


def test_read_from_matrix_rejects_a_bad_matrix_with_input_error() -> None:
    case = as_panel(panel("p", ["1", "2"]))
    with pytest.raises(InputError, match="shape") as exc:
        read_from_matrix(case, [[1.0]], "m", Thresholds(theta_s=0.5))
    _not_a_value_error(exc)
    with pytest.raises(InputError, match="non-finite") as exc:
        read_from_matrix(case, [[1.0, float("nan")], [0.0, 1.0]], "m", Thresholds(theta_s=0.5))
    _not_a_value_error(exc)


def test_select_threshold_errors_are_config_and_input_errors() -> None:
    with pytest.raises(ConfigError, match="target and delta") as cfg:
        select_threshold([0.5], [True], target=1.0, delta=0.1, min_accepted=1)
    _not_a_value_error(cfg)
    with pytest.raises(InputError, match="differ in length") as inp:
        select_threshold([0.5, 0.6], [True], target=0.9, delta=0.1, min_accepted=1)
    _not_a_value_error(inp)


def _item(answers: dict[str, JudgeAnswer]) -> LLMBarItem:
    return LLMBarItem(
        subset="Natural", index=0, strategy="CoT", input="q", output_1="a", output_2="b",
        gold="1", answers=answers, swapped={}, dataset_file="Natural/dataset.json",
    )  # fmt: skip


def test_converters_reject_an_item_with_input_error() -> None:
    one = _item({"GPT-4": JudgeAnswer(decision="1", reasoning="because")})
    with pytest.raises(InputError, match="1 judge"):
        item_to_panel(one)
    with pytest.raises(InputError, match="1 judge"):
        item_to_votes(one)
    broken = _item(
        {
            "GPT-4": JudgeAnswer(decision="1", reasoning="\ud800"),
            "PaLM2": JudgeAnswer(decision="1", reasoning="fine"),
        }
    )
    with pytest.raises(InputError) as exc:  # text that is not valid Unicode
        item_to_panel(broken)
    _not_a_value_error(exc)
    with pytest.raises(InputError, match="expected an object") as exc:
        varierrnli_panel("k", ["not", "an", "item"])
    _not_a_value_error(exc)


_DATA_PANEL: dict[str, Any] = {
    "id": "p1",
    "outputs": [
        {"agent": "a", "decision": "A", "reasoning": "the first reason"},
        {"agent": "b", "decision": "B", "reasoning": "another reason"},
    ],
}


def test_read_panel_and_route_take_the_data_a_record_holds() -> None:
    """``read_panel`` takes a panel's JSON data and ``route`` a reading's, as ``decide`` does."""
    from dissensus.states import get_backend, read_panel, read_panels, route

    backend = get_backend("tfidf")
    from_data = read_panel(_DATA_PANEL, backend)
    from_model = read_panel(as_panel(_DATA_PANEL), backend)
    assert from_data == from_model
    assert read_panels([_DATA_PANEL], backend) == [from_model]
    assert route(from_data.model_dump(mode="json"), None) == route(from_model, None)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (5, "a panel is a Panel or a mapping, not int"),
        ("p1", "a panel is a Panel or a mapping, not str"),
        ({"id": "p1"}, "invalid panel: outputs: Field required"),
        ({**_DATA_PANEL, "outputs": [{"agent": "a"}]}, "invalid panel: outputs.0.decision"),
        (
            {**_DATA_PANEL, "outputs": [_DATA_PANEL["outputs"][0]] * 2},
            "invalid panel: outputs: duplicate agent id",
        ),
    ],
)
def test_read_panel_of_a_wrong_value_is_an_input_error(value: object, message: str) -> None:
    from dissensus.states import get_backend, read_panel

    with pytest.raises(InputError, match=message):
        read_panel(value, get_backend("tfidf"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("reading", "meta", "message"),
    [
        ("CA", None, "a reading is a Reading or a mapping, not str"),
        ({"state": "CA"}, None, "invalid reading: id: Field required"),
        (None, "question", "panel_meta is a mapping or None, not str"),
    ],
)
def test_route_of_a_wrong_value_is_an_input_error(
    reading: object, meta: object, message: str
) -> None:
    from dissensus.states import get_backend, read_panel, route

    if reading is None:
        reading = read_panel(_DATA_PANEL, get_backend("tfidf"))
    with pytest.raises(InputError, match=message):
        route(reading, meta)  # type: ignore[arg-type]
