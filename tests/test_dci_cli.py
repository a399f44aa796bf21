"""`dissensus deliberate` and `dissensus judge` through a subprocess, offline by default."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

from cli_helpers import run_cli
from dissensus.agents.deliberator import deliberate_with_model
from dissensus.baselines.deliberation import run_baseline_sync
from dissensus.cli.dci import BUNDLED, bundled_model
from dissensus.dci.task import load_task
from dissensus.llm import resolve_model
from test_dci_flow import validate_against_schema

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "dci"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DISSENSUS_MODEL"}
    return run_cli(*args, env=env, stdin=stdin)


def test_deliberate_dci_json_offline_by_default() -> None:
    proc = run("deliberate", str(EXAMPLES / "hidden_profile.yaml"), "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == "dci" and out["model"].startswith("scripted:")
    packet = out["packet"]
    validate_against_schema(packet)
    assert packet["path"] == "converged" and packet["selected"]["id"] == "o5"
    assert packet["minority_report"] and packet["reopen_conditions"] and packet["next_actions"]
    assert out["usage"]["calls"] == packet["metrics"]["calls"] > 0


def test_deliberate_baseline() -> None:
    method = "debate"
    proc = run("deliberate", str(EXAMPLES / "risk.yaml"), "--method", method, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["method"] == method and out["packet"] is None and out["selected_option"] == "manual"
    assert len(out["answer"]) > 1500


def test_ablation_switches_and_human_output() -> None:
    proc = run(
        "deliberate",
        str(EXAMPLES / "routine.yaml"),
        "--no-archetypes",
        "--no-typed-grammar",
        "--no-dci-cf",
    )
    assert proc.returncode == 0, proc.stderr
    assert "unstructured:mean_score" in proc.stdout and "Reopen conditions" in proc.stdout


def test_budget_exhaustion_prints_a_packet_and_exits_1() -> None:
    proc = run("deliberate", str(EXAMPLES / "policy.yaml"), "--json", "--max-calls", "7")
    assert proc.returncode == 1
    packet = json.loads(proc.stdout)["packet"]
    validate_against_schema(packet)
    assert packet["status"] == "budget_exhausted" and packet["metrics"]["calls"] <= 7


def test_bad_inputs_exit_2_naming_the_field(tmp_path: Path) -> None:
    task = tmp_path / "t.yaml"
    task.write_text("context: no question here\n")
    proc = run("deliberate", str(task))
    assert proc.returncode == 2 and "'question'" in proc.stderr and "Traceback" not in proc.stderr
    proc = run("deliberate", str(EXAMPLES / "risk.yaml"), "--max-rounds", "0", "--method", "single")
    assert proc.returncode == 2 and "--max-rounds" in proc.stderr


def test_judge_scores_outputs_per_judge(tmp_path: Path) -> None:
    task = load_task(EXAMPLES / "routine.yaml")
    outs = []
    for method in ("dci", "single"):
        client = resolve_model(bundled_model(method))
        if method == "dci":
            output = asyncio.run(deliberate_with_model(task, client))[0]
        else:
            output = run_baseline_sync("single", client, task)
        outs.append(output.model_dump_json() + "\n")
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(outs) + "{not json}\n")
    judge = BUNDLED / "judge.yaml"
    copy = tmp_path / "judge2.yaml"
    copy.write_text(judge.read_text())
    proc = run(
        "judge", str(path), "--model", f"scripted:{judge}", "--model", f"scripted:{copy}", "--json"
    )
    assert proc.returncode == 3, proc.stderr  # one line rejected, the rest judged
    assert "outputs.jsonl:3" in proc.stderr
    result = json.loads(proc.stdout)
    assert len(result["scores"]) == 4 and len(result["means"]) == 2
    for means in result["means"].values():
        assert set(means) == {"dci", "single"}
        assert all(1 <= means[m]["overall"] <= 10 and means[m]["n"] == 1 for m in means)


def test_the_same_judge_twice_is_one_judge(tmp_path: Path) -> None:
    task = load_task(EXAMPLES / "routine.yaml")
    output = run_baseline_sync("single", resolve_model(bundled_model("single")), task)
    path = tmp_path / "outputs.jsonl"
    path.write_text(output.model_dump_json() + "\n")
    spec = f"scripted:{BUNDLED / 'judge.yaml'}"
    proc = run("judge", str(path), "--model", spec, "--model", spec, "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert list(result["means"]) == [spec]
    assert result["means"][spec]["single"]["n"] == 1 and len(result["scores"]) == 1
