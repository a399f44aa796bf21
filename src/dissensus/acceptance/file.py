"""The acceptance file (``ACCEPT.json``): format, self-hash, save and load.

The file holds everything needed to apply and audit an acceptance model: the format
version, the feature settings (with, since they are recorded, the reading thresholds and
guard settings the features were computed with: :class:`CalibratedReading`,
:class:`CalibratedGuard`, and whether the calibration cases had second answers,
``settings.reask``; absent from older files, and left out when not recorded) and list, the library versions it was fitted with, the
cross-fitted fold models as plain JSON (coefficients, no pickle; a new case is scored by
one of them, see :mod:`dissensus.acceptance.fit`), the threshold and the guarantee it
carries (target precision, delta, minimum accepted), the calibration size and the
per-stratum figures. ``sha256`` is the hash of the file's canonical JSON with the
``sha256`` field removed; every record decided with the file quotes it, and
:func:`load_acceptance` refuses a file whose content no longer matches its hash.

Choices this module makes: canonical JSON is ``json.dumps(sort_keys=True,
separators=(",", ":"), ensure_ascii=False)`` of the pydantic dump; floats are written
as Python writes them (round-trip exact); a file with ``threshold: null`` is valid and
means "accept nothing", its ``threshold_reason`` saying why. Format ``/1`` files (one
model refitted on every case) are refused with a message to re-run
``calibrate-acceptance``: their threshold was not computed for the model they carry. A
format this version does not know (``dissensus.acceptance/3``, written by a later
version) is refused as such, naming the version that wrote it, not as "not an
acceptance file".
The file is read strictly (:func:`dissensus.io.jsontext.load_json_file`, which skips
a leading UTF-8 byte order mark): a duplicate key, a non-finite number or a too long
integer is an error naming the field, before the hash is checked. The file is read
once: :func:`read_acceptance` returns the validated model and the JSON it was read
from (what a run keeps, so its sha256 still covers it), and no caller re-reads it.

The sha256 detects an edit, not a forgery (anyone can re-hash a file), so the content
is checked too, field by field, before any case is decided: ``target_precision`` and
``delta`` strictly between 0 and 1; the threshold, the error bounds and each family's
and stratum's threshold in [0, 1]; counts non-negative with ``correct <= accepted <=
cases``; a known score family and family rule; each fold model with one mean, scale
and coefficient per feature of the file (positive scales; :class:`LogisticModel`);
``fold_of_stratum`` naming an existing model; the shift reference with one value per
feature in every row, each within
:data:`~dissensus.acceptance.features.FEATURE_BOUND`, and one row per judged
calibration case (``calibration_n``, plus ``selection_n`` under the split rule: the
reference is never a subsample, so an emptied reference or one of copied rows is
refused rather than misreport what it keeps or flag every run as shifted);
``selection_n`` only under the split rule; in a file that sets a threshold, a
reference whose rows (two or more) are all one vector is refused (copies of one row),
and ``shift_reference: null`` is refused in any file (files written before the shift
check have no such field: they load, and the run says its check is off), as is a file
without the field whose ``libraries.dissensus`` is a version after
:data:`BEFORE_SHIFT_CHECK` (every such version writes it: only 0.1.0 wrote files
before the check, and a file that records no version, or ``unknown``, cannot be
told apart from one of those, so it loads as they do); a threshold only where the file's own figures
pass its test: ``error_upper <= 1 - target_precision`` (each stratum's, in a stratified
file) and ``calibration_accepted >= min_accepted`` (a file claiming a guarantee its
figures refute is refused, not used). The figures are recomputed, not trusted: every
stated bound must be :func:`~dissensus.acceptance.bound.clopper_pearson_upper` of its
own counts (relative tolerance 1e-9) at the level the threshold was tested at
(:meth:`AcceptanceFile.tested_at`), the competing families' levels must add up to at
most ``delta`` (under the split rule: each at most ``delta``), and a threshold must be
the one its ``threshold_reason`` states (to the four decimals it prints, with the same
counts, bound and ``1 - target_precision``) and, outside the split rule, the one of the
chosen family's ``families`` row, with the same counts. Files written before families
said whether they competed are held to the chosen family's level alone. Numbers are strict (pydantic strict mode
for the file and its parts): a quoted ``"0.5"`` or a boolean where a number belongs is
refused, not read as its conversion (``delta: true`` was 1.0); an integer stands for
the float it equals. A failure is one :class:`ConfigError` naming the file and the
field. A run's journalled copy (``validate_acceptance(..., journalled=True)``) is read
as it was when the run started (lax numbers, the reference's size unchecked), so a run
started by an earlier version still resumes.

:func:`save_acceptance` writes through a temporary file renamed over the target
(:func:`dissensus.io.atomic.atomic_output`): a failed write (a full disk, a file size
limit) leaves the previous file whole.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from dissensus.acceptance.bound import StratumFigures, confidence, target_words
from dissensus.acceptance.families import FAMILIES, FamilyFigures
from dissensus.acceptance.features import bad_value
from dissensus.acceptance.fit import LogisticModel
from dissensus.acceptance.shift import ShiftReference
from dissensus.errors import ConfigError
from dissensus.io.atomic import atomic_write_text
from dissensus.io.jsontext import load_json_file
from dissensus.quoting import quote_short
from dissensus.types import JsonObject

__all__ = [
    "ACCEPTANCE_FORMAT",
    "AcceptanceFile",
    "CalibratedGuard",
    "CalibratedReading",
    "FeatureSettings",
    "canonical_hash",
    "load_acceptance",
    "read_acceptance",
    "save_acceptance",
    "validate_acceptance",
]

ACCEPTANCE_FORMAT = "dissensus.acceptance/2"
OLD_FORMATS = ("dissensus.acceptance/1",)

Unit = Annotated[float, Field(ge=0.0, le=1.0)]
"""A probability or a score's threshold: in [0, 1]."""
Open = Annotated[float, Field(gt=0.0, lt=1.0)]
"""A target precision or a delta: strictly between 0 and 1."""
Count = Annotated[int, Field(ge=0)]

BEFORE_SHIFT_CHECK = (0, 1)
"""The last ``major.minor`` release whose files may have no ``shift_reference`` field: the
shift check came within 0.1.0, and every later version writes the field."""

_VERSION = re.compile(r"(\d+)\.(\d+)")
"""The ``major.minor`` a recorded version string starts with."""


def _release(version: object) -> tuple[int, int] | None:
    """``(major, minor)`` of a recorded ``libraries.dissensus`` (``None``: not a version)."""
    found = _VERSION.match(version) if isinstance(version, str) else None
    return (int(found[1]), int(found[2])) if found else None


_SLACK = 1.0 + 1e-9
"""Room for float rounding when levels are compared (``0.9 * 0.1 + 0.1 * 0.1``)."""

_REASON = re.compile(
    r"accept score >= (?P<threshold>\d+\.\d+): (?P<correct>\d+)/(?P<accepted>\d+) right on "
    r"calibration, error upper bound (?P<upper>\d+\.\d+) <= (?P<allowed>\d+\.\d+)"
)
"""A passing threshold's reason, as :func:`~dissensus.acceptance.bound.select_threshold`
writes it (every version has)."""


class Inconsistent(ValueError):
    """A field whose value contradicts another's (``field``: its dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


JOURNALLED = "journalled"
"""Validation context key: the file is a run's journalled copy (read as it was written)."""


def _is_journalled(info: ValidationInfo) -> bool:
    """Whether the file being validated is a run's journalled copy."""
    return bool(isinstance(info.context, dict) and info.context.get(JOURNALLED))


def _in_unit(value: float | None) -> bool:
    return value is None or 0.0 <= value <= 1.0


def _counts(where: str, n: int, accepted: int, correct: int) -> None:
    if min(n, accepted, correct) < 0:
        raise Inconsistent(where, "counts must not be negative")
    if not correct <= accepted <= n:
        raise Inconsistent(
            where, f"correct ({correct}) <= accepted ({accepted}) <= cases ({n}) does not hold"
        )


class CalibratedReading(BaseModel):
    """The reading thresholds calibration read the panels with, as effective values (a
    threshold the policy left to the backend's default is written out): the reading
    state one-hot features depend on them."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    theta_s: float = Field(ge=-1.0, le=1.0, allow_inf_nan=False)
    """Reasoning-similarity threshold."""
    theta_a: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    """Conclusion-agreement threshold."""


class CalibratedGuard(BaseModel):
    """The guard settings calibration computed the guard features with."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    enabled: bool
    """The policy's ``guard.enabled`` (a disabled guard gives no guard features)."""
    options: dict[str, Any] = Field(default_factory=dict)
    """The guard's thresholds (``guard.options``), every one written out."""
    calibration_sha256: str | None = None
    """sha256 of the guard calibration file's bytes (``guard.calibration``), ``None``
    without one."""

    @model_validator(mode="after")
    def _valid(self) -> CalibratedGuard:
        from dissensus.guard import GuardThresholds

        try:
            GuardThresholds.model_validate(self.options)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(["options", *(str(p) for p in first["loc"])])
            raise Inconsistent(where, str(first["msg"])) from None
        if self.calibration_sha256 is not None and not _SHA256.fullmatch(self.calibration_sha256):
            raise Inconsistent("calibration_sha256", "not a sha256 (64 lowercase hex digits)")
        return self


_SHA256 = re.compile(r"[0-9a-f]{64}")


class FeatureSettings(BaseModel):
    """How the features were computed (the pipeline computes them the same way).

    ``reading``, ``guard`` and ``reask`` record the settings calibration computed the
    features with (``calibrate-acceptance`` writes them; ``None``: not recorded, as in
    files written before they were, and then left out of the file); a run whose policy
    differs is refused (:func:`dissensus.acceptance.prepare.check_calibrated_settings`,
    and for ``reask`` :func:`dissensus.pipeline.spec.reask_difference`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    similarity: str | None = None
    """The reader's similarity backend used for the reading features."""
    reasoning: bool = False
    """Reasoning-similarity features (to own re-ask, to the question)."""
    markers: dict[str, list[str]] | None = None
    """Marker lexicon (``concession`` / ``grounding``) for the optional margin feature; off when ``None``."""
    user: list[str] = Field(default_factory=list)
    """User feature callables, ``module:function``."""
    reading: CalibratedReading | None = None
    """The reading thresholds calibration used (``None``: not recorded)."""
    guard: CalibratedGuard | None = None
    """The guard settings calibration used (``None``: not recorded)."""
    reask: bool | None = None
    """Whether the calibration cases had second answers (a re-ask follow-up's, recorded
    in the panels or a model's): the re-ask and order-stability features read them, and a
    run without them (or with them, when calibration had none) would score its cases on
    features that do not mean what they meant at calibration (``None``: not recorded)."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The settings without the records left unrecorded: a file that records none
        is written as before they existed."""
        data: dict[str, Any] = handler(self)
        for key in ("reading", "guard", "reask"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class AcceptanceFile(BaseModel):
    """A fitted acceptance model with its guarantee."""

    model_config = ConfigDict(extra="forbid", strict=True)

    format: str = ACCEPTANCE_FORMAT
    description: str = ""
    built_from: list[str] = Field(default_factory=list)
    settings: FeatureSettings = Field(default_factory=FeatureSettings)
    features: list[str]
    libraries: dict[str, str]
    family: str = "learned"
    """The score family that decides (:mod:`dissensus.acceptance.families`)."""
    family_rule: Literal["bonferroni", "split", "given"] = "given"
    """How it was chosen: ``bonferroni``, ``split`` or ``given`` (named by the caller)."""
    families: list[FamilyFigures] = Field(default_factory=list)
    """Every family's figures at calibration (what ``--explain`` prints)."""
    models: list[LogisticModel] = Field(min_length=1)
    """The cross-fitted fold models; a new case is scored by one of them."""
    fold_of_stratum: dict[str, int] = Field(default_factory=dict)
    """Stratum -> index of the model that never saw it (stratified calibrations only)."""
    threshold: Unit | None
    """Accept when the best candidate's score is ``>= threshold``; ``None``: accept nothing."""
    threshold_reason: str
    target_precision: Open
    delta: Open
    min_accepted: Count
    calibration_n: Count
    """Calibration cases: those acceptance judges under the deciding policy, on which the
    threshold was tested (its figures and the guarantee count them); under
    ``family_rule: split``, the half of them that tested it."""
    selection_n: Count | None = None
    """Under ``family_rule: split``, the judged cases of the other half, which chose the
    score family (``None``: no split). The shift reference holds every judged case:
    ``calibration_n + selection_n``."""
    fitted_n: Count | None = None
    """Labelled cases the model was fitted on, when more than the judged cases were
    given (``None``: the same cases)."""
    strata_field: str | None = None
    strata: list[StratumFigures] = Field(default_factory=list)
    calibration_accepted: Count = 0
    calibration_correct: Count = 0
    error_upper: Unit = 1.0
    shift_reference: ShiftReference | None = None
    """The calibration cases' feature vectors for the label-free shift check
    (:func:`~dissensus.acceptance.shift.shift_check`)."""
    sha256: str = ""

    @model_validator(mode="after")
    def _consistent(self, info: ValidationInfo) -> AcceptanceFile:
        """The checks of the module docstring (:class:`Inconsistent` naming the field)."""
        if self.family not in FAMILIES:
            raise Inconsistent(
                "family", f"unknown score family {self.family!r} (one of {', '.join(FAMILIES)})"
            )
        if len(set(self.features)) != len(self.features):
            raise Inconsistent("features", "a feature is named twice")
        for k, model in enumerate(self.models):
            if model.features != self.features:
                raise Inconsistent(f"models.{k}.features", "differs from the file's feature list")
        for stratum, fold in self.fold_of_stratum.items():
            if not 0 <= fold < len(self.models):
                raise Inconsistent(
                    f"fold_of_stratum.{stratum}",
                    f"model {fold} does not exist (the file has {len(self.models)})",
                )
        judged = self.calibration_n + (self.selection_n or 0)
        if self.fitted_n is not None and self.fitted_n < judged:
            raise Inconsistent(
                "fitted_n",
                f"{self.fitted_n} fitted cases, fewer than the {judged} calibrated",
            )
        if self.selection_n is not None and self.family_rule != "split":
            raise Inconsistent(
                "selection_n", f"only family_rule split sets it (the rule is {self.family_rule})"
            )
        _counts(
            "calibration_accepted",
            self.calibration_n,
            self.calibration_accepted,
            self.calibration_correct,
        )
        for k, st in enumerate(self.strata):
            where = f"strata.{k}"
            _counts(where, st.n, st.accepted, st.correct)
            if not (_in_unit(st.threshold) and _in_unit(st.error_upper)):
                raise Inconsistent(where, "threshold and error_upper must be in [0, 1]")
        for k, fam in enumerate(self.families):
            where = f"families.{k}"
            if fam.family not in FAMILIES:
                raise Inconsistent(f"{where}.family", f"unknown score family {fam.family!r}")
            _counts(where, fam.cases, fam.accepted, fam.correct)
            if not (_in_unit(fam.threshold) and 0.0 < fam.delta < 1.0):
                raise Inconsistent(
                    where, "threshold must be in [0, 1] and delta strictly between 0 and 1"
                )
        if not _is_journalled(info):
            if self.threshold is not None:
                self._passes()
            self._bounds_recomputed()
            if self.threshold is not None:
                self._threshold_stated()
        ref = self.shift_reference
        if ref is None and "shift_reference" in self.model_fields_set and not _is_journalled(info):
            # Files written before the shift check have no such field; every file written
            # since keeps its calibration cases' vectors: a null is an edit that would
            # turn the check off in silence.
            raise Inconsistent(
                "shift_reference",
                "null: a file keeps its calibration cases' vectors for the shift check "
                "(only files written before the check have no shift_reference field)",
            )
        if "shift_reference" not in self.model_fields_set and not _is_journalled(info):
            self._reference_expected()
        if ref is not None:
            if len(ref.rows) != judged and not _is_journalled(info):
                split = f" + {self.selection_n} (selection_n)" if self.selection_n else ""
                raise Inconsistent(
                    "shift_reference.rows",
                    f"{len(ref.rows)} rows, one per calibration case expected: "
                    f"{self.calibration_n} (calibration_n){split}",
                )
            width = len(ref.features)
            if len(set(ref.features)) != width:
                raise Inconsistent("shift_reference.features", "a feature is named twice")
            for k, row in enumerate(ref.rows):
                if len(row) != width:
                    raise Inconsistent(
                        f"shift_reference.rows.{k}", f"{len(row)} values for {width} features"
                    )
                for value in row:
                    why = bad_value(value)
                    if why is not None:
                        raise Inconsistent(f"shift_reference.rows.{k}", why)
            if self.threshold is not None and ref.copies_of_one_row() and not _is_journalled(info):
                raise Inconsistent(
                    "shift_reference.rows",
                    f"all {len(ref.rows)} rows are one vector: copies of one row, no sample "
                    "of the calibration cases to compare new cases with",
                )
        return self

    def _reference_expected(self) -> None:
        """A file without ``shift_reference`` was written by a version before the shift
        check, as far as it says (:class:`Inconsistent` otherwise)."""
        written = self.libraries.get("dissensus")
        release = _release(written)
        if release is not None and release > BEFORE_SHIFT_CHECK:
            raise Inconsistent(
                "shift_reference",
                f"missing, but the file records dissensus {written}, which keeps its "
                "calibration cases' vectors for the shift check (only files of version "
                "0.1.0, written before the check, have no shift_reference field); without "
                "them the check would be off without a word",
            )

    def _passes(self) -> None:
        """A threshold's figures pass the test that chose it (:class:`Inconsistent`)."""
        allowed = 1.0 - self.target_precision + 1e-9  # the test's own float comparison
        if self.calibration_accepted < self.min_accepted:
            raise Inconsistent(
                "calibration_accepted",
                f"{self.calibration_accepted} accepted calibration cases, fewer than "
                f"min_accepted ({self.min_accepted}), yet a threshold is set",
            )
        if self.strata:
            for k, st in enumerate(self.strata):
                if st.threshold is not None and st.error_upper > allowed:
                    raise Inconsistent(
                        f"strata.{k}.error_upper",
                        f"{st.error_upper:g} is above 1 - target_precision "
                        f"({1.0 - self.target_precision:g}), yet a threshold is set",
                    )
        elif self.error_upper > allowed:
            raise Inconsistent(
                "error_upper",
                f"{self.error_upper:g} is above 1 - target_precision "
                f"({1.0 - self.target_precision:g}), yet a threshold is set",
            )

    def tested_at(self) -> float:
        """The level the threshold's figures were computed at: the chosen family's share
        of ``delta`` (its entry of ``families``) under the Bonferroni rule or a given family,
        ``delta`` under the split rule (the testing half ran at ``delta``) or in a file
        without family figures."""
        if self.family_rule == "split":
            return self.delta
        chosen = next((f for f in self.families if f.family == self.family and f.competing), None)
        return chosen.delta if chosen is not None else self.delta

    def _bounds_recomputed(self) -> None:
        """Each stated error bound is the Clopper–Pearson bound of its own counts at the
        level the file says it was tested at, and the levels the competing families spent
        add up to at most ``delta`` (:class:`Inconsistent` naming the field)."""
        from dissensus.acceptance.bound import clopper_pearson_upper

        level = self.tested_at()
        if level > self.delta * _SLACK:
            raise Inconsistent(
                "families",
                f"the chosen family ({self.family}) was tested at {level:g}, above the "
                f"file's delta ({self.delta:g})",
            )
        # Files written before families said whether they competed (``competing``
        # absent) are checked by the chosen family's level alone.
        competing = [
            (k, f)
            for k, f in enumerate(self.families)
            if f.competing and "competing" in f.model_fields_set
        ]
        if self.family_rule == "split":
            over = next(((k, f) for k, f in competing if f.delta > self.delta * _SLACK), None)
            if over is not None:
                raise Inconsistent(
                    f"families.{over[0]}.delta",
                    f"{over[1].delta:g} is above the file's delta ({self.delta:g})",
                )
        elif (spent := sum(f.delta for _, f in competing)) > self.delta * _SLACK:
            raise Inconsistent(
                "families",
                f"the competing families' levels add up to {spent:g}, above the file's "
                f"delta ({self.delta:g})",
            )
        stated = [
            ("error_upper", self.calibration_accepted, self.calibration_correct, self.error_upper)
        ]
        stated += [
            (f"strata.{k}.error_upper", st.accepted, st.correct, st.error_upper)
            for k, st in enumerate(self.strata)
        ]
        for where, accepted, correct, upper in stated:
            bound = clopper_pearson_upper(accepted - correct, accepted, level)
            if not math.isclose(upper, bound, rel_tol=1e-9, abs_tol=1e-12):
                raise Inconsistent(
                    where,
                    f"{upper:g} is not the error bound of its counts: {accepted - correct} "
                    f"wrong of {accepted} accepted give {bound:.6g} (Clopper–Pearson at level "
                    f"{level:g})",
                )

    def _threshold_stated(self) -> None:
        """The threshold is the one its reason and the chosen family's figures state,
        where they state one (:class:`Inconsistent` naming the field)."""
        said = _REASON.fullmatch(self.threshold_reason)
        threshold = self.threshold
        assert threshold is not None
        if said is not None:
            if abs(threshold - float(said["threshold"])) > 5e-5 + 1e-12:
                raise Inconsistent(
                    "threshold",
                    f"{threshold:g}, but threshold_reason says accept score >= {said['threshold']}",
                )
            for field, value in (
                ("calibration_correct", said["correct"]),
                ("calibration_accepted", said["accepted"]),
            ):
                if getattr(self, field) != int(value):
                    raise Inconsistent(
                        field,
                        f"{getattr(self, field)}, but threshold_reason says "
                        f"{said['correct']}/{said['accepted']} right",
                    )
            if abs(self.error_upper - float(said["upper"])) > 5e-4 + 1e-12:
                raise Inconsistent(
                    "error_upper",
                    f"{self.error_upper:g}, but threshold_reason says error upper bound "
                    f"{said['upper']}",
                )
            if abs((1.0 - self.target_precision) - float(said["allowed"])) > 5e-4 + 1e-12:
                raise Inconsistent(
                    "target_precision",
                    f"{self.target_precision:g}, but threshold_reason tested the error bound "
                    f"against {said['allowed']}",
                )
        if self.family_rule == "split":
            return  # the chosen family's figures are the choosing half's, not the threshold's
        chosen = next((f for f in self.families if f.family == self.family and f.competing), None)
        if chosen is None:
            return
        if chosen.threshold is None or not math.isclose(
            threshold, chosen.threshold, rel_tol=1e-12, abs_tol=1e-12
        ):
            raise Inconsistent(
                "threshold",
                f"{threshold:g}, but the chosen family's figures (families: {self.family}) "
                f"say {chosen.threshold}",
            )
        if (chosen.accepted, chosen.correct) != (
            self.calibration_accepted,
            self.calibration_correct,
        ):
            raise Inconsistent(
                "calibration_accepted",
                f"{self.calibration_correct}/{self.calibration_accepted} right, but the chosen "
                f"family's figures (families: {self.family}) say "
                f"{chosen.correct}/{chosen.accepted}",
            )

    def guarantee(self) -> str:
        """The guarantee in one sentence."""
        if self.threshold is None:
            return f"acceptance accepts nothing: {self.threshold_reason}"
        return (
            f"auto-accepted cases: precision >= {target_words(self.target_precision)} with "
            f"probability >= {target_words(confidence(self.delta))} if these panels are exchangeable with the {self.calibration_n} calibration cases "
            f"(score family {self.family})"
        )


def canonical_hash(data: JsonObject) -> str:
    """sha256 of ``data`` without its ``sha256`` field, as canonical JSON."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def save_acceptance(acc: AcceptanceFile, path: str | Path) -> AcceptanceFile:
    """Write ``acc`` with its hash filled in (atomically: a temporary file renamed over
    ``path``); returns the hashed model. A failed write is an
    :class:`~dissensus.io.atomic.OutputWriteError` (exit 1), the previous file whole."""
    data = acc.model_dump(mode="json")
    data["sha256"] = canonical_hash(data)
    try:
        atomic_write_text(path, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise ConfigError(
            f"cannot write acceptance file: {exc.strerror or exc}", file=str(path)
        ) from None
    # An OutputWriteError (a full disk, a size limit: the write itself failed) goes out as
    # it is: exit 1 and "cannot write the output file ...", as every command's output.
    return AcceptanceFile.model_validate(data)


def _refused(exc: ValidationError, name: str) -> ConfigError:
    """The first problem of ``exc`` as one :class:`ConfigError` naming ``name`` and the field."""
    first = exc.errors()[0]
    loc = [str(p) for p in first["loc"]]
    message = str(first["msg"])
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, Inconsistent):
        loc.append(cause.field)
        message = str(cause)
    elif message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    return ConfigError(message, file=name, field=".".join(loc) or None)


_FAMILY_OF_FORMATS = re.compile(r"dissensus\.acceptance/\S+\Z")
"""Any version of the acceptance format: one this version does not read is named as such."""


def _version_of(data: dict[str, Any]) -> str:
    libraries = data.get("libraries")
    version = libraries.get("dissensus") if isinstance(libraries, dict) else None
    return quote_short(version) if isinstance(version, str) else "not recorded"


def validate_acceptance(
    data: Any, name: str | None = None, *, journalled: bool = False
) -> AcceptanceFile:
    """``data`` (an acceptance file's JSON) as an :class:`AcceptanceFile`, its format and
    content checked (not its sha256); a :class:`ConfigError` naming ``name`` and the field
    otherwise.

    ``journalled``: ``data`` is the copy a run keeps, checked when the run started; it is
    read as it was then (numbers by their conversion, the shift reference's size
    unchecked), so that a run started by an earlier version still resumes.
    """
    label = name or "acceptance file"
    if isinstance(data, dict) and data.get("format") in OLD_FORMATS:
        raise ConfigError(
            f"acceptance file format {data.get('format')!r} is no longer read: re-run "
            "`dissensus calibrate-acceptance` to write the current format",
            file=label,
            field="format",
        )
    got = data.get("format") if isinstance(data, dict) else None
    if isinstance(got, str) and got != ACCEPTANCE_FORMAT and _FAMILY_OF_FORMATS.match(got):
        raise ConfigError(
            f"acceptance file format {quote_short(got)} is not one this version of dissensus reads "
            f"(it reads {ACCEPTANCE_FORMAT!r}; a later version wrote it?): use the version "
            f"that calibrated it (libraries.dissensus: {_version_of(data)}), or re-run "
            "`dissensus calibrate-acceptance` with this one",
            file=label,
            field="format",
        )
    if not isinstance(data, dict) or data.get("format") != ACCEPTANCE_FORMAT:
        raise ConfigError(
            f"not an acceptance file (format {got!r}, expected {ACCEPTANCE_FORMAT!r})",
            file=label,
            field="format",
        )
    try:
        if journalled:
            return AcceptanceFile.model_validate(data, strict=False, context={JOURNALLED: True})
        return AcceptanceFile.model_validate(data)
    except ValidationError as exc:
        raise _refused(exc, label) from None


def read_acceptance(path: str | Path) -> tuple[AcceptanceFile, JsonObject]:
    """Read and verify an acceptance file: the model and the file's own JSON (what a run
    keeps: not a re-dump, which would add fields a newer version defaults and change the
    content its sha256 covers). A :class:`ConfigError` naming the file and the field when
    it cannot be used."""
    name = str(path)
    data: Any = load_json_file(path, what="acceptance file")
    current = isinstance(data, dict) and data.get("format") == ACCEPTANCE_FORMAT
    if current and data.get("sha256") != canonical_hash(data):
        raise ConfigError(
            "content does not match its sha256: the file was modified after calibration",
            file=name,
            field="sha256",
        )
    return validate_acceptance(data, name), data


def load_acceptance(path: str | Path) -> AcceptanceFile:
    """Read and verify an acceptance file (:class:`ConfigError` naming the field otherwise)."""
    return read_acceptance(path)[0]
