"""The nine ZeroEval GSM8K solvers as ``replay:`` members behind the chat endpoint.

Real data (``../shared/data/zeroeval-gsm``, read here, never copied into the repository):
a handful of problems become replay recordings in the test's own folder, one file per
solver, answering exactly what it answered in ZeroEval. A learned acceptance file is
calibrated on the converter's panels (``dissensus convert zeroeval``), and the official
``openai`` SDK asks the questions through ``dissensus serve``. The door's committed
answers must be the ones ``dissensus decide`` commits on the converter's panels of the
same problems (same decision, same action, same basis), and every run must verify.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from chat_helpers import live_server
from cli_helpers import cli
from dissensus.convert.zeroeval import iter_zeroeval_panels, model_family
from dissensus.llm.base import Message
from dissensus.panels import recording_line
from dissensus.pipeline import load_policy
from dissensus.serve import ServeSettings, create_app
from dissensus.types import Panel
from serve_helpers import write_tokens

pytest.importorskip("sklearn")
openai = pytest.importorskip("openai")

CALIBRATION = 240
"""Converter panels the acceptance file is calibrated on."""
ASKED = 16
"""Problems asked through the endpoint (among the calibration panels' problems)."""


def _raw(item: dict[str, Any]) -> str:
    """The solver's text as the converter reads it."""
    out = item.get("output")
    if isinstance(out, list):
        return "\n".join(str(x) for x in out if x is not None)
    return "" if out is None else str(out)


@pytest.fixture(scope="module")
def world(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = shared_data / "zeroeval-gsm"
    if not source.is_dir():
        pytest.skip(f"no ZeroEval data at {source}")
    from chat_helpers import write_acceptance

    root = tmp_path_factory.mktemp("zeroeval-chat")
    panels = list(iter_zeroeval_panels(source, limit=CALIBRATION))
    write_acceptance(root, panels, [str(p.meta["gold"]) for p in panels])
    models = sorted(p.stem for p in source.glob("*.json"))
    policy = {
        "reading": {"similarity": "tfidf"},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "acceptance": {"model": "accept.json"},
        "panel": {
            "answer": "number",
            "members": [
                {"name": m, "model": f"replay:members/{m}.jsonl", "family": model_family(m)}
                for m in models
            ],
        },
    }
    (root / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    settings, _ = load_policy(root / "policy.yaml")
    asked = panels[:ASKED]
    wanted = {p.id for p in asked}
    (root / "members").mkdir()
    for model in models:
        rows = json.loads((source / f"{model}.json").read_text(encoding="utf-8"))
        lines = [
            recording_line(
                model,
                [Message(role="user", content=str(row["question"]))],
                _raw(row),
                settings.panel,
            )
            for row in rows
            if row.get("session_id") in wanted
        ]
        (root / "members" / f"{model}.jsonl").write_text("".join(lines), encoding="utf-8")
    (root / "asked.jsonl").write_text(
        "".join(p.model_dump_json() + "\n" for p in asked), encoding="utf-8"
    )
    write_tokens(root / "tokens.txt")
    return root


@pytest.fixture(scope="module")
def server(world: Path) -> Iterator[str]:
    settings = ServeSettings(
        journal=str(world / "journal.sqlite"),
        policy=str(world / "policy.yaml"),
        tokens=str(world / "tokens.txt"),
    )
    with live_server(lambda: create_app(settings)) as url:
        yield url


def _asked(world: Path) -> list[Panel]:
    return [
        Panel.model_validate_json(line)
        for line in (world / "asked.jsonl").read_text(encoding="utf-8").splitlines()
    ]


@pytest.mark.slow
def test_endpoint_commits_what_decide_commits(world: Path, server: str) -> None:
    panels = _asked(world)
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="tok-sub", max_retries=0)
    try:
        answers = [
            client.chat.completions.create(
                model="zeroeval-panel",
                messages=[{"role": "user", "content": str(p.meta["question"])}],
            )
            for p in panels
        ]
    finally:
        client.close()
    result = cli(
        "decide",
        str(world / "asked.jsonl"),
        "--policy",
        str(world / "policy.yaml"),
        "--journal",
        str(world / "decide.sqlite"),
        "--json",
    )
    assert result.code == 0, result.out
    records = [json.loads(line) for line in result.out.splitlines() if line.startswith("{")]
    assert len(records) == len(panels)
    statuses = []
    for completion, record, panel in zip(answers, records, panels, strict=True):
        ext = completion.model_extra["dissensus"]
        statuses.append(ext["status"])
        assert (ext["action"], ext["basis"], ext["state"]) == (
            record["action"],
            record["basis"],
            record["state"],
        ), panel.id
        if ext["status"] == "committed":
            assert completion.choices[0].finish_reason == "stop"
            assert ext["decision"] == record["decision"]
            # The content is the solver's own text, and it holds the committed number.
            member = ext["answered_by"]
            by_agent = {o.agent: o for o in panel.outputs}
            assert by_agent[member].decision == ext["decision"]
        else:
            assert completion.choices[0].finish_reason == "escalated"
            assert record["action"] == "escalate"
        run = cli("runs", "verify", ext["run_id"], "--journal", str(world / "journal.sqlite"))
        assert run.code == 0, run.out
    assert "committed" in statuses
