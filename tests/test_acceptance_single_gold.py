"""Every calibration gold one label: the fit reads no ``option=`` feature, and
``calibrate-acceptance`` warns that the guarantee holds only for cases drawn like these.

On LLMBar cases whose gold was always ``"1"``, the model learned ``option=1`` (+1.3) and
``option=2`` (-1.3): it scored every case answered ``"1"`` as right, accepted 146 of 163
ordinary cases, all ``"1"``, at precision 0.54, and nothing was said.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.acceptance import Candidate

AGENTS = ("m1", "m2", "m3")
WORDS = [
    "the",
    "first",
    "output",
    "follows",
    "the",
    "instruction",
    "closely",
    "while",
    "the",
    "second",
    "drifts",
    "away",
]


def _cases(n: int, seed: int) -> list[list[Candidate]]:
    """``n`` two-answer cases (``"1"`` and ``"2"``) with a varying vote share."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(n):
        share = float(rng.choice([1 / 3, 2 / 3, 1.0]))
        cases.append(
            [
                Candidate(label="1", features={"cand.share": share, "option=1": 1.0}),
                Candidate(label="2", features={"cand.share": 1 - share, "option=2": 1.0}),
            ]
        )
    return cases


def _options(features: list[str]) -> list[str]:
    return [f for f in features if f.startswith("option=")]


def test_a_fit_on_one_gold_label_reads_no_option_feature() -> None:
    from dissensus.acceptance.fit import crossfit, fit_model

    cases = _cases(80, seed=0)
    ones = ["1"] * len(cases)
    model = fit_model(cases, ones)
    assert _options(model.features) == [], list(zip(model.features, model.coef, strict=True))
    assert "cand.share" in model.features
    assert all(_options(m.features) == [] for m in crossfit(cases, ones).models)


def test_with_two_gold_labels_the_option_features_are_kept() -> None:
    from dissensus.acceptance.fit import feature_list, fit_model, single_gold

    cases = _cases(80, seed=0)
    assert single_gold(["1"] * 3) == "1"
    mixed = ["1" if k % 3 else "2" for k in range(len(cases))]
    assert single_gold(mixed) is None and single_gold([]) is None
    assert _options(feature_list(cases, mixed)) == ["option=1", "option=2"]
    assert _options(fit_model(cases, mixed).features) == ["option=1", "option=2"]
    assert _options(feature_list(cases)) == ["option=1", "option=2"]  # no golds given


def test_calibrate_on_one_gold_label_keeps_no_option_feature() -> None:
    from dissensus.acceptance import calibrate

    cases = _cases(80, seed=1)
    acc = calibrate(cases, ["1"] * len(cases), target=0.8, delta=0.1, min_accepted=10)
    assert _options(acc.features) == []
    assert all(_options(m.features) == [] for m in acc.models)


def _panel(k: int, gold: str, rng: np.random.Generator) -> dict[str, Any]:
    right = int(rng.integers(1, 4))  # agents answering the gold
    decisions = [gold] * right + ["2" if gold == "1" else "1"] * (3 - right)
    outputs = [
        {
            "agent": agent,
            "family": agent,
            "decision": decision,
            "reasoning": " ".join(rng.choice(WORDS, 10)) + f" so output {decision}",
        }
        for agent, decision in zip(AGENTS, decisions, strict=True)
    ]
    meta = {"gold": gold, "options": ["1", "2"]}
    return {"id": f"c{k}", "meta": meta, "outputs": outputs}


def _calibrate(tmp_path: Path, golds: list[str], *extra: str) -> Any:
    rng = np.random.default_rng(7)
    lines = [json.dumps(_panel(k, g, rng)) for k, g in enumerate(golds)]
    labelled = tmp_path / "cal.jsonl"
    labelled.write_text("\n".join(lines) + "\n")
    policy = tmp_path / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\nguard:\n  enabled: false\n")
    return cli(
        "calibrate-acceptance", labelled, "--policy", policy, "--target-precision", "0.8",
        "--min-accepted", "10", "--out", tmp_path / "A.json", *extra,
    )  # fmt: skip


WARNING = re.compile(r"warning: every gold of the (\d+) calibration case\(s\) is '1': ")


@pytest.mark.parametrize("json_out", [False, True], ids=["table", "json"])
def test_calibrate_acceptance_warns_when_every_gold_is_one_label(
    tmp_path: Path, json_out: bool
) -> None:
    from dissensus.acceptance import load_acceptance

    res = _calibrate(tmp_path, ["1"] * 60, *(["--json"] if json_out else []))
    assert res.code == 0, res.err
    said = [x for x in res.err.splitlines() if x.startswith("warning: every gold")]
    assert len(said) == 1, res.err
    match = WARNING.match(said[0])
    assert match is not None, said[0]
    assert "holds only for cases drawn like the calibration cases" in said[0]
    acc = load_acceptance(tmp_path / "A.json")
    assert int(match[1]) == acc.calibration_n > 0
    if json_out:
        assert json.loads(res.out)["single_gold"] == "1"
    assert _options(acc.features) == [] and all(_options(m.features) == [] for m in acc.models)


def test_calibrate_acceptance_says_nothing_of_the_kind_with_two_gold_labels(
    tmp_path: Path,
) -> None:
    from dissensus.acceptance import load_acceptance

    res = _calibrate(tmp_path, ["1" if k % 2 else "2" for k in range(60)], "--json")
    assert res.code == 0, res.err
    assert "warning: every gold" not in res.err
    assert json.loads(res.out)["single_gold"] is None
    assert _options(load_acceptance(tmp_path / "A.json").features) == ["option=1", "option=2"]


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.sampled_from(["1", "2", "3", "A"]), min_size=1, max_size=4, unique=True),
    n=st.integers(min_value=1, max_value=12),
    gold=st.sampled_from(["1", "2", "3", "A", "none of them"]),
)
def test_one_gold_label_never_leaves_an_option_feature(
    labels: list[str], n: int, gold: str
) -> None:
    from dissensus.acceptance.fit import feature_list

    cases = [
        [
            Candidate(label=x, features={"cand.share": 1.0 / len(labels), f"option={x}": 1.0})
            for x in labels
        ]
        for _ in range(n)
    ]
    assert _options(feature_list(cases, [gold] * n)) == []
    assert feature_list(cases, [gold] * n) == ["cand.share"]
