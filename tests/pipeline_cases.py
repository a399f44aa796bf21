"""Small hand-checkable panels, policies and scripted models for the pipeline tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dissensus.types import Panel

QUESTION = "Which reply answers the user's question about the refund policy?"
OPTIONS = [
    {"id": "1", "text": "Refunds are issued within 30 days."},
    {"id": "2", "text": "We like refunds."},
]


def panel(
    pid: str,
    decisions: list[str | None],
    *,
    families: list[str | None] | None = None,
    swap: list[str | None] | None = None,
    evidence: list[list[dict[str, Any]] | None] | None = None,
    values: list[dict[str, float] | None] | None = None,
    meta: dict[str, Any] | None = None,
    reasoning: list[str] | None = None,
) -> dict[str, Any]:
    """A panel as a JSON object (the ``route`` / ``decide`` input format)."""
    outputs = []
    for i, d in enumerate(decisions):
        out: dict[str, Any] = {
            "agent": f"a{i + 1}",
            "decision": d,
            "reasoning": (
                reasoning[i]
                if reasoning
                else f"Option {d} states the refund window clearly, agent {i + 1}."
            ),
            "family": (families[i] if families else f"fam{i + 1}"),
        }
        if swap is not None:
            out["swap_decision"] = swap[i]
            out["swap_reasoning"] = f"Again option {swap[i]} is the one that states the window."
        if evidence is not None and evidence[i] is not None:
            out["evidence"] = evidence[i]
        if values is not None and values[i] is not None:
            out["values"] = values[i]
        outputs.append(out)
    base_meta: dict[str, Any] = {"question": QUESTION, "options": OPTIONS}
    base_meta.update(meta or {})
    return {"id": pid, "meta": base_meta, "outputs": outputs}


def as_panel(data: dict[str, Any]) -> Panel:
    return Panel.model_validate(data)


def write_jsonl(path: Path, rows: list[dict[str, Any] | str]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(row if isinstance(row, str) else json.dumps(row))
            handle.write("\n")
    return path


def write_script(path: Path, answers: dict[str, str], *, default: str = "1") -> Path:
    """A scripted model: agent -> option id chosen in the re-ask; other requests (a shared
    model's voice, DCI stages) get ``default``."""
    rules = [
        {
            "match": {"agent": agent, "stage": "pipeline.reask"},
            "json": {"decision": choice, "reasoning": f"{agent} picks {choice}."},
        }
        for agent, choice in answers.items()
    ]
    fallback = json.dumps({"decision": default, "reasoning": "default"})
    path.write_text(yaml.safe_dump({"rules": rules, "default": fallback}), encoding="utf-8")
    return path


def agent_models(root: Path, answers: dict[str, str]) -> dict[str, str]:
    """One scripted model per agent (a model of its own, hence a family of its own):
    ``seek_context.models`` for a policy."""
    root.mkdir(parents=True, exist_ok=True)
    return {
        agent: f"scripted:{write_script(root / f'{agent}.yaml', {agent: choice})}"
        for agent, choice in answers.items()
    }


CRASH_ANSWERS = {"a1": "1", "a2": "1", "a3": "2"}
"""Re-ask answers of the pipeline tests: a1 and a2 answer option 1, a3 option 2."""


def write_policy(path: Path, extra: dict[str, Any] | None = None) -> Path:
    """A fast offline policy (tfidf similarity) merged with ``extra`` (one level deep)."""
    data: dict[str, Any] = {
        "reading": {"similarity": "tfidf", "theta_s": 0.3},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "acceptance": {"min_families": 2},
        "concurrency": 2,
    }
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def mixed_batch() -> list[dict[str, Any] | str]:
    """Every route of the pipeline in a few lines (and one bad line).

    With the re-ask answers :data:`CRASH_ANSWERS` from each agent's own model
    (:func:`agent_models`): on ``live-reask`` a1 and a2 stay on ``1`` and a3 flips
    (accepted on two independent families); on ``live-split`` stable agents disagree.
    With one shared model instead (:func:`crash_script`), each live case gets one extra
    voice and commits nothing on it.
    """
    evidence = [
        [{"source": "kb:policies", "present": True}],
        [{"source": "web:faq", "present": True}],
        [{"source": "kb:tickets", "present": True}],
    ]
    return [
        panel("recorded-stable", ["1", "1", "1"], swap=["1", "1", "1"]),
        panel("live-reask", ["1", "1", "1"]),
        "{not json",
        panel(
            "evidence-backed",
            ["1", "1", "1"],
            evidence=evidence,
            reasoning=["Option 1 states the window."] * 3,
        ),
        panel(
            "value-conflict",
            ["1", "2", "1"],
            values=[
                {"safety": 0.9, "speed": 0.1},
                {"safety": 0.2, "speed": 0.8},
                {"safety": 0.7, "speed": 0.3},
            ],
            reasoning=["Option 1 states the refund window clearly."] * 3,
        ),
        panel(
            "negotiated",
            ["1", "2"],
            values=[{"cost": 1.0}, {"quality": 1.0}],
            reasoning=["Option 1 states the refund window clearly."] * 2,
            meta={"utilities": {"a1": {"1": 0.9, "2": 0.75}, "a2": {"1": 0.8, "2": 0.95}}},
        ),
        panel("live-split", ["2", "1", "2"]),
        panel("recorded-flip", ["1", "1", "2"], swap=["2", "1", "1"]),
    ]


def crash_script(path: Path) -> Path:
    return write_script(path, CRASH_ANSWERS)
