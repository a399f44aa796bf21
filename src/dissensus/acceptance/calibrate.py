"""Calibrate an acceptance model on labelled cases, and apply it to a new case.

:func:`calibrate` = cross-fitted scores and fold models (:mod:`dissensus.acceptance.fit`)
-> fixed-sequence threshold (:mod:`dissensus.acceptance.bound`) ->
:class:`~dissensus.acceptance.file.AcceptanceFile` holding the fold models.
:func:`apply_acceptance` scores one case and says whether its best candidate may be
committed, with the figures every record quotes.

The score family (:mod:`dissensus.acceptance.families`: the learned model, vote counts,
order-stable agreement, the guard's posterior) is chosen with the threshold by a rule
that keeps the guarantee (``rule``; a ``family`` given by the caller is the only one
tried, at the full ``delta``); the file names it and every record quotes it.

Choices this module makes: a case whose gold answer is none of its candidates
still counts (its best candidate is wrong). The model's features are
:func:`~dissensus.acceptance.fit.feature_list` of the cases and their golds: when every
gold is one label, no ``option=<label>`` feature (it could learn only that label; the
file is still written, and ``calibrate-acceptance`` warns that the guarantee holds only
for cases drawn like these). With ``strata``, a stratum too small to
be calibrated is refused before anything is fitted (:func:`check_strata`), and
:func:`apply_acceptance` accepts no case of a stratum the file was not calibrated on (a
stratified guarantee holds in each stratum calibrated, and says nothing of another: a
file calibrated on two adversarial subsets committed 88 of 100 cases of a third).
``strata`` needs ``strata_field`` (an :class:`~dissensus.errors.InputError` naming it
otherwise): a file with strata and no field name cannot say which stratum a new case is
in, and one written so before the field was required accepts no case (every door
passed such a file no stratum, and it committed cases of any). Each stratum is read as
every door reads a case's (:func:`stratum_of`: ``True`` is ``"true"``, ``7.0`` is
``"7"``, ``None`` is :data:`MISSING_STRATUM`): strata passed as the raw ``meta`` values
were named by ``str`` (``True``, ``7.0``, ``None``), so the file accepted no case
through any door, and ``None`` beside a number failed with a ``TypeError``; a value that
names no stratum (a list, an object, a non-finite number) is an
:class:`~dissensus.errors.InputError` naming ``strata[i]``. Under the
``split`` family rule the file's ``calibration_n`` and figures are those of the half
that tested the threshold (what the bound counted), ``selection_n`` the half that
chose the family; the shift reference keeps both. The cases are taken to be distinct: the
bound counts each as an independent draw, so a copy of a case would inflate it
(``calibrate-acceptance`` drops a repeated panel id and a panel repeated under another
id before it calibrates, warning about each, and passes a hash of what acceptance
reads of each panel but its gold as ``keys``, so that a near copy, differing only in a
``meta`` key nothing reads, shares its original's cross-fit fold). Judged
cases that all have one and the same feature vector are no sample for the shift check: a
calibration that would set a threshold on them is refused (an
:class:`~dissensus.errors.InputError`), as a file whose reference is copies of one row is. Every feature value must be finite and at most
:data:`~dissensus.acceptance.features.FEATURE_BOUND` in magnitude (a
:class:`~dissensus.errors.ConfigError` naming the case and the feature otherwise). The deployed models are the fold models
whose out-of-fold scores chose the threshold, so a new case's score has the calibration
scores' distribution; the guarantee then rests on exchangeability as in Trust or
Escalate, up to the weak dependence cross-fitting introduces between calibration
scores (fold models share training cases), which ``evaluation/acceptance.py`` measures.

The arguments are checked before anything is fitted: ``target`` and ``delta`` real
numbers strictly between 0 and 1 (not a boolean or a quoted number), ``min_accepted`` a
non-negative integer, one gold (and stratum and key, when given) per case, ``rule``
``bonferroni`` or ``split``, ``family`` no empty list, ``seed`` an integer in ``[0,
2**32)``, ``grid`` a positive integer, a ``CountGrid`` or ``None``, ``judged`` one
boolean per case; otherwise an :class:`~dissensus.errors.InputError` naming the
argument, where a negative ``min_accepted`` or an unknown ``rule`` was a pydantic
traceback after the whole fit, a quoted ``delta`` a ``TypeError``, ``grid=0`` a
``ZeroDivisionError`` and ``judged`` marks of strings were read as true. Each gold is read as a decision is (:func:`~dissensus.types.gold_label`, as
``calibrate-acceptance`` reads ``meta.gold``): golds given as numbers (``[1, 2, ...]``,
a NumPy array) were compared with the candidates' string labels and every case counted
wrong, so the file accepted nothing without a word; a gold that names no decision
(``None``, blank, a list, or a NumPy array of any shape but 0-d, even of one element)
is an :class:`~dissensus.errors.InputError` naming ``golds[i]``. A stratum that differs
from a calibrated one only by Unicode normalisation is not that stratum (it is refused,
as any other), and the reason spells both by their code points, which print alike.

``judged`` marks the cases acceptance would judge under the deciding policy (its routing
and guard: :func:`dissensus.pipeline.gates.judged_by_acceptance`; ``calibrate-acceptance``
passes it). The model is fitted on every labelled case, but the threshold, the figures,
the strata and the shift check's reference come from the judged cases alone: they are
the population the guarantee speaks of and the run's shift check compares with (a
convergent disagreement the default routing escalates is never judged, so counting it
would both misstate the guarantee and make every run look shifted).
"""

from __future__ import annotations

import numbers
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, get_args

import numpy as np

from dissensus.acceptance.bound import (
    DEFAULT_SEQUENCE,
    CountGrid,
    Grid,
    fewest_tested,
    floor_words,
    named,
)
from dissensus.acceptance.families import (
    DEFAULT_FAMILIES,
    FAMILIES,
    SelectionRule,
    family_score,
    family_scores,
    select_family,
)
from dissensus.acceptance.features import Candidate, first_bad
from dissensus.acceptance.file import AcceptanceFile, FeatureSettings
from dissensus.acceptance.fit import (
    CrossFit,
    crossfit,
    feature_list,
    fold_index,
    fold_of_key,
    score_case,
)
from dissensus.acceptance.shift import reference
from dissensus.errors import ConfigError, InputError
from dissensus.types import AcceptanceFigures, gold_label, normalise_label

__all__ = [
    "LABEL_STRATA",
    "MISSING_STRATUM",
    "AcceptanceVerdict",
    "apply_acceptance",
    "calibrate",
    "check_strata",
    "file_stratum",
    "library_versions",
    "model_for",
    "names_strata_older",
    "stratum_of",
    "stratum_refusal",
    "uncovered_stratum",
]


def library_versions() -> dict[str, str]:
    """Versions of the libraries the model depends on."""
    out: dict[str, str] = {}
    from dissensus.version import __version__

    out["dissensus"] = __version__  # the code writing the file, installed or not
    for name in ("scikit-learn", "scipy", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "unknown"
    return out


def _check_arguments(
    cases: Sequence[Sequence[Candidate]],
    golds: Sequence[str],
    *,
    target: object,
    delta: object,
    min_accepted: object,
    strata: Sequence[object] | None,
    strata_field: str | None = None,
    keys: Sequence[str] | None,
) -> None:
    """Refuse what :func:`calibrate` cannot take, before anything is fitted: an
    :class:`~dissensus.errors.InputError` naming the argument (a level that is not a
    number strictly between 0 and 1, a ``min_accepted`` that is not a non-negative
    integer, golds, strata or keys that do not pair one with each case, strata without
    ``strata_field``)."""
    for name, value in (("target", target), ("delta", delta)):
        if (
            isinstance(value, bool)
            or not isinstance(value, numbers.Real)
            or not 0.0 < float(value) < 1.0
        ):
            error = InputError(f"{name} must be a number strictly between 0 and 1, not {value!r}")
            error.field = name
            raise error
    if (
        isinstance(min_accepted, bool)
        or not isinstance(min_accepted, numbers.Integral)
        or (int(min_accepted) < 0)
    ):
        error = InputError(f"min_accepted must be a non-negative integer, not {min_accepted!r}")
        error.field = "min_accepted"
        raise error
    for name, values in (("golds", golds), ("strata", strata), ("keys", keys)):
        if values is not None and len(values) != len(cases):
            error = InputError(f"{name} has {len(values)} entries for {len(cases)} cases")
            error.field = name
            raise error
    if strata is not None and not strata_field:
        error = InputError(
            "strata needs strata_field: the meta field the strata were read from, so that "
            "a new case's stratum can be read; a file without it could not tell which "
            "stratum's guarantee a case falls under"
        )
        error.field = "strata_field"
        raise error


def _shown(value: object) -> str:
    """``repr(value)`` for a message, cut to 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


def _check_choices(
    cases: Sequence[Sequence[Candidate]],
    *,
    family: object,
    rule: object,
    seed: object,
    grid: object,
    judged: Sequence[object] | None,
) -> None:
    """Refuse, before anything is fitted, the choices :func:`calibrate` cannot take: an
    :class:`~dissensus.errors.InputError` naming the argument (an unknown family rule, an
    empty list of families, a seed that is no integer in ``[0, 2**32)``, a grid of no
    points, ``judged`` marks that are not booleans or not one per case)."""

    def refuse(field: str, message: str) -> None:
        error = InputError(message)
        error.field = field
        raise error

    if rule not in get_args(SelectionRule):
        refuse("rule", f"rule is 'bonferroni' or 'split', not {_shown(rule)}")
    if isinstance(family, Sequence) and not isinstance(family, str) and len(family) == 0:
        refuse("family", "family names no score family: give one, a list of them, or None")
    if (
        isinstance(seed, bool)
        or not isinstance(seed, numbers.Integral)
        or not 0 <= int(seed) < 2**32
    ):
        refuse("seed", f"seed must be an integer in [0, 2**32), not {_shown(seed)}")
    if (
        grid is not None
        and not isinstance(grid, CountGrid)
        and (isinstance(grid, bool) or not isinstance(grid, int) or grid < 1)
    ):
        refuse(
            "grid",
            f"grid must be a positive integer, a CountGrid or None, not {_shown(grid)}",
        )
    if judged is not None:
        if len(judged) != len(cases):
            refuse("judged", f"judged marks {len(judged)} cases, not {len(cases)}")
        for i, mark in enumerate(judged):
            if not isinstance(mark, (bool, np.bool_)):
                refuse(f"judged.{i}", f"judged[{i}] must be a boolean, not {_shown(mark)}")


def _gold_labels(golds: Sequence[object]) -> list[str]:
    """Each gold read as a decision is (:func:`~dissensus.types.gold_label`: ``2`` and
    ``2.0`` are ``"2"``, ``True`` is ``"true"``; a NumPy scalar as its Python value, a
    NumPy array of any other shape as a list, even of one element), or
    an :class:`~dissensus.errors.InputError` naming ``golds[i]`` for one that names no
    decision (``None``, blank, a list, a non-finite number)."""
    out: list[str] = []
    for i, raw in enumerate(golds):
        value = raw
        if not isinstance(value, str) and hasattr(value, "item"):
            if getattr(value, "ndim", 0) != 0 and hasattr(value, "tolist"):
                # An array of any shape but 0-d is a list (refused as the list [2] is),
                # not its one element (np.array([2]).item() is 2).
                value = value.tolist()
            else:
                value = value.item()  # a NumPy scalar: its Python number
        try:
            label = gold_label({"gold": value})
        except ValueError as exc:
            label, why = None, str(exc)
        else:
            why = "the gold decision is missing (None)"
        if label is None:
            error = InputError(f"golds[{i}]: {why}; every case needs the decision that was right")
            error.field = f"golds.{i}"
            raise error
        out.append(label)
    return out


def _stratum_labels(strata: Sequence[object]) -> list[str]:
    """Each stratum read as every door reads a case's (:func:`stratum_of`: ``True`` is
    ``"true"``, ``7.0`` is ``"7"``, ``None`` is :data:`MISSING_STRATUM`; a NumPy scalar as
    its Python value), or an :class:`~dissensus.errors.InputError` naming ``strata[i]``
    for a value that names no stratum (a list, an object, a non-finite number)."""
    out: list[str] = []
    for i, raw in enumerate(strata):
        value = raw
        if not isinstance(value, str) and getattr(value, "ndim", None) == 0:
            value = value.item()  # type: ignore[attr-defined]  # a NumPy scalar
        meta = {"stratum": value}
        why = stratum_refusal(meta, "stratum")
        if why is not None:
            error = InputError(f"strata[{i}]: {why}")
            error.field = f"strata.{i}"
            raise error
        out.append(str(stratum_of(meta, "stratum")))
    return out


def calibrate(
    cases: Sequence[Sequence[Candidate]],
    golds: Sequence[str],
    *,
    target: float = 0.9,
    delta: float = 0.1,
    min_accepted: int = 30,
    strata: Sequence[object] | None = None,
    strata_field: str | None = None,
    settings: FeatureSettings | None = None,
    built_from: list[str] | None = None,
    description: str = "",
    seed: int = 0,
    fitted: CrossFit | None = None,
    family: str | Sequence[str] | None = None,
    rule: SelectionRule = "bonferroni",
    grid: Grid = DEFAULT_SEQUENCE,
    judged: Sequence[bool] | None = None,
    keys: Sequence[str] | None = None,
) -> AcceptanceFile:
    """Fit, cross-fit, choose the score family and threshold (see the module docstring);
    the result is not yet hashed.

    ``fitted``: the cross-fit of these very cases (:func:`crossfit` with the same
    strata and seed), when the caller needs its out-of-fold scores too. ``family``: use
    only this score family, or choose among these (default
    :data:`~dissensus.acceptance.families.DEFAULT_FAMILIES`). ``judged``: which cases
    acceptance would judge (see the module docstring; default: all). ``keys``: what makes
    two cases the same case (e.g. :func:`~dissensus.acceptance.fit.case_key` of each panel),
    for the folds (:func:`~dissensus.acceptance.fit.crossfit`).
    """
    _check_arguments(
        cases, golds, target=target, delta=delta, min_accepted=min_accepted, strata=strata,
        strata_field=strata_field, keys=keys,
    )  # fmt: skip
    _check_choices(cases, family=family, rule=rule, seed=seed, grid=grid, judged=judged)
    golds = _gold_labels(golds)
    groups = None if strata is None else _stratum_labels(strata)
    compete = (
        list(DEFAULT_FAMILIES)
        if family is None
        else [family]
        if isinstance(family, str)
        else list(family)
    )
    for name in compete:
        if name not in FAMILIES:
            raise ConfigError(
                f"unknown score family {name!r} (one of {', '.join(FAMILIES)})", field="family"
            )
    for k, rows in enumerate(cases):
        bad = first_bad([c.features for c in rows])
        if bad is not None:
            raise ConfigError(f"case {k}: feature {bad[0]}: {bad[1]}", field="cases")
    if groups is not None:
        check_strata(
            groups,
            judged,
            target=target,
            delta=delta,
            min_accepted=min_accepted,
            field=strata_field,
        )
    feats = feature_list(cases, golds)
    if fitted is None:
        fitted = crossfit(cases, golds, groups=groups, seed=seed, features=feats, keys=keys)
    scores = {"learned": fitted.scores}
    for name in FAMILIES[1:]:
        scores[name] = family_scores(name, cases)
    fitted_n = len(cases)
    if judged is not None:
        keep = [i for i, j in enumerate(judged) if j]
        scores = {name: [values[i] for i in keep] for name, values in scores.items()}
        cases = [cases[i] for i in keep]
        golds = [golds[i] for i in keep]
        groups = None if groups is None else [groups[i] for i in keep]
    chosen, choice, figures = select_family(
        scores,
        golds,
        target=target,
        delta=delta,
        min_accepted=min_accepted,
        strata=groups,
        grid=grid,
        rule=rule,
        seed=seed,
        compete=compete,
    )
    # Under the split rule the threshold and its figures come from the testing half:
    # that half is the calibration the bound counted; the other chose the family.
    tested = choice.cases
    ref = reference(cases)
    if choice.threshold is not None and ref.copies_of_one_row():
        raise InputError(
            f"the {len(ref.rows)} calibration cases acceptance judges all have one and the "
            "same feature vector: the shift check would have no sample to compare new cases "
            "with; label more varied cases"
        )
    return AcceptanceFile(
        shift_reference=ref,
        family=chosen,
        family_rule=rule if len(compete) > 1 else "given",
        families=figures,
        description=description,
        built_from=list(built_from or []),
        settings=settings or FeatureSettings(),
        features=feats,
        libraries=library_versions(),
        models=fitted.models,
        fold_of_stratum=fitted.fold_of_group,
        threshold=choice.threshold,
        threshold_reason=choice.reason,
        target_precision=target,
        delta=delta,
        min_accepted=min_accepted,
        calibration_n=tested,
        selection_n=len(cases) - tested if tested < len(cases) else None,
        fitted_n=fitted_n if fitted_n > tested else None,
        strata_field=strata_field,
        strata=choice.strata if groups is not None else [],
        calibration_accepted=choice.accepted,
        calibration_correct=choice.correct,
        error_upper=choice.error_upper,
    )


class AcceptanceVerdict(AcceptanceFigures):
    """May the case be committed? The figures each record quotes
    (:class:`~dissensus.types.AcceptanceFigures`), with the answer and why."""

    accepted: bool
    decision: str | None
    """The best-scored candidate (committed only when ``accepted``)."""
    reason: str


MISSING_STRATUM = "(none)"
"""The stratum of a panel without the strata field, or with ``null`` in it."""


def stratum_of(meta: Mapping[str, Any], field: str | None) -> str | None:
    """A panel's stratum under ``field`` (``None`` without a strata field).

    The value is read as a label, as a decision is
    (:func:`~dissensus.types.normalise_label`: ``"Natural"`` and ``7`` as written, ``7``
    and ``"7"`` one stratum, ``7.0`` -> ``"7"``, ``true`` -> ``"true"``); a missing field
    and ``null`` are :data:`MISSING_STRATUM`. A list or an object is no stratum:
    calibration refuses it (:func:`stratum_refusal`); when deciding, where a case must
    not fail on its metadata, it is named as before (Python's ``str``), which no file
    written now knows. Files written before named strata with ``str``:
    :func:`file_stratum` finds a stratum under the name such a file gave it (in those
    files alone: :func:`names_strata_older`).
    """
    if not field:
        return None
    value = meta.get(field)
    if value is None:
        return MISSING_STRATUM
    label = normalise_label(value)
    return label if isinstance(label, str) else str(value)


def stratum_refusal(meta: Mapping[str, Any], field: str) -> str | None:
    """Why the value of ``meta[field]`` cannot name a calibration stratum (a list or an
    object), or ``None`` when it can."""
    value = meta.get(field)
    if value is None or isinstance(normalise_label(value), str):
        return None
    kind = (
        "an object"
        if isinstance(value, dict)
        else "a list"
        if isinstance(value, list)
        else f"{value!r}"
        if isinstance(value, float)
        else f"a {type(value).__name__}"
    )
    return f"a stratum is a string, number or boolean, not {kind}"


def _older_names(name: str) -> list[str]:
    """The names ``str()`` gave, in files written before, to the values now named ``name``."""
    if name == MISSING_STRATUM:
        return ["None"]
    if name in ("true", "false"):
        return [name.capitalize()]
    try:
        number = int(name)
    except ValueError:
        return []
    if str(number) != name:
        return []
    try:
        return [str(float(number))]  # an integral float: 7.0 was "7.0"
    except OverflowError:
        return []


LABEL_STRATA = (0, 3, 1)
"""The first version of dissensus whose files name strata as labels (:func:`stratum_of`);
files of earlier versions (and files recording no version) may name them as ``str`` did."""

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def names_strata_older(libraries: Mapping[str, Any] | None) -> bool:
    """Whether a file whose ``libraries`` are these may name strata the older way
    (``str``: ``True``, ``7.0``, ``None``): written before :data:`LABEL_STRATA`, or
    recording no version it could be told apart by. 0.3.0 wrote both kinds."""
    written = (libraries or {}).get("dissensus")
    found = _VERSION.match(written) if isinstance(written, str) else None
    if found is None:
        return True
    release = (int(found[1]), int(found[2]), int(found[3] or 0))
    return release < LABEL_STRATA


def file_stratum(name: str, known: Collection[str], *, older: bool = True) -> str:
    """Stratum ``name`` as a file knowing the strata ``known`` spells it: ``name``, or,
    with ``older`` (a file written before the label rule: :func:`names_strata_older`), the
    name such a file gave the same value (``True``, ``7.0``, ``None``) when the file knows
    that one and not ``name``. A file written since names each value once, as a label, so
    ``"None"`` or ``"True"`` there is a stratum of its own, not another spelling."""
    if name in known or not older:
        return name
    return next((old for old in _older_names(name) if old in known), name)


def check_strata(
    strata: Sequence[str],
    judged: Sequence[bool] | None = None,
    *,
    target: float,
    delta: float,
    min_accepted: int,
    field: str | None = None,
) -> None:
    """Refuse strata too small to be calibrated (an :class:`~dissensus.errors.InputError`
    naming them, with their sizes); ``strata``: each labelled case's stratum, ``judged``:
    which cases acceptance judges (default: all).

    The minimum is what a stratum's fold needs to be tested: a threshold is tested only
    when it accepts at least ``max(min_accepted, fewest_tested(target, delta))`` cases in
    *every* stratum (:mod:`dissensus.acceptance.bound`), so a stratum with fewer judged
    cases than that never tests one and the calibration would accept nothing, whatever
    the scores. The folds are the strata (each scored by a model fitted on the others),
    so a stratum holding fewer labelled cases than that minimum is refused too, judged
    or not: with two strata, the model scoring the large one would be fitted on the
    small one alone. One stratum is no stratification and is not checked.
    """
    labelled = Counter(strata)
    if len(labelled) < 2:
        return
    tested = Counter(s for k, s in enumerate(strata) if judged is None or judged[k])
    fewest = max(min_accepted, fewest_tested(target, delta))
    small: list[tuple[int, str, str]] = []
    for name, n in labelled.items():
        j = tested.get(name, 0)
        if n < fewest:
            small.append((n, name, f"{name!r} ({n} case{'s' if n != 1 else ''})"))
        elif 0 < j < fewest:
            small.append((j, name, f"{name!r} ({n} cases, {j} reaching acceptance)"))
    if not small:
        return
    small.sort()
    which = f"--strata {field}" if field else "strata"
    raise InputError(
        f"{which}: {len(small)} of the {len(labelled)} strata "
        f"{'holds' if len(small) == 1 else 'hold'} fewer than the {fewest} cases a threshold "
        f"must accept in every stratum to be tested (target {target:g}, delta {delta:g}, "
        f"min accepted {min_accepted}), so nothing could be accepted: "
        f"{named([x for _, _, x in small])}; merge small strata into larger ones, or drop "
        "--strata"
    )


def model_for(
    acc: AcceptanceFile,
    candidates: Sequence[Candidate],
    stratum: str | None = None,
    *,
    key: str | None = None,
) -> int:
    """Index of the fold model that scores this case (see :mod:`dissensus.acceptance.fit`):
    its stratum's, else the one :func:`~dissensus.acceptance.fit.case_key` ``key`` draws,
    else a hash of the candidate rows."""
    if stratum is not None:
        older = names_strata_older(acc.libraries)
        stratum = file_stratum(stratum, acc.fold_of_stratum, older=older)
        if stratum in acc.fold_of_stratum:
            return acc.fold_of_stratum[stratum]
    if key is not None:
        return fold_of_key(key, len(acc.models))
    return fold_index(candidates, len(acc.models))


def uncovered_stratum(acc: AcceptanceFile, stratum: str | None) -> str | None:
    """Why a case of ``stratum`` is outside a stratified file's guarantee (a stratum the
    file was not calibrated on, or no stratum at all: ``None``, or a file that names no
    strata field, whose cases' strata cannot be read), or ``None`` when the file covers it
    (or has no strata)."""
    if not acc.strata:
        return None
    known = [s.stratum for s in acc.strata]
    if stratum is None and acc.strata_field:
        return (
            f"learned acceptance: no stratum was given for this case (the acceptance file "
            f"is stratified on {acc.strata_field!r}: {len(known)} strata, {named(known)}), "
            "so no stratum's guarantee covers it"
        )
    if stratum is None or not acc.strata_field:
        # A file with strata and no field name (calibrate(strata=...) before the field
        # was required) cannot say which stratum a case is in: no stratum's guarantee.
        return (
            f"learned acceptance: the acceptance file is stratified ({len(known)} strata: "
            f"{named(known)}) but names no strata field, so this case's stratum cannot be "
            "read and no stratum's guarantee covers it; recalibrate with a strata field"
        )
    if file_stratum(stratum, known, older=names_strata_older(acc.libraries)) in known:
        return None
    field = f" ({acc.strata_field!r})" if acc.strata_field else ""
    return (
        f"learned acceptance: stratum {stratum!r}{field} is none of the "
        f"{len(known)} strata the acceptance file was calibrated on ({named(known)}); "
        f"its guarantee holds in those alone{_normalisation_note(stratum, known)}"
    )


def _normalisation_note(stratum: str, known: Collection[str]) -> str:
    """When ``stratum`` differs from a calibrated stratum only by Unicode normalisation
    (``Café`` as ``e`` and a combining accent, the file's as one ``é``), the two spelt by
    their code points: printed, they look the same."""
    nfc = unicodedata.normalize("NFC", stratum)
    twin = next((k for k in known if k != stratum and unicodedata.normalize("NFC", k) == nfc), None)
    if twin is None:
        return ""
    return (
        f" (written {stratum!a}, the file's {twin!a}: the same letters in another "
        "Unicode normalisation, which are not one stratum)"
    )


def apply_acceptance(
    acc: AcceptanceFile,
    candidates: Sequence[Candidate],
    *,
    stratum: str | None = None,
    key: str | None = None,
) -> AcceptanceVerdict:
    """Score ``candidates`` with ``acc`` and compare with its threshold.

    ``stratum`` is the case's value of the calibration's strata field, when it has one
    (a stratum the file was not calibrated on is not accepted: the guarantee is per
    stratum, and no stratum of the file is that one);
    ``key`` is the case's :func:`~dissensus.acceptance.fit.case_key` (every door that
    decides a panel passes it, so a case meets the same fold model through each).
    """
    if acc.family == "learned":
        fold = model_for(acc, candidates, stratum, key=key)
        label, score = score_case(acc.models[fold], candidates)
    else:
        label, score = family_score(acc.family, candidates)
    common = {
        "decision": label,
        "family": acc.family,
        "score": score,
        "threshold": acc.threshold,
        "target_precision": acc.target_precision,
        "delta": acc.delta,
        "calibration_n": acc.calibration_n,
        "file_sha256": acc.sha256,
    }
    if acc.threshold is None:
        return AcceptanceVerdict(
            accepted=False, reason=f"acceptance accepts nothing: {acc.threshold_reason}", **common
        )
    if label is None:
        return AcceptanceVerdict(
            accepted=False, reason="no candidate answer to accept (every agent abstained)", **common
        )
    uncovered = uncovered_stratum(acc, stratum)
    if uncovered is not None:
        return AcceptanceVerdict(accepted=False, reason=uncovered, **common)
    if score >= acc.threshold:
        return AcceptanceVerdict(
            accepted=True,
            reason=(
                f"learned acceptance ({acc.family}): {label!r} scored {score:.3f} >= threshold {acc.threshold:.3f} "
                f"(precision >= {floor_words(acc.target_precision)} at delta {acc.delta:g}, {acc.calibration_n} calibration cases)"
            ),
            **common,
        )
    return AcceptanceVerdict(
        accepted=False,
        reason=f"learned acceptance ({acc.family}): best answer {label!r} scored {score:.3f} < threshold {acc.threshold:.3f}",
        **common,
    )
