"""Learned acceptance: the bound, the threshold choice, the file's hash (property tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import (
    AcceptanceFile,
    Candidate,
    apply_acceptance,
    calibrate,
    clopper_pearson_upper,
    load_acceptance,
    save_acceptance,
    select_threshold,
)
from dissensus.errors import ConfigError


@given(st.integers(1, 300), st.data(), st.floats(0.01, 0.5))
def test_cp_upper_monotone_in_errors_and_covers_the_rate(
    n: int, data: st.DataObject, delta: float
) -> None:
    k = data.draw(st.integers(0, n - 1))
    u = clopper_pearson_upper(k, n, delta)
    assert k / n <= u <= 1.0
    assert clopper_pearson_upper(k + 1, n, delta) >= u
    # More cases at the same error count: a tighter bound.
    assert clopper_pearson_upper(k, n + 1, delta) <= u
    # A smaller delta (more confidence) never gives a smaller bound.
    assert clopper_pearson_upper(k, n, delta / 2) >= u


def test_cp_upper_known_value() -> None:
    # Zero errors in n: the bound is 1 - delta ** (1 / n).
    assert clopper_pearson_upper(0, 30, 0.1) == pytest.approx(1 - 0.1 ** (1 / 30))


cases = st.lists(
    st.tuples(st.floats(0, 1), st.booleans(), st.sampled_from(["a", "b"])), min_size=0, max_size=200
)


@given(
    cases,
    st.sampled_from([0.7, 0.8, 0.9]),
    st.sampled_from([0.05, 0.1, 0.2]),
    st.integers(1, 40),
    st.booleans(),
    st.sampled_from([None, 50]),
)
def test_selected_threshold_satisfies_the_bound(
    rows: list[tuple[float, bool, str]],
    target: float,
    delta: float,
    min_accepted: int,
    stratified: bool,
    grid: int | None,
) -> None:
    scores = [s for s, _, _ in rows]
    correct = [c for _, c, _ in rows]
    strata = [g for _, _, g in rows] if stratified else None
    choice = select_threshold(
        scores,
        correct,
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=strata,
        grid=grid,
    )
    if choice.threshold is None:
        assert choice.accepted == 0
        return
    accepted = [c for s, c in zip(scores, correct, strict=True) if s >= choice.threshold]
    assert len(accepted) == choice.accepted >= min_accepted
    errors = len(accepted) - sum(accepted)
    assert clopper_pearson_upper(errors, len(accepted), delta) <= 1 - target + 1e-12
    if strata is not None:
        for fig in choice.strata:
            if fig.accepted >= min_accepted:
                assert fig.error_upper <= 1 - target + 1e-12


def test_all_right_accepts_everything_and_all_wrong_nothing() -> None:
    scores = [i / 100 for i in range(100)]
    assert (
        select_threshold(
            scores, [True] * 100, target=0.9, delta=0.1, min_accepted=30, grid=None
        ).threshold
        == 0.0
    )
    none = select_threshold(scores, [False] * 100, target=0.9, delta=0.1, min_accepted=30)
    assert none.threshold is None
    assert "no threshold" in none.reason


def test_sequence_stops_at_the_first_failure() -> None:
    # Confident errors first: fixed-sequence testing stops there, though the whole set is 90% right.
    scores = [1.0 - i / 1000 for i in range(200)]
    correct = [i >= 20 for i in range(200)]
    assert (
        select_threshold(
            scores, correct, target=0.85, delta=0.1, min_accepted=10, grid=None
        ).threshold
        is None
    )


def _toy(n: int = 120) -> tuple[list[list[Candidate]], list[str]]:
    cases, golds = [], []
    for i in range(n):
        strong = i % 4 != 0
        gold = "1" if i % 2 else "2"
        other = "2" if gold == "1" else "1"
        voted = gold if strong or i % 8 == 0 else other
        cases.append(
            [
                Candidate(
                    label=gold,
                    features={"agent.x.for": float(voted == gold), "cand.strong": float(strong)},
                ),
                Candidate(
                    label=other, features={"agent.x.for": float(voted == other), "cand.strong": 0.0}
                ),
            ]
        )
        golds.append(gold)
    return cases, golds


def test_file_round_trip_and_tampering_is_refused(tmp_path: Path) -> None:
    cases, golds = _toy()
    acc = calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=10)
    path = tmp_path / "ACCEPT.json"
    saved = save_acceptance(acc, path)
    loaded = load_acceptance(path)
    assert loaded.sha256 == saved.sha256 and len(loaded.sha256) == 64
    assert apply_acceptance(loaded, cases[1]).file_sha256 == saved.sha256
    data = json.loads(path.read_text())
    data["threshold"] = 0.123
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match="sha256"):
        load_acceptance(path)


@settings(max_examples=5)
@given(st.sampled_from(["threshold", "target_precision", "delta", "calibration_n", "features"]))
def test_any_tampered_field_is_refused(
    tmp_path_factory: pytest.TempPathFactory, field: str
) -> None:
    cases, golds = _toy(60)
    path = tmp_path_factory.mktemp("acc") / "ACCEPT.json"
    save_acceptance(calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=10), path)
    data = json.loads(path.read_text())
    value = data[field]
    data[field] = [*value, "x"] if isinstance(value, list) else (value or 0) + 0.5
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError):
        load_acceptance(path)


def test_no_pickle_and_versions_recorded(tmp_path: Path) -> None:
    cases, golds = _toy()
    saved = save_acceptance(
        calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=10), tmp_path / "a.json"
    )
    raw = json.loads((tmp_path / "a.json").read_text())
    assert set(raw["model"]) >= {"coef", "intercept", "features", "mean", "scale"}
    assert "scikit-learn" in raw["libraries"] and "scipy" in raw["libraries"]
    assert isinstance(saved, AcceptanceFile)


def test_no_threshold_accepts_nothing_with_the_reason() -> None:
    cases, golds = _toy(20)
    acc = calibrate(cases, golds, target=0.9, delta=0.1, min_accepted=30)
    assert acc.threshold is None
    verdict = apply_acceptance(acc, cases[0])
    assert not verdict.accepted and "accepts nothing" in verdict.reason
