"""Score families: the choice keeps the guarantee, a file decides with the family it names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.acceptance import Candidate

REPO = Path(__file__).resolve().parent.parent


def _case(share: float, stable: float, right_label: str = "a") -> list[Candidate]:
    return [
        Candidate(
            label="a",
            features={"score.votes": share, "score.votes_both": share, "cand.stable_share": stable},
        ),
        Candidate(
            label="b",
            features={
                "score.votes": 1 - share,
                "score.votes_both": 1 - share,
                "cand.stable_share": 0.0,
            },
        ),
    ]


def test_family_score_takes_the_best_candidate_first_on_ties() -> None:
    from dissensus.acceptance.families import family_score

    assert family_score("votes", _case(0.7, 0.0)) == ("a", 0.7)
    assert family_score("votes", _case(0.2, 0.0)) == ("b", 0.8)
    assert family_score("votes", _case(0.5, 0.0)) == ("a", 0.5)
    assert family_score("votes", []) == (None, 0.0)


def test_bonferroni_runs_each_competitor_at_delta_over_f_and_picks_the_most_accepted() -> None:
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE
    from dissensus.acceptance.families import select_family

    rng = np.random.default_rng(1)
    n = 400
    right = rng.uniform(0, 1, n) < 0.85
    # "votes" ranks the right answers high; "order_stable" is noise; "guard" is constant.
    scores: dict[str, list[tuple[str | None, float]]] = {
        "votes": [("g", float(0.5 + 0.5 * r * rng.uniform(0.5, 1))) for r in right],
        "order_stable": [("g", float(rng.uniform(0, 1))) for _ in right],
        "guard": [("g", 0.3)] * n,
    }
    golds = ["g" if r else "x" for r in right]
    chosen, choice, figures = select_family(
        scores, golds, target=0.9, delta=0.1, min_accepted=30, grid=DEFAULT_SEQUENCE,
        compete=["votes", "order_stable", "guard"],
    )  # fmt: skip
    by = {f.family: f for f in figures}
    assert chosen == "votes" and choice.accepted == by["votes"].accepted > 0
    assert not by["guard"].eligible
    assert by["votes"].delta == by["order_stable"].delta == 0.05  # two eligible, equal shares
    assert by["votes"].accepted >= by["order_stable"].accepted


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(60, 400),
    rule=st.sampled_from(["bonferroni", "split"]),
)
def test_the_chosen_threshold_passes_the_bound_at_its_level(seed: int, n: int, rule: str) -> None:
    from dissensus.acceptance import clopper_pearson_upper
    from dissensus.acceptance.bound import DEFAULT_SEQUENCE
    from dissensus.acceptance.families import select_family

    rng = np.random.default_rng(seed)
    right = rng.uniform(0, 1, n) < rng.uniform(0.6, 1.0)
    scores: dict[str, list[tuple[str | None, float]]] = {
        f: [("g", float(np.clip(r * w + rng.normal(0, 0.3), 0, 1))) for r in right]
        for f, w in (("learned", 0.5), ("votes_both", 0.2), ("guard", 0.0))
    }
    golds = ["g" if r else "x" for r in right]
    chosen, choice, figures = select_family(
        scores, golds, target=0.8, delta=0.1, min_accepted=20, grid=DEFAULT_SEQUENCE,
        rule=rule,  # type: ignore[arg-type]
        compete=["learned", "votes_both", "guard"],
    )  # fmt: skip
    if choice.threshold is None:
        return
    level = 0.1 if rule == "split" else next(f.delta for f in figures if f.family == chosen)
    assert level <= 0.1
    wrong = choice.accepted - choice.correct
    assert clopper_pearson_upper(wrong, choice.accepted, level) <= 0.2 + 1e-12


def test_a_file_decides_with_the_family_it_names() -> None:
    from dissensus.acceptance import apply_acceptance, calibrate

    rng = np.random.default_rng(0)
    shares = rng.uniform(0.3, 1.0, 200)
    cases = [_case(float(s), float(s)) for s in shares]
    golds = ["a" if rng.uniform() < s else "b" for s in shares]
    acc = calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=20, family="votes")
    assert acc.family == "votes" and acc.family_rule == "given"
    assert [f.family for f in acc.families if f.competing] == ["votes"]
    verdict = apply_acceptance(acc, _case(0.95, 0.0))
    assert verdict.family == "votes" and verdict.score == 0.95 and verdict.decision == "a"
    both = calibrate(cases, golds, target=0.8, delta=0.1, min_accepted=20)
    assert both.family in ("learned", "votes_both") and both.family_rule == "bonferroni"
    levels = {f.family: f.delta for f in both.families if f.competing}
    assert levels == pytest.approx({"learned": 0.09, "votes_both": 0.01})


def test_c_is_chosen_from_the_grid_by_grouped_cross_validation() -> None:
    from dissensus.acceptance.fit import C_GRID, choose_c

    rng = np.random.default_rng(0)
    owner = np.repeat(np.arange(100), 2)
    z = rng.normal(size=(200, 40))
    y = (z[:, 0] + rng.normal(0, 2, 200) > 0).astype(int)
    c = choose_c(z, y, owner)
    assert c in C_GRID and c == choose_c(z, y, owner)
    assert choose_c(z[:20], y[:20], owner[:20]) == 1.0  # too few cases: no inner CV


def _all_right(n: int, rng: np.random.Generator, *, votes_vary: bool) -> list[list[Candidate]]:
    """``n`` cases of one candidate each (every answer right: the model's label is
    constant), whose vote counts vary or not."""
    out = []
    for _ in range(n):
        share = float(rng.uniform(0.5, 1.0)) if votes_vary else 1.0
        out.append(
            [
                Candidate(
                    label="a",
                    features={
                        "score.votes": share,
                        "score.votes_both": share,
                        "cand.stable_share": 1.0,
                        "cand.share": share,
                    },
                )
            ]
        )
    return out


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(40, 200))
def test_a_constant_learned_score_is_ineligible_as_every_constant_family(seed: int, n: int) -> None:
    """Calibrated on cases whose every answer is right, the model is a constant (every
    coefficient 0): it was still eligible, chosen, and accepted every case."""
    from dissensus.acceptance import calibrate

    rng = np.random.default_rng(seed)
    acc = calibrate(
        _all_right(n, rng, votes_vary=False), ["a"] * n, target=0.9, delta=0.1, min_accepted=10
    )
    by = {f.family: f for f in acc.families}
    assert all(not m.coef or set(m.coef) == {0.0} for m in acc.models)
    assert not by["learned"].eligible and not by["votes_both"].eligible
    assert not any(f.competing for f in acc.families)
    assert acc.threshold is None and acc.calibration_accepted == 0
    assert "constant" in acc.threshold_reason and "learned, votes_both" in acc.threshold_reason
    # Named alone, a constant family is no more eligible.
    alone = calibrate(
        _all_right(n, rng, votes_vary=False), ["a"] * n, target=0.9, delta=0.1,
        min_accepted=10, family="learned",
    )  # fmt: skip
    assert alone.threshold is None and "the competing family (learned)" in alone.threshold_reason
    # Where a counting family varies, it competes alone and is chosen.
    varied = calibrate(
        _all_right(n, rng, votes_vary=True), ["a"] * n, target=0.9, delta=0.1, min_accepted=10
    )
    vby = {f.family: f for f in varied.families}
    assert not vby["learned"].eligible and not vby["learned"].competing
    assert vby["votes_both"].eligible and varied.family == "votes_both"
    assert vby["votes_both"].delta == pytest.approx(0.1)  # the only eligible competitor


def test_calibrate_acceptance_warns_when_every_family_is_constant(tmp_path: Path) -> None:
    """On panels whose every answer is right (three solvers agreeing on the gold answer,
    as unanimous and correct GSM8K panels), the file accepts nothing and says why (the
    constant model was chosen and accepted every case, with no warning)."""
    from cli_helpers import cli

    rng = np.random.default_rng(0)
    words = [
        "add",
        "the",
        "two",
        "sums",
        "then",
        "carry",
        "one",
        "and",
        "subtract",
        "half",
        "of",
        "the",
        "remainder",
    ]
    lines = []
    for k in range(60):
        answer = str(int(rng.integers(1, 500)))
        outputs = [
            {
                "agent": agent,
                "family": agent,
                "decision": answer,
                "reasoning": " ".join(rng.choice(words, 12)) + f" so the answer is {answer}",
            }
            for agent in ("m1", "m2", "m3")
        ]
        lines.append(json.dumps({"id": str(k), "meta": {"gold": answer}, "outputs": outputs}))
    labelled = tmp_path / "right.jsonl"
    labelled.write_text("\n".join(lines) + "\n")
    (tmp_path / "p.yaml").write_text("reading:\n  similarity: tfidf\nguard:\n  enabled: false\n")
    res = cli(
        "calibrate-acceptance", labelled, "--policy", tmp_path / "p.yaml",
        "--target-precision", "0.8", "--min-accepted", "10",
        "--out", tmp_path / "A.json", "--json",
    )  # fmt: skip
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["calibration_n"] == 60
    assert summary["threshold"] is None and summary["calibration_accepted"] == 0
    by = {f["family"]: f for f in summary["families"]}
    assert not by["learned"]["eligible"] and not by["learned"]["competing"]
    assert "warning: the file accepts nothing: no eligible score family" in res.err
