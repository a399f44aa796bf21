"""``deliberate`` with a baseline method: ``--deadline`` bounds it as it bounds DCI, and
DCI-only flags are refused rather than silently unused."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "dci"


@pytest.fixture
def task(tmp_path: Path) -> Path:
    path = tmp_path / "task.yaml"
    path.write_text(
        "question: 'Which road?'\noptions: [{id: o1, text: north}, {id: o2, text: south}]\n",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def hanging_server() -> Iterator[Any]:
    from dissensus.llm.fakeserver import FakeServer, ServerSettings

    server = FakeServer(settings=ServerSettings(latency_s=120)).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("method", ["voting", "debate"])
def test_the_deadline_stops_a_baseline(task: Path, hanging_server: Any, method: str) -> None:
    env = {"OPENAI_BASE_URL": hanging_server.base_url, "OPENAI_API_KEY": "test"}
    started = time.monotonic()
    res = cli(
        "deliberate", task, "--method", method, "--model", "openai:fake", "--deadline", "1",
        "--json", env=env,
    )  # fmt: skip
    assert time.monotonic() - started < 20
    assert res.code == 1, res.err
    line = json.loads(res.out)
    assert line["status"] == "deadline_exceeded" and line["method"] == method
    assert line["detail"] == "the deadline of 1s passed"
    assert "deadline_exceeded" in res.err


def test_a_baseline_under_its_deadline_completes() -> None:
    res = cli(
        "deliberate", EXAMPLES / "risk.yaml", "--method", "voting", "--deadline", "60", "--json"
    )
    assert res.code == 0, res.err
    assert json.loads(res.out)["status"] == "complete"


@pytest.mark.parametrize(
    "flag", [["--no-archetypes"], ["--no-typed-grammar"], ["--no-dci-cf"], ["--max-rounds", "3"]]
)
@pytest.mark.parametrize("method", ["single", "voting", "self_consistency", "debate"])
def test_dci_only_flags_are_refused_with_a_baseline(
    task: Path, flag: list[str], method: str
) -> None:
    res = cli("deliberate", task, "--method", method, *flag)
    assert res.code == 2 and res.out == ""
    assert flag[0] in res.err and f"--method {method}" in res.err, res.err


def test_dci_only_flags_are_taken_with_dci() -> None:
    res = cli("deliberate", EXAMPLES / "risk.yaml", "--no-dci-cf", "--max-rounds", "1", "--json")
    assert res.code == 0, res.err
    assert json.loads(res.out)["method"] == "dci"
