"""CLI: `dissensus bound`, `negotiate`, `verify` through a subprocess."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from cli_helpers import run_cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "concord"
FIELDS = {
    "status",
    "selected",
    "scores",
    "worst_off",
    "floor",
    "margin",
    "budget",
    "bound",
    "spent",
    "trajectory",
    "shortfall",
    "covered",
    "unknown",
    "candidates",
    "digest",
}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=REPO, env={"PATH": "/usr/bin:/bin", "COLUMNS": "200"})


def test_bound_prints_the_published_figures() -> None:
    res = cli("bound", "--agents", "5", "--rounds", "6", "--json")
    assert res.returncode == 0
    assert res.stdout == '{"rounds": 6, "candidates": 11, "evaluations": 55, "model_calls": 51}\n'
    assert cli("bound", "--agents", "0", "--rounds", "6").returncode == 2  # no agents: usage error


def test_negotiate_json_then_verify(tmp_path: Path) -> None:
    out = tmp_path / "cert.json"
    res = cli("negotiate", str(EXAMPLES / "incident.yaml"), "--json", "--out", str(out))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc) == FIELDS
    assert doc["status"] == "certified"
    assert set(doc["selected"]) == {"id", "text", "author", "round"}
    assert [round(s["worst_off"], 2) for s in doc["trajectory"]] == [0.23, 0.67, 0.75]
    assert set(doc["scores"]["telemetry"]) >= {"calibrated", "raw"}
    ok = cli("verify", str(out))
    assert ok.returncode == 0 and "valid" in ok.stdout
    doc["candidates"][2]["scores"]["region"]["raw"] += 1
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    res = cli("verify", str(bad))
    assert res.returncode == 1
    assert "calibration" in res.stdout


def test_human_mode_shows_the_trajectory_and_comparison() -> None:
    res = cli(
        "negotiate",
        str(EXAMPLES / "incident.yaml"),
        "--compare",
        "--model",
        f"scripted:{EXAMPLES / 'incident-arbiter.yaml'}",
    )
    assert res.returncode == 0, res.stderr
    assert "0.23 → 0.67 → 0.75" in res.stdout
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("│ ")]
    order = [ln.split("│")[1].strip() for ln in lines if ln.split("│")[1].strip()]
    strategies = [
        s
        for s in order
        if s
        in {
            "CONCORD",
            "LLM writes a plan",
            "LLM picks a plan",
            "Owner decides",
            "Best average",
            "Majority vote",
            "Unanimity required",
        }
    ]
    assert strategies == [
        "CONCORD",
        "LLM writes a plan",
        "LLM picks a plan",
        "Owner decides",
        "Best average",
        "Majority vote",
        "Unanimity required",
    ]


def test_compare_json_offline_llm_example(tmp_path: Path) -> None:
    res = cli("negotiate", str(EXAMPLES / "llm-checkout.yaml"), "--compare", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert set(doc["certificate"]) == FIELDS
    names = [r["strategy"] for r in doc["comparison"]]
    assert "LLM picks a plan" in names and "LLM writes a plan" in names
    assert doc["comparison"][0]["strategy"] == "CONCORD"
    # `verify` reads the --compare output as it is, and still catches an edit inside it.
    both = tmp_path / "both.json"
    both.write_text(res.stdout)
    assert cli("verify", str(both)).returncode == 0
    doc["certificate"]["floor"] = 0.1
    both.write_text(json.dumps(doc))
    assert cli("verify", str(both)).returncode == 1


def test_bad_problem_exits_2_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text(
        "floor: 1.4\nanchors: {rejected: {id: R0, text: r}, ideal: {id: I0, text: i}}\n"
        "agents: [{id: a, kind: table, scores: {R0: 0, I0: 1}}]\n"
    )
    res = cli("negotiate", str(bad))
    assert res.returncode == 2
    assert "floor" in res.stderr and "Traceback" not in res.stderr
    res = cli("verify", str(bad))  # YAML is not a JSON certificate
    assert res.returncode == 2


def test_the_docs_python_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    text = (REPO / "docs" / "concord.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks
    monkeypatch.chdir(REPO)
    for block in blocks:
        namespace: dict[str, object] = {}
        exec(compile(block, "docs/concord.md", "exec"), namespace)
        assert "cert" in namespace


def test_deadline_returns_the_current_leader(tmp_path: Path) -> None:
    (tmp_path / "hang_agents.py").write_text(
        "import time\n"
        "def score(o, v):\n"
        "    return {'R0': 0.0, 'I0': 1.0}.get(o.id or '', 0.4)\n"
        "def repair(v):\n"
        "    time.sleep(60)\n"
        "    return 'never'\n"
    )
    problem = tmp_path / "hang.yaml"
    problem.write_text(
        "floor: 0.9\nrounds: 3\n"
        "anchors: {rejected: {id: R0, text: r}, ideal: {id: I0, text: i}}\n"
        "options: [{id: A, text: a}]\n"
        'agents: [{id: h, kind: function, score: "hang_agents:score", repair: "hang_agents:repair"}]\n'
    )
    # The hanging repair is reached within milliseconds; 0.3 s leaves a loaded machine room.
    res = cli("negotiate", str(problem), "--deadline", "0.3", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["spent"]["stopped"] == "deadline"
    assert doc["status"] == "best_effort"
    assert doc["selected"]["id"] == "A"


def test_equal_anchors_at_run_time_name_the_problem_file(tmp_path: Path) -> None:
    (tmp_path / "flat_agent.py").write_text(
        "def score(outcome, view):\n    return 5.0\n", encoding="utf-8"
    )
    problem = tmp_path / "flat.yaml"
    problem.write_text(
        "floor: 0.5\n"
        "anchors:\n  rejected: {id: R0, text: r}\n  ideal: {id: I0, text: i}\n"
        "options:\n  - {id: A, text: a}\n"
        "agents:\n"
        "  - {id: t, kind: table, scores: {R0: 0, I0: 10, A: 6}}\n"
        "  - {id: flat, kind: function, score: 'flat_agent:score'}\n",
        encoding="utf-8",
    )
    res = cli("negotiate", str(problem))
    assert res.returncode == 2
    assert "Traceback" not in res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {problem}: field 'agents.flat.anchors'")


@pytest.mark.parametrize(
    ("agents", "rounds", "option"),
    [
        ("9" * 2500, "1", "--agents"),  # its counts would print past 4,300 digits
        ("9" * 5000, "1", "--agents"),
        ("257", "1", "--agents"),
        ("3", "1001", "--rounds"),
        ("3", "9" * 2500, "--rounds"),
    ],
)
def test_bound_takes_what_a_problem_file_may_hold(agents: str, rounds: str, option: str) -> None:
    for extra in ((), ("--json",)):
        res = cli("bound", "--agents", agents, "--rounds", rounds, *extra)
        assert res.returncode == 2, res.stderr[-300:]
        assert "Traceback" not in res.stderr and res.stdout == ""
        assert res.stderr.startswith("error: ") and option in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1
    assert cli("bound", "--agents", "256", "--rounds", "1000", "--json").returncode == 0


def test_a_problem_file_holds_at_most_256_agents_and_1000_rounds() -> None:
    from dissensus.concord.problem import parse_problem
    from dissensus.errors import ConfigError

    def problem(n: int, rounds: int) -> dict[str, object]:
        scores = {"R0": 0, "I0": 10}
        return {
            "floor": 0.5,
            "rounds": rounds,
            "anchors": {"rejected": {"id": "R0", "text": "r"}, "ideal": {"id": "I0", "text": "i"}},
            "agents": [{"id": f"a{i}", "kind": "table", "scores": scores} for i in range(n)],
        }

    parse_problem(problem(256, 1000))
    with pytest.raises(ConfigError, match="at most 256 agents"):
        parse_problem(problem(257, 6))
    with pytest.raises(ConfigError, match="rounds must be at most 1000"):
        parse_problem(problem(3, 1001))
