"""The acceptance file (``ACCEPT.json``): format, self-hash, save and load.

The file holds everything needed to apply and audit an acceptance model: the format
version, the feature settings and list, the library versions it was fitted with, the
cross-fitted fold models as plain JSON (coefficients, no pickle; a new case is scored by
one of them, see :mod:`dissensus.acceptance.fit`), the threshold and the guarantee it
carries (target precision, delta, minimum accepted), the calibration size and the
per-stratum figures. ``sha256`` is the hash of the file's canonical JSON with the
``sha256`` field removed; every record decided with the file quotes it, and
:func:`load_acceptance` refuses a file whose content no longer matches its hash.

Choices where the design is silent: canonical JSON is ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)`` of the pydantic dump; floats are written
as Python writes them (round-trip exact); a file with ``threshold: null`` is valid and
means "accept nothing", its ``threshold_reason`` saying why. Format ``/1`` files (one
model refitted on every case) are refused with a message to re-run
``calibrate-acceptance``: their threshold was not computed for the model they carry.
The file is read strictly (:func:`dissensus.io.jsontext.load_json_file`): a duplicate
key, a non-finite number or a too long integer is an error naming the field, before the
hash is checked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dissensus.acceptance.bound import StratumFigures
from dissensus.acceptance.families import FamilyFigures
from dissensus.acceptance.fit import LogisticModel
from dissensus.acceptance.shift import ShiftReference
from dissensus.errors import ConfigError
from dissensus.io.jsontext import load_json_file
from dissensus.types import JsonObject

__all__ = [
    "ACCEPTANCE_FORMAT",
    "AcceptanceFile",
    "FeatureSettings",
    "canonical_hash",
    "load_acceptance",
    "save_acceptance",
]

ACCEPTANCE_FORMAT = "dissensus.acceptance/2"
OLD_FORMATS = ("dissensus.acceptance/1",)


class FeatureSettings(BaseModel):
    """How the features were computed (the pipeline computes them the same way)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    similarity: str | None = None
    """The reader's similarity backend used for the reading features."""
    reasoning: bool = False
    """Reasoning-similarity features (to own re-ask, to the question)."""
    markers: dict[str, list[str]] | None = None
    """Marker lexicon (``concession`` / ``grounding``) for the optional margin feature; off when ``None``."""
    user: list[str] = Field(default_factory=list)
    """User feature callables, ``module:function``."""


class AcceptanceFile(BaseModel):
    """A fitted acceptance model with its guarantee."""

    model_config = ConfigDict(extra="forbid")

    format: str = ACCEPTANCE_FORMAT
    description: str = ""
    built_from: list[str] = Field(default_factory=list)
    settings: FeatureSettings = Field(default_factory=FeatureSettings)
    features: list[str]
    libraries: dict[str, str]
    family: str = "learned"
    """The score family that decides (:mod:`dissensus.acceptance.families`)."""
    family_rule: str = "given"
    """How it was chosen: ``bonferroni``, ``split`` or ``given`` (named by the caller)."""
    families: list[FamilyFigures] = Field(default_factory=list)
    """Every family's figures at calibration (what ``--explain`` prints)."""
    models: list[LogisticModel] = Field(min_length=1)
    """The cross-fitted fold models; a new case is scored by one of them."""
    fold_of_stratum: dict[str, int] = Field(default_factory=dict)
    """Stratum -> index of the model that never saw it (stratified calibrations only)."""
    threshold: float | None
    """Accept when the best candidate's score is ``>= threshold``; ``None``: accept nothing."""
    threshold_reason: str
    target_precision: float
    delta: float
    min_accepted: int
    calibration_n: int
    """Calibration cases: those acceptance judges under the deciding policy (the threshold,
    figures and shift reference come from them)."""
    fitted_n: int | None = None
    """Labelled cases the model was fitted on, when more than ``calibration_n`` were
    given (``None``: the same cases)."""
    strata_field: str | None = None
    strata: list[StratumFigures] = Field(default_factory=list)
    calibration_accepted: int = 0
    calibration_correct: int = 0
    error_upper: float = 1.0
    shift_reference: ShiftReference | None = None
    """The calibration cases' feature vectors for the label-free shift check
    (:func:`~dissensus.acceptance.shift.shift_check`)."""
    sha256: str = ""

    def guarantee(self) -> str:
        """The guarantee in one sentence."""
        if self.threshold is None:
            return f"acceptance accepts nothing: {self.threshold_reason}"
        return (
            f"auto-accepted cases: precision >= {self.target_precision:.2f} with probability >= "
            f"{1 - self.delta:.2f} if these panels are exchangeable with the {self.calibration_n} calibration cases "
            f"(score family {self.family})"
        )


def canonical_hash(data: JsonObject) -> str:
    """sha256 of ``data`` without its ``sha256`` field, as canonical JSON."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_acceptance(acc: AcceptanceFile, path: str | Path) -> AcceptanceFile:
    """Write ``acc`` with its hash filled in; returns the hashed model."""
    data = acc.model_dump(mode="json")
    data["sha256"] = canonical_hash(data)
    try:
        Path(path).write_text(
            json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot write acceptance file: {exc.strerror or exc}", file=str(path)
        ) from None
    return AcceptanceFile.model_validate(data)


def load_acceptance(path: str | Path) -> AcceptanceFile:
    """Read and verify an acceptance file (:class:`ConfigError` naming the field otherwise)."""
    name = str(path)
    data: Any = load_json_file(path, what="acceptance file")
    if isinstance(data, dict) and data.get("format") in OLD_FORMATS:
        raise ConfigError(
            f"acceptance file format {data.get('format')!r} is no longer read: re-run "
            "`dissensus calibrate-acceptance` to write the current format",
            file=name,
            field="format",
        )
    if not isinstance(data, dict) or data.get("format") != ACCEPTANCE_FORMAT:
        got = data.get("format") if isinstance(data, dict) else None
        raise ConfigError(
            f"not an acceptance file (format {got!r}, expected {ACCEPTANCE_FORMAT!r})",
            file=name,
            field="format",
        )
    if data.get("sha256") != canonical_hash(data):
        raise ConfigError(
            "content does not match its sha256: the file was modified after calibration",
            file=name,
            field="sha256",
        )
    try:
        return AcceptanceFile.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            first["msg"], file=name, field=".".join(str(p) for p in first["loc"])
        ) from None
