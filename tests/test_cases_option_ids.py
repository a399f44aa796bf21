"""``option_ids`` gives the ids ``CaseSpec.from_meta`` would, without building the case."""

from __future__ import annotations

from typing import Any

import pytest

from dissensus.cases import CaseSpec, option_ids


@pytest.mark.parametrize(
    "meta",
    [
        {},
        None,
        [],
        {"options": ["a", "b", "a"]},
        {"options": [{"id": 1, "text": "x"}, {"text": "y"}, {"id": None}, "z"]},
        {"options": {"k": "v", "j": "w"}},
        {"options": "not a list"},
        {"options": [{"id": "x"}, {"id": "x", "label": "again"}]},
        {"output_1": "a", "output_2": "b", "source": "llmbar"},
        {"output_1": "a"},
        {"options": ["1", "2"], "option_labels": ["first", "second"], "utilities": {"a": 2}},
    ],
)
def test_same_ids_as_the_case(meta: Any) -> None:
    assert option_ids(meta) == CaseSpec.from_meta(meta).option_ids()
