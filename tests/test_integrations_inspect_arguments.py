"""The Inspect reducer's arguments of the wrong kind are refused naming the argument.

``dissensus_reducer(graders=5)`` failed with Python's ``TypeError: 'int' object is not
iterable``, ``acceptance=5`` with ``expected str, bytes or os.PathLike object``, a
mapping of graders with an ``AttributeError``, and a ``shift_every`` of ``-1`` or
``2.5`` was taken without a word when no journal was given; a file name over the
system's length limit was Python's ``OSError: File name too long``. Each is a
:class:`~dissensus.errors.ConfigError` naming the argument when the reducer is made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

POLICY = {"reading": {"similarity": "tfidf", "theta_s": 0.3}}


@pytest.fixture(autouse=True)
def _inspect() -> None:
    pytest.importorskip("inspect_ai")


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"graders": 5}, "graders"),
        ({"graders": {"g1": 1, "g2": 2}}, "graders"),
        ({"graders": (g for g in ("g1", "g2"))}, "graders"),
        ({"options": 5}, "options"),
        ({"options": (o for o in ("C", "I"))}, "options"),
        ({"acceptance": 5}, "acceptance"),
        ({"acceptance": b"acceptance.json"}, "acceptance"),
        ({"guard_calibration": 5}, "guard_calibration"),
        ({"acceptance": "a" * 5000}, "acceptance"),  # a name the system refuses
        ({"guard_calibration": "a" * 5000}, "guard_calibration"),
        ({"shift_every": -1}, "shift_every"),
        ({"shift_every": 2.5}, "shift_every"),
        ({"shift_every": "100"}, "shift_every"),
    ],
)
def test_an_argument_of_the_wrong_kind_is_a_config_error_naming_it(
    arguments: dict[str, Any], field: str
) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError) as err:
        dissensus_reducer(policy=POLICY, **arguments)
    assert err.value.field == field


def test_lists_and_tuples_are_taken(tmp_path: Path) -> None:
    from dissensus.integrations.inspect import dissensus_reducer

    dissensus_reducer(graders=("g1", "g2"), options=("C", "I"), policy=POLICY, shift_every=0)
    dissensus_reducer(graders=["g1", "g2"], policy=POLICY, journal=str(tmp_path / "j.sqlite"))


def test_a_missing_file_is_still_named(tmp_path: Path) -> None:
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError, match="file not found") as err:
        dissensus_reducer(policy=POLICY, acceptance=str(tmp_path / "none.json"))
    assert err.value.field == "acceptance"


@pytest.mark.parametrize("journal", ["", "   "])
def test_an_empty_journal_says_what_leaving_it_out_does_here(journal: str) -> None:
    """An empty ``journal`` (``os.environ.get("JOURNAL", "")``) is refused naming it, and
    the error says that leaving it out gives a journal in memory: it said "leave the
    option out for $DISSENSUS_JOURNAL or ./dissensus-journal.sqlite", the CLI's words,
    which the reducer never reads."""
    from dissensus.errors import ConfigError
    from dissensus.integrations.inspect import dissensus_reducer

    with pytest.raises(ConfigError) as err:
        dissensus_reducer(policy=POLICY, journal=journal)
    assert err.value.field == "journal"
    assert "in memory" in str(err.value)
    assert "DISSENSUS_JOURNAL" not in str(err.value) and "--" not in str(err.value)
