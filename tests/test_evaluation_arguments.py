"""The evaluation scripts refuse a bad option value in one line (argparse's usage error,
exit 2) before anything runs: no traceback, no run that never ends, no figures lost at
the end of a long run because the file they go to cannot be written.

Each script's ``main`` is called in this process (the checks come before any data is
read, so this takes seconds); ``--data`` names a folder that does not exist, so a value
that slipped through would end in the data check's message, not the option's.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
EVALUATION = REPO / "evaluation"

READS_DATA = {
    "acceptance.py",
    "acceptance_families.py",
    "acceptance_loop.py",
    "acceptance_watch.py",
    "guard_llmbar.py",
    "guard_zeroeval.py",
    "pipeline_llmbar.py",
    "states_faithfulness.py",
    "static_distillation.py",
}

# (script, the bad option and value, what the refusal says about it). "{tmp}" is a
# temporary folder holding a file "file" (so "{tmp}/file/x" has no folder to go in).
BAD = [
    ("acceptance.py", ["--splits", "0"], "argument --splits: must be at least 1, not 0"),
    ("acceptance.py", ["--limit", "0"], "argument --limit: must be at least 1, not 0"),
    ("acceptance_families.py", ["--splits", "-2"], "argument --splits: must be at least 1"),
    ("acceptance_families.py", ["--cache", "{tmp}/file/c"], "argument --cache: cannot use"),
    ("acceptance_loop.py", ["--round", "0"], "argument --round: must be at least 1, not 0"),
    ("acceptance_loop.py", ["--max-reviews", "-1"], "argument --max-reviews: must be at least 0"),
    ("acceptance_loop.py", ["--plot", "{tmp}/nowhere/x.png"], "argument --plot: no directory"),
    ("acceptance_watch.py", ["--streams", "0"], "argument --streams: must be at least 1"),
    ("acceptance_watch.py", ["--max-audits", "0"], "argument --max-audits: must be at least 1"),
    ("acceptance_watch.py", ["--cache", "{tmp}/file/c"], "argument --cache: cannot use"),
    ("concord_eval.py", ["--runs", "0"], "argument --runs: must be at least 1, not 0"),
    ("concord_eval.py", ["--sweep-runs", "0"], "argument --sweep-runs: must be at least 1"),
    ("concord_eval.py", ["--floor", "2"], "argument --floor: must lie in [0, 1], not 2"),
    ("concord_eval.py", ["--floor", "nan"], "argument --floor: not a finite number: nan"),
    ("concord_eval.py", ["--sweep", "0.5,abc"], "argument --sweep: not a number: 'abc'"),
    ("concord_eval.py", ["--sweep", ","], "argument --sweep: no number given"),
    ("guard_simulation.py", ["--cases", "-3"], "argument --cases: must be at least 1, not -3"),
    ("guard_simulation.py", ["--voters", "1"], "argument --voters: must be at least 2, not 1"),
    ("guard_simulation.py", ["--seed", "-1"], "argument --seed: must be at least 0, not -1"),
    ("guard_simulation.py", ["--beta", "nan"], "argument --beta: not a finite number: nan"),
    ("guard_simulation.py", ["--plot", "{tmp}/nowhere/g.png"], "argument --plot: no directory"),
    ("guard_simulation.py", ["--json", "{tmp}/nowhere/g.json"], "argument --json: no directory"),
    ("guard_simulation.py", ["--json", "{tmp}"], "argument --json: {tmp} is a directory"),
    ("guard_llmbar.py", ["--beta", "-1"], "argument --beta: must be >= 0, not -1"),
    ("guard_llmbar.py", ["--json", "{tmp}/nowhere/g.json"], "argument --json: no directory"),
    ("guard_zeroeval.py", ["--beta", "inf"], "argument --beta: not a finite number: inf"),
    ("guard_zeroeval.py", ["--limit", "3"], "argument --limit: must be at least 4, not 3"),
    ("guard_zeroeval.py", ["--seeds", "-1"], "argument --seeds: must be at least 0, not -1"),
    ("pipeline_llmbar.py", ["--policy", "{tmp}/none.yaml"], "argument --policy: no file"),
    (
        "pipeline_llmbar.py",
        ["--write-calibration", "{tmp}/nowhere/r.json"],
        "argument --write-calibration: no directory",
    ),
    ("states_faithfulness.py", ["--quantile", "2"], "argument --quantile: must lie in [0, 1]"),
    ("states_faithfulness.py", ["--theta-a", "nan"], "argument --theta-a: not a finite number"),
    ("static_distillation.py", ["--work", "{tmp}/file/w"], "argument --work: cannot use"),
]


def load(script: str) -> ModuleType:
    """The script as a module (its own folder on the path, as when it is run)."""
    name = f"_evaluation_{Path(script).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EVALUATION / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def refusal(script: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        load(script).main(argv)
    out, err = capsys.readouterr()
    assert exited.value.code == 2, err
    assert out == "" and "Traceback" not in err
    return err


@pytest.mark.parametrize(("script", "option", "said"), BAD)
def test_a_bad_option_value_is_refused_before_anything_runs(
    script: str,
    option: list[str],
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "file").write_text("", encoding="utf-8")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in option]
    if script in READS_DATA:
        argv += ["--data", str(tmp_path / "no-data")]
    err = refusal(script, argv, capsys)
    last = err.splitlines()[-1]
    assert "error: " + said.replace("{tmp}", str(tmp_path)) in last, err
    assert "data not found" not in err


def test_every_script_with_a_number_option_is_covered() -> None:
    scripts = {
        p.name
        for p in EVALUATION.glob("*.py")
        if not p.name.startswith("_")
        and re.search(r"[(,\s]type=(int|float)\b", p.read_text(encoding="utf-8"))
    }
    assert scripts == set(), f"options read with a bare int/float: {sorted(scripts)}"


def test_a_policy_that_does_not_load_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], shared_data: Path
) -> None:
    """A policy file that exists but is not a policy: the loader's message, one line."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("reading: 5\n", encoding="utf-8")
    err = refusal(
        "pipeline_llmbar.py", ["--policy", str(policy), "--data", str(shared_data)], capsys
    )
    assert len(err.splitlines()) == 1, err
    assert f": --policy: {policy}: field 'reading'" in err


def _row(accuracy: float | None) -> dict[str, Any]:
    gap = None if accuracy is None else 0.05
    conf = None if accuracy is None else accuracy - 0.05
    return {"method": "majority", "accuracy": accuracy, "confidence": conf, "gap": gap}


def test_guard_zeroeval_prints_an_empty_stratum() -> None:
    """With a small --limit a test part can have no contested case: that stratum's row
    says so instead of the run ending in a traceback after every split was computed."""
    strata_table = load("guard_zeroeval.py").strata_table
    rows = [
        {
            "methods": [_row(0.9)],
            "stratum_cases": {"agree": 2, "contested": 0},
            "strata": {"agree": [_row(1.0)], "contested": [_row(None)]},
        },
        {
            "methods": [_row(0.8)],
            "stratum_cases": {"agree": 1, "contested": 1},
            "strata": {"agree": [_row(0.5)], "contested": [_row(1.0)]},
        },
    ]
    lines = strata_table(rows[:1]).splitlines()
    assert lines[-1] == "| contested (< 2/3) | 0 | majority | - | - | - |"
    assert lines[-2] == "| agree (>= 2/3) | 2 | majority | 1.000 | 0.950 | 0.050 |"
    # Over several parts, the figures are of the parts the stratum has cases in.
    lines = strata_table(rows).splitlines()
    assert (
        lines[-1] == "| contested (< 2/3) | 0.5 | majority | 1.000 | 0.950 | 0.050 (0.050-0.050) |"
    )


def test_acceptance_watch_review_loop_prints_the_same_twice(
    shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs of the review-loop table print the same text: the temporary folder its
    files are written in, and their sha256 (which records it), are not printed."""
    if not (shared_data / "llmbar").is_dir():
        pytest.skip(f"LLMBar data not found at {shared_data / 'llmbar'}")
    main = load("acceptance_watch.py").main
    runs = []
    for _ in range(2):
        assert main(["--sets", "loop", "--data", str(shared_data)]) == 0
        out = capsys.readouterr().out
        runs.append(re.sub(r"^\(\d+s\)$", "(time)", out, flags=re.M))
    assert runs[0] == runs[1]
    assert "learned acceptance -> TMP/before.json" in runs[0]
    assert "sha256" not in runs[0]
    assert "labelled set only (before)                   |               102 |" in runs[0]
