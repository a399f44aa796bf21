"""The evaluation scripts refuse what they cannot run, in one line, pipeline_llmbar.py
reproduces the figures the docs cite, and guard_zeroeval.py runs on a slice of its data.

Each script runs as ``make eval`` runs it: a subprocess of this interpreter, with this
repository's ``src`` first on ``PYTHONPATH``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EVALUATION = REPO / "evaluation"

# The scripts that read data, and the folders each needs under --data (by default).
NEEDS = {
    "acceptance.py": ["llmbar", "zeroeval-gsm", "varierrnli"],
    "acceptance_families.py": ["llmbar", "zeroeval-gsm", "varierrnli"],
    "acceptance_loop.py": ["llmbar", "zeroeval-gsm"],
    "acceptance_watch.py": ["zeroeval-gsm", "llmbar"],
    "guard_llmbar.py": ["llmbar"],
    "guard_zeroeval.py": ["zeroeval-gsm"],
    "pipeline_llmbar.py": ["llmbar"],
    "states_faithfulness.py": ["llmbar", "varierrnli"],
    "static_backend.py": ["llmbar", "varierrnli"],
    "static_distillation.py": ["llmbar", "varierrnli"],
}

# Options naming things from a fixed list: (script, option, the known names).
NAME_LISTS = [
    ("acceptance.py", "--sets", "llmbar, zeroeval, varierrnli"),
    ("acceptance.py", "--no-reasoning", "llmbar, zeroeval, varierrnli"),
    ("acceptance_families.py", "--sets", "llmbar, zeroeval, varierrnli"),
    ("acceptance_watch.py", "--sets", "zeroeval, llmbar, loop"),
    ("static_backend.py", "--backends", "tfidf, static, minilm"),
]


def run(script: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, str(EVALUATION / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": path},
        check=False,
    )


def test_every_script_reading_data_is_checked() -> None:
    """A new script with a --data option is added to NEEDS (and so to the test below)."""
    reading = {
        p.name
        for p in EVALUATION.glob("*.py")
        if not p.name.startswith("_") and '"--data"' in p.read_text(encoding="utf-8")
    }
    assert reading == set(NEEDS)


@pytest.mark.parametrize("script", sorted(NEEDS))
def test_missing_data_is_one_line_and_exit_2(script: str, tmp_path: Path) -> None:
    data = tmp_path / "no-data-here"
    res = run(script, "--data", str(data))
    assert res.returncode == 2, res.stderr
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    line = lines[0]
    assert line.startswith(f"{script}: data not found: ") and "--data" in line
    for folder in NEEDS[script]:
        assert str(data / folder) in line


def test_states_faithfulness_refuses_when_every_section_would_be_skipped(
    tmp_path: Path,
) -> None:
    (tmp_path / "varierrnli").mkdir()  # a folder, but no VariErrNLI file in it
    res = run("states_faithfulness.py", "--data", str(tmp_path))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == (
        f"states_faithfulness.py: data not found: {tmp_path / 'llmbar'} is not a directory "
        f"and {tmp_path / 'varierrnli'} holds no VariErrNLI files "
        "(give the data folder with --data DIR)\n"
    )


@pytest.mark.parametrize(("script", "option", "known"), NAME_LISTS)
def test_unknown_names_are_refused(script: str, option: str, known: str, tmp_path: Path) -> None:
    # Checked before the data folder: a missing --data does not hide the bad name.
    first = known.split(", ")[0]  # a known name beside the unknown one
    res = run(script, option, f"{first},foo", "--data", str(tmp_path))
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr == f"{script}: {option}: unknown name 'foo' (known: {known})\n"


@pytest.mark.parametrize(
    "script",
    ["acceptance.py", "acceptance_loop.py", "pipeline_llmbar.py", "states_faithfulness.py"],
)
def test_an_unknown_similarity_is_refused_before_anything_runs(script: str, tmp_path: Path) -> None:
    res = run(script, "--similarity", "nope", "--data", str(tmp_path))
    assert res.returncode == 2 and res.stdout == "" and "Traceback" not in res.stderr
    assert "--similarity: invalid choice: 'nope'" in res.stderr


def test_an_empty_set_list_is_refused(tmp_path: Path) -> None:
    res = run("acceptance.py", "--sets", ",", "--data", str(tmp_path))
    assert res.returncode == 2
    assert res.stderr == ("acceptance.py: --sets: no name (known: llmbar, zeroeval, varierrnli)\n")


def _documented_output() -> str:
    """The output block of evaluation/README.md's pipeline_llmbar.py section."""
    readme = (EVALUATION / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Composed pipeline on LLMBar", 1)[1]
    blocks = re.findall(r"```\n(.*?)```", section, flags=re.S)
    return str(next(b for b in blocks if b.startswith("LLMBar Swap_CoT:")))


def test_pipeline_llmbar_prints_the_documented_figures(shared_data: Path) -> None:
    """The figures README.md, docs/pipeline.md and evaluation/README.md cite (pooled 0.918
    at 0.672, held-out Adversarial/Neighbor 0.816), with TF-IDF (seconds; the docs' block
    was printed with MiniLM, and only the header's model name differs)."""
    res = run("pipeline_llmbar.py", "--data", str(shared_data), "--similarity", "tfidf")
    assert res.returncode == 0, res.stderr
    documented = _documented_output().splitlines()
    printed = res.stdout.splitlines()
    assert printed[0] == documented[0].replace("similarity all-MiniLM-L6-v2", "similarity tfidf")
    assert printed[1:] == documented[1:]
    assert "| 0.918 | 0.672 (219/326)" in res.stdout
    assert re.search(r"Adversarial/Neighbor .* \| 0\.816 \| 0\.649", res.stdout)


def test_pipeline_llmbar_rebuilds_the_shipped_reliability_file(
    shared_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / "llmbar-reliability.json"
    res = run("pipeline_llmbar.py", "--data", str(shared_data), "--write-calibration", str(out))
    assert res.returncode == 0, res.stderr
    assert out.read_bytes() == (REPO / "examples" / "llmbar-reliability.json").read_bytes()


def test_guard_zeroeval_runs_on_a_slice(shared_data: Path, tmp_path: Path) -> None:
    """The ZeroEval guard check on its first 200 problems, two seeds (a few seconds): every
    split's table rows, a verdict per criterion, and figures that agree with each other."""
    if not (shared_data / "zeroeval-gsm").is_dir():
        pytest.skip(f"ZeroEval data not found at {shared_data / 'zeroeval-gsm'}")
    out = tmp_path / "guard.json"
    res = run(
        "guard_zeroeval.py",
        *("--data", str(shared_data), "--limit", "200", "--seeds", "2", "--json", str(out)),
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("ZeroEval GSM8K, 200 problems, 9 solver models, beta 1.5\n")
    for split in ("seed 0", "seed 1"):
        assert f"\n| {split} | " in res.stdout
    for split in ("short -> long", "long -> short"):
        assert f"\n| {split} | 100 | guarded | " in res.stdout
    for what in ("random halves", "length shifts"):
        assert re.search(rf"^{what}: guarded gap <= 0\.10 .*: (met|NOT met)$", res.stdout, re.M)
        assert re.search(
            rf"^{what}: guarded accuracy >= majority .*: (met|NOT met)", res.stdout, re.M
        )
    figures = json.loads(out.read_text(encoding="utf-8"))
    rows = figures["halves"] + figures["shifts"]
    assert [r["split"] for r in rows] == ["seed 0", "seed 1", "short -> long", "long -> short"]
    for r in rows:
        assert r["calibration_cases"] + r["cases"] == 200
        # The models retrieve nothing: invariant 1 refuses every case, which is decided
        # by majority (or a measured verifier), never by consensus weighting.
        assert r["refusals"] == {"invariant 1": r["cases"]}
        assert set(r["modes"]) <= {"majority", "verifier"}
        assert r["k"] == max(2, round(1 + 1 / r["q"]))
        assert sum(r["stratum_cases"].values()) == r["cases"]
        for m in r["methods"]:
            assert m["gap"] == pytest.approx(abs(m["confidence"] - m["accuracy"]))


def _make_eval() -> list[list[str]]:
    """The commands of the Makefile's ``eval`` recipe that run a script of evaluation/,
    as argument lists from the script's path on, with ``$(EVAL_OUT)`` expanded."""
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    found = re.search(r"^EVAL_OUT := (\S+)$", makefile, re.M)
    out = found.group(1) if found else "$(EVAL_OUT)"
    recipe = makefile.split("\neval:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in recipe.splitlines()[1:] if line.startswith("\t")]
    return [
        line.replace("$(EVAL_OUT)", out).split()[1:]
        for line in lines
        if line.startswith("$(PY) evaluation/")
    ]


def _readme_commands() -> list[tuple[str, ...]]:
    """Every command evaluation/README.md shows for a script, in order, comments dropped."""
    readme = (EVALUATION / "README.md").read_text(encoding="utf-8")
    return [
        tuple(line.split("#", 1)[0].split()[1:])
        for line in readme.splitlines()
        if line.startswith(".venv/bin/python evaluation/")
    ]


OUTPUT_OPTIONS = ("--plot", "--json")
"""The options naming a file a script writes (``dci_efficiency.py``'s ``--json`` is a flag
and is not used by ``make eval``)."""


def test_make_eval_writes_no_tracked_file_and_runs_the_documented_commands() -> None:
    """``make eval`` ran every script with its defaults: the figures the README shows
    (evaluation/*.png) were overwritten by each run, and acceptance.py ran with settings
    none of the README's commands uses. Its figures and JSON files go to an untracked
    folder, and every command is one the README shows but for those files."""
    commands = _make_eval()
    assert commands, "no evaluation command found in the Makefile's eval recipe"
    documented = _readme_commands()
    written: list[str] = []
    for command in commands:
        script = EVALUATION / Path(command[0]).name
        source = script.read_text(encoding="utf-8")
        if '"--plot"' in source:  # a figure written beside the script by default
            assert "--plot" in command, command
        rest: list[str] = []
        args = iter(command)
        for arg in args:
            if arg in OUTPUT_OPTIONS:
                written.append(next(args))
            else:
                rest.append(arg)
        assert tuple(rest) in documented, f"{' '.join(command)}: not in evaluation/README.md"
    # acceptance.py: the README's three runs (one per data set, ZeroEval without the
    # reasoning variant), not one run of every set with it.
    acceptance = "evaluation/acceptance.py"
    assert [tuple(c) for c in commands if c[0] == acceptance] == [
        c for c in documented if c[0] == acceptance
    ]
    assert written
    in_git = shutil.which("git") is not None and (REPO / ".git").exists()
    for path in written:
        assert not Path(path).is_absolute() and path.startswith("build/"), path
        if in_git:
            ignored = subprocess.run(
                ["git", "check-ignore", "-q", "--no-index", path], cwd=REPO, check=False
            )
            assert ignored.returncode == 0, f"{path} is not ignored by git"
        else:  # a copy without its history: the rule that keeps build/ out of it
            assert "/build/" in (REPO / ".gitignore").read_text(encoding="utf-8").split()


def test_make_eval_output_options_write_where_they_are_told(tmp_path: Path) -> None:
    """guard_simulation.py as ``make eval`` runs it (fewer cases), its folder replaced by
    a temporary one: the figure and the JSON land there; evaluation/*.png is untouched."""
    (command,) = [c for c in _make_eval() if c[0].endswith("/guard_simulation.py")]
    # Without both, the run would write the shipped figure (or a JSON file nowhere).
    assert "--plot" in command and "--json" in command, command
    shipped = (EVALUATION / "guard_simulation.png").read_bytes()
    args = [a.replace("build/eval", str(tmp_path)) for a in command[1:]]
    res = run("guard_simulation.py", *args, "--cases", "300")
    assert res.returncode == 0, res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "guard_simulation.json",
        "guard_simulation.png",
    ]
    assert (EVALUATION / "guard_simulation.png").read_bytes() == shipped
