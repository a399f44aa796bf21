"""A world for the shift check's tests: an acceptance file calibrated on the bundled LLMBar
panels (TF-IDF, with its shift reference), policies that warn or hold on a shift, and
panels like the calibration ones (``same.jsonl``) or made alike (``shifted.jsonl``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from dissensus.states import get_backend
from dissensus.types import Panel

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


def shifted(row: dict[str, Any]) -> dict[str, Any]:
    """The panel with its agents' answers and reasons made alike: a different population."""
    out = json.loads(json.dumps(row))
    for o in out["outputs"]:
        o["decision"] = "1"
        o["reasoning"] = "Output (a) is better."
        if isinstance(o.get("reask"), dict):
            o["reask"] = {"decision": "1", "reasoning": "Output (a) again."}
    return out


def build_world(root: Path) -> Path:
    """The files in ``root`` (returned)."""
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases

    rows = [json.loads(line) for line in PANELS.read_text().splitlines()]
    panels = [Panel.model_validate(r) for r in rows]
    settings = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(panels, settings=settings, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in panels]
    acc = calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=20, settings=settings)
    assert acc.shift_reference is not None
    save_acceptance(acc, root / "A.json")
    for name, on_shift in (("warn.yaml", "warn"), ("hold.yaml", "escalate")):
        (root / name).write_text(
            yaml.safe_dump(
                {
                    "reading": {"similarity": "tfidf"},
                    "routing": {"convergent_disagreement_without_values": "seek_context"},
                    "acceptance": {
                        "model": "A.json",
                        "on_shift": on_shift,
                    },
                }
            ),
            encoding="utf-8",
        )
    (root / "same.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:60]))
    (root / "shifted.jsonl").write_text("".join(json.dumps(shifted(r)) + "\n" for r in rows[:60]))
    return root
