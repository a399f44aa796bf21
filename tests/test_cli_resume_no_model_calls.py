"""``runs resume`` of a run whose policy can make no model call needs no model.

A run started with ``--model openai:...`` (an exported ``$DISSENSUS_MODEL``, say) under a
policy with no follow-up (``seek_context.followup: none``, ``max_followups: 0``) never
asks the model; resumed without ``OPENAI_API_KEY`` it finishes with the records of an
uninterrupted run (it was refused with exit 2, the spec "cannot be used"). A policy
whose routes can still ask a model keeps the refusal
(``test_pipeline_resume_elsewhere.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.pipeline.gates import asks_a_model
from dissensus.pipeline.policy import Policy
from pipeline_cases import panel, write_jsonl, write_policy

ROWS = [panel(f"p{i}", ["2", "1", "2"]) for i in range(300)]
KEYED = {"OPENAI_API_KEY": "sk-test-not-used", "OPENAI_BASE_URL": None, "DISSENSUS_MODEL": None}
KEYLESS = {"OPENAI_API_KEY": None, "OPENAI_BASE_URL": None, "DISSENSUS_MODEL": None}


def _records(out: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in json.loads(line).items() if k != "review_id"} for line in out.splitlines()
    ]


@pytest.mark.parametrize(
    "seek_context", [{"followup": "none"}, {"max_followups": 0}], ids=["none", "zero"]
)
def test_a_run_that_asks_no_model_resumes_without_its_key(
    tmp_path: Path, seek_context: dict[str, Any]
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", ROWS)
    policy = write_policy(tmp_path / "pol.yaml", {"seek_context": seek_context})
    journal = tmp_path / "j.sqlite"
    args = ("--policy", policy, "--journal", journal, "--json", "--model", "openai:gpt-4o-mini")
    whole = cli("decide", inp, "--run-id", "W", *args, env=KEYED)
    assert whole.code == 0, whole.err
    part = cli("decide", inp, "--run-id", "R", *args, "--deadline", "0.05", env=KEYED)
    assert part.code == 1, part.err
    assert len(part.out.splitlines()) < len(ROWS)
    res = cli("runs", "resume", "R", "--journal", journal, "--json", env=KEYLESS)
    assert res.code == 0, res.err
    assert _records(res.out) == _records(whole.out)


def test_which_policies_ask_a_model() -> None:
    base = {"routing": {"convergent_disagreement_without_values": "seek_context"}}
    assert asks_a_model(Policy.model_validate(base))
    assert not asks_a_model(Policy.model_validate({**base, "seek_context": {"followup": "none"}}))
    assert not asks_a_model(Policy.model_validate({**base, "seek_context": {"max_followups": 0}}))
    # A deliberate route deliberates (DCI) whatever followup says; only max_followups: 0 stops it.
    deliberate = {"routing": {"defaults": {"DD": "deliberate"}}}
    assert asks_a_model(Policy.model_validate({**deliberate, "seek_context": {"followup": "none"}}))
    assert not asks_a_model(
        Policy.model_validate({**deliberate, "seek_context": {"max_followups": 0}})
    )
