"""Regression tests of a robustness probe of the command line: huge YAML integers,
oversized or special configuration files, full disks, journal sidecars and devices,
deeply nested journal payloads. Every failure is one line with its documented code."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from pipeline_cases import panel, write_jsonl

HUGE = "1" + "0" * 5000


def _one_line(err: str) -> None:
    assert "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: "), err


@pytest.mark.parametrize("where", ["policy", "script", "rules", "problem", "task", "fake-llm"])
def test_a_yaml_integer_too_long_to_convert_is_one_line(tmp_path: Path, where: str) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("a", ["1", "1"])])
    bad = tmp_path / "bad.yaml"
    j = tmp_path / "j.sqlite"
    if where == "policy":
        bad.write_text(f"reading:\n  similarity: tfidf\nconcurrency: {HUGE}\n")
        args: list[str | Path] = ["decide", inp, "--policy", bad, "--journal", j]
    else:
        bad.write_text(f"rules: []\ndefault: x\nn: {HUGE}\n")
        args = {
            "script": ["decide", inp, "--model", f"scripted:{bad}", "--journal", j],
            "rules": ["route", inp, "--rules", bad],
            "problem": ["negotiate", bad],
            "task": ["deliberate", bad],
            "fake-llm": ["fake-llm", "--script", bad, "--port", "0"],
        }[where]
    res = cli(*args)
    assert res.code == 2, res.err
    _one_line(res.err)
    assert "4300 digits" in res.err and "bad.yaml" in res.err
    if where in ("policy", "script", "rules"):
        assert "line 3" in res.err
