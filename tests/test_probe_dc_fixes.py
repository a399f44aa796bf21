"""Fixes for defects a probe of ``negotiate`` / ``verify`` / ``deliberate`` found (each
test failed before its fix).

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

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli.common import shown_number
from dissensus.dci.task import parse_task
from dissensus.errors import ConfigError

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
    assert info.value.field == "options[1].id"


def test_a_task_file_with_a_repeated_option_id_is_exit_2(tmp_path: Path) -> None:
    task = tmp_path / "dup.yaml"
    task.write_text("question: q\noptions:\n  - {id: a, text: x}\n  - {id: a, text: y}\n")
    result = cli("deliberate", task)
    assert result.code == 2
    assert "options[1].id" in result.err and "duplicate option id" in result.err
