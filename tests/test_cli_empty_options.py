"""An option or source given an empty value (an unset shell variable) is refused, exit 2,
naming it: never taken for the option left out (the default rules, no calibration, the
bundled scripted model, the current directory), which ran and exited 0."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import cli

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "examples" / "dci" / "architecture.yaml"


def _panels(tmp_path: Path) -> Path:
    path = tmp_path / "p.jsonl"
    outputs = [
        {"agent": "a", "decision": "x", "reasoning": "same words here"},
        {"agent": "b", "decision": "y", "reasoning": "other words there"},
    ]
    path.write_text(json.dumps({"id": "c1", "outputs": outputs}) + "\n", encoding="utf-8")
    return path


def _votes(tmp_path: Path) -> Path:
    path = tmp_path / "v.jsonl"
    votes = [
        {"agent": a, "answer": "1", "evidence_source": f"s{a}", "evidence_present": True}
        for a in ("a", "b")
    ]
    path.write_text(json.dumps({"id": "c1", "votes": votes}) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(
    ("make", "args", "option"),
    [
        (_panels, ["route", "IN", "--similarity", "tfidf", "--json", "--rules", "V"], "--rules"),
        (_panels, ["route", "IN", "--json", "--similarity", "V"], "--similarity"),
        (
            _panels,
            ["calibrate-thresholds", "IN", "--quantile", "0.5", "--similarity", "V"],
            "--similarity",
        ),
        (_votes, ["vote", "IN", "--json", "--calibration", "V"], "--calibration"),
        (_votes, ["vote", "IN", "--json", "--verifier", "V"], "--verifier"),
        (None, ["deliberate", str(TASK), "--json", "--model", "V"], "--model"),
    ],
)
def test_an_empty_option_is_refused(
    tmp_path: Path, make: object, args: list[str], option: str, value: str
) -> None:
    source = make(tmp_path) if callable(make) else None
    argv = [str(source) if a == "IN" else value if a == "V" else a for a in args]
    res = cli(*argv, env={"DISSENSUS_MODEL": None})
    assert res.code == 2, res
    assert res.out == ""
    lines = res.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.err
    assert f"{option} is empty" in lines[0]


@pytest.mark.parametrize("converter", ["llmbar", "zeroeval"])
def test_an_empty_source_directory_is_not_the_current_one(tmp_path: Path, converter: str) -> None:
    # A directory a converter would read: two ZeroEval result files.
    for model in ("m1", "m2"):
        item = {"session_id": "s1", "question": "q", "output": ["18"], "answer": "18"}
        (tmp_path / f"{model}.json").write_text(json.dumps([item]), encoding="utf-8")
    res = cli("convert", converter, "", cwd=tmp_path)
    assert res.code == 2, res
    assert res.out == ""
    assert res.err.startswith("error: the input is an empty path"), res.err
    assert len(res.err.splitlines()) == 1
