"""DCI-CF stage 8: the decision packet and its published JSON schema (``docs/dci.md``).

A packet is produced on every path: converged, any fallback rule, the no-DCI-CF
ablation, budget exhaustion and model failure. ``status`` says how the run ended and
``path`` how the option was chosen:

* ``converged`` — stage 6 passed;
* ``fallback:outranking`` | ``fallback:minimax`` | ``fallback:satisficing`` |
  ``fallback:tie_break`` — stage 7 chose, at the named rule;
* ``fallback:no_options`` — the run stopped before any option existed
  (``selected`` is null, ``status`` says why);
* ``unstructured:mean_score`` — the no-DCI-CF ablation (highest mean score).

The schema is generated from :class:`DecisionPacket` and published as
``dci/packet.schema.json``; a test keeps the file equal to the model.
Regenerate with ``python -c "from dissensus.dci.packet import write_schema; write_schema()"``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from dissensus.dci.outranking import CascadeResult
from dissensus.dci.task import DCIConfig
from dissensus.dci.workspace import ActFailure
from dissensus.types import JsonSchema

__all__ = [
    "PATH_PATTERN",
    "SCHEMA_PATH",
    "ConvergenceRecord",
    "DecisionPacket",
    "MinorityPosition",
    "Objection",
    "OptionSummary",
    "ProcessMetrics",
    "SelectedOption",
    "packet_schema",
    "write_schema",
]

PATH_PATTERN = r"^(converged|fallback:(outranking|minimax|satisficing|tie_break|no_options)|unstructured:mean_score)$"
SCHEMA_PATH = Path(__file__).with_name("packet.schema.json")


class SelectedOption(BaseModel):
    """The chosen option, why, and on what evidence."""

    model_config = ConfigDict(extra="forbid")

    id: str
    label: str | None = None
    """The task's own id when the option came from the task file."""
    text: str
    rationale: str = Field(min_length=1)
    evidence: list[str]
    mean_score: float | None = None
    supporters: list[str]


class OptionSummary(BaseModel):
    """Every option the deliberation considered, and where it ended."""

    model_config = ConfigDict(extra="forbid")

    id: str
    label: str | None = None
    text: str
    proposer: str
    status: Literal["live", "finalist", "eliminated", "dropped", "merged", "selected"]
    mean_score: float | None = None


class Objection(BaseModel):
    """A tension still open at the end: a residual objection."""

    model_config = ConfigDict(extra="forbid")

    tension: str
    holder: str
    target: str
    kind: Literal["challenge", "question"]
    blocking: bool
    points: list[str]


class MinorityPosition(BaseModel):
    """A position the decision did not adopt, with who holds it and why."""

    model_config = ConfigDict(extra="forbid")

    option: str
    option_text: str
    holders: list[str]
    rationale: str
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)


class ConvergenceRecord(BaseModel):
    """The last stage-6 test."""

    model_config = ConfigDict(extra="forbid")

    converged: bool
    top: str | None
    margin: float
    required_margin: float
    blocking_tensions: list[str]


class ProcessMetrics(BaseModel):
    """What the deliberation cost and what it consisted of."""

    model_config = ConfigDict(extra="forbid")

    acts_by_family: dict[str, int]
    acts_total: int
    act_failures: int
    rounds: int
    calls: int
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    max_prompt_tokens: int
    """Largest single prompt (estimated, four characters a token)."""


class DecisionPacket(BaseModel):
    """The accountable outcome of one deliberation."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal["1"] = "1"
    task_id: str
    question: str
    status: Literal["complete", "budget_exhausted", "model_failure", "deadline_exceeded"]
    status_detail: str | None = None
    """Why the run stopped early (budget or model failure), in words."""
    path: str = Field(pattern=PATH_PATTERN)
    selected: SelectedOption | None
    options: list[OptionSummary]
    residual_objections: list[Objection]
    minority_report: list[MinorityPosition]
    reopen_conditions: list[str]
    next_actions: list[str]
    convergence: ConvergenceRecord | None
    fallback: CascadeResult | None
    scores: dict[str, dict[str, float]]
    """Last score row of every participant (the raw numbers behind the path)."""
    failures: list[ActFailure]
    metrics: ProcessMetrics
    config: DCIConfig
    participants: dict[str, str]
    """Participant id -> archetype."""


def packet_schema() -> JsonSchema:
    """The packet's JSON schema (draft 2020-12, as pydantic emits it)."""
    schema = DecisionPacket.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://dissensus.dev/schemas/dci/decision-packet-1.json"
    return schema


def write_schema(path: Path | None = None) -> Path:
    """Write the schema file (the published copy lives beside this module)."""
    target = path or SCHEMA_PATH
    target.write_text(
        json.dumps(packet_schema(), indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    return target
