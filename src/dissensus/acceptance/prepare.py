"""From panels to candidate rows: read, audit, re-ask answers, optional extras (edge code).

The feature rows of :mod:`dissensus.acceptance.features` need the panel's reading
(:mod:`dissensus.states`), the guard's decision (:mod:`dissensus.guard`) and any re-ask
answers. This module computes them the way the pipeline does, so that calibration and
decision see the same features: the reading with the given similarity backend and
thresholds, the guard's check with the run's guard calibration and options
(:class:`GuardInputs`; its posterior, n_eff and verifier are features, not gates), the
re-asks recorded in the panel. :func:`acceptance_guard` is the one function both
calibration (:func:`prepare_cases`) and ``decide`` (:mod:`dissensus.pipeline.engine`)
compute the guard features with, so a case scores the same in both.

Choices this module makes: a panel with fewer than two votes, or a run whose
policy disables the guard, has no guard features (as the pipeline's guard step).

The settings the features depend on are recorded in the file
(:func:`calibrated_settings`: the effective reading thresholds, the guard's switch, every
option written out, and the sha256 of the guard calibration file's bytes) and a deciding
policy that differs is refused (:func:`check_calibrated_settings`, called when a run's
specification is built): values compare as effective ones (left out = the default), and
two disabled guards compare equal whatever their options and calibration.

User features (``module:function``) are code. Named on ``calibrate-acceptance``'s
command line (``--feature``), they are the user's own opt-in; named by an acceptance
file (``settings.user``), they run only when the deciding run allows code
(:func:`check_user_features`: the policy's ``allow_code: true``, else
``$DISSENSUS_ALLOW_CODE``, as for a ``module:function`` similarity backend), otherwise
the file is refused naming the file, the feature and the setting. Either way they are
loaded by :func:`dissensus.loading.load_callable` (the one loader) once per
:func:`load_user_features` call, and one that cannot be loaded is a
:class:`~dissensus.errors.ConfigError` naming it; ``decide`` loads them when it builds
its run specification, before any run exists.

A user feature that raises (any exception, ``SystemExit`` included; only
``KeyboardInterrupt`` goes through) or returns something other than named numbers on a
panel (a mapping whose values are real numbers: ``int``, ``float`` or numpy's; a
boolean or a string is not one, though ``float()`` would read ``True`` or ``"1"``), and a feature value that is not finite or exceeds
:data:`~dissensus.acceptance.features.FEATURE_BOUND` (a user feature's ``NaN``,
``inf`` or ``1e308``), is a :class:`FeatureValueError` (a :class:`ConfigError`) naming
the panel and the feature (the user feature's spec, and the exception's type and
message on one line, at most :data:`ERROR_LIMIT` characters): calibration stops on it
(``calibrate-acceptance`` exits 2, nothing written), while
:meth:`LearnedAcceptance.judge_case` turns it into a verdict that accepts nothing and
says why, with no shift-check vector, so that one case escalates and the run's other
cases are decided (the verdict is journalled, so a resumed run keeps it; nothing
non-finite reaches the journal);
:class:`LearnedAcceptance` scores a case with the fold model its panel draws
(:func:`panel_case_key`), so one panel meets one fold model through every door.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dissensus.acceptance.calibrate import AcceptanceVerdict, apply_acceptance, stratum_of
from dissensus.acceptance.features import (
    FEATURE_BOUND,
    Candidate,
    PanelFeature,
    ReasoningSimilarity,
    SecondLike,
    bad_value,
    candidate_rows,
    feature_inputs,
    first_bad,
    second_pairs,
)
from dissensus.acceptance.file import (
    AcceptanceFile,
    CalibratedGuard,
    CalibratedReading,
    FeatureSettings,
    load_acceptance,
)
from dissensus.acceptance.fit import case_key
from dissensus.errors import ConfigError
from dissensus.loading import load_callable
from dissensus.quoting import quote_short
from dissensus.states.similarity import ALLOW_CODE_ENV, backend_key, code_allowed
from dissensus.types import Panel

__all__ = [
    "FeatureValueError",
    "GuardInputs",
    "LearnedAcceptance",
    "SettingsDifference",
    "acceptance_guard",
    "calibrated_difference",
    "calibrated_settings",
    "candidates_for",
    "check_calibrated_settings",
    "check_user_features",
    "load_user_features",
    "panel_case_key",
    "prepare_cases",
]


@dataclass(frozen=True)
class GuardInputs:
    """What the guard's check depends on besides the panel: the run's guard settings."""

    calibration: Any = None
    """The run's :class:`~dissensus.guard.ReliabilityFit` (policy ``guard.calibration``), or ``None``."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """The policy's ``guard.options`` (the guard's thresholds)."""
    enabled: bool = True
    """The policy's ``guard.enabled``: a disabled guard gives no guard features."""

    @classmethod
    def from_policy(cls, policy: Any, calibration: Any = None) -> GuardInputs:
        """The guard inputs of ``policy`` with its loaded guard calibration."""
        guard = policy.guard
        return cls(calibration=calibration, options=dict(guard.options), enabled=guard.enabled)


def calibrated_settings(
    policy: Any, *, guard_calibration_sha256: str | None = None
) -> tuple[CalibratedReading, CalibratedGuard]:
    """The reading and guard settings of ``policy`` as an acceptance file records them
    (:attr:`FeatureSettings.reading` / :attr:`FeatureSettings.guard`): the effective
    thresholds (a default written out) and the sha256 of the bytes of the guard
    calibration file it names (``guard_calibration_sha256``). A :class:`ConfigError`
    when the policy's backend has no default ``theta_s`` and the policy gives none."""
    from dissensus.states.reading import Thresholds

    rd = policy.reading
    th = Thresholds.for_similarity(rd.similarity, rd.theta_s, rd.theta_a)
    reading = CalibratedReading(theta_s=th.theta_s, theta_a=th.theta_a)
    guard = CalibratedGuard(
        enabled=policy.guard.enabled,
        options=_guard_options(policy),
        calibration_sha256=guard_calibration_sha256 if policy.guard.calibration else None,
    )
    return reading, guard


def _guard_options(policy: Any) -> dict[str, Any]:
    """Every guard option of ``policy`` written out (its ``guard.options`` read by
    :class:`~dissensus.guard.GuardThresholds`, defaults included); options out of their
    range are a :class:`ConfigError` naming ``guard.options`` (a checked policy has none)."""
    from pydantic import ValidationError

    from dissensus.guard import GuardThresholds

    try:
        return GuardThresholds.model_validate(policy.guard.options).model_dump(mode="json")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            f"invalid guard option: {first['msg']}",
            field=f"guard.options.{where}" if where else "guard.options",
        ) from None


_RECALIBRATE = (
    "its features would not mean the same; calibrate with this policy "
    "(calibrate-acceptance --policy)"
)


@dataclass(frozen=True)
class SettingsDifference:
    """A setting a policy reads or guards with otherwise than an acceptance file records
    (:func:`calibrated_difference`)."""

    field: str
    """The policy's field (``reading.theta_s``, ``guard.options.<name>``, ...)."""
    recorded: str
    """The recorded value, as a message shows it."""
    policy: str
    """The policy's value, as a message shows it."""
    message: str
    """Why an acceptance file refuses the policy (without the file and field)."""


def check_calibrated_settings(
    settings: FeatureSettings,
    policy: Any,
    *,
    guard_calibration_sha256: str | None,
    policy_file: str | None = None,
) -> None:
    """Refuse ``policy`` when it reads or guards otherwise than the calibration the
    acceptance file records (``settings.reading`` / ``settings.guard``; one not
    recorded is not compared): a :class:`ConfigError` naming ``policy_file`` and the
    policy's field (:func:`calibrated_difference`)."""
    differs = calibrated_difference(
        settings, policy, guard_calibration_sha256=guard_calibration_sha256
    )
    if differs is not None:
        raise ConfigError(differs.message, file=policy_file, field=differs.field)


def calibrated_difference(
    settings: FeatureSettings, policy: Any, *, guard_calibration_sha256: str | None
) -> SettingsDifference | None:
    """The first setting ``policy`` reads or guards with otherwise than the calibration
    the acceptance file records (``settings.reading`` / ``settings.guard``; one not
    recorded is not compared), or ``None``. Thresholds compare as effective values
    (omitted = the backend's default); a disabled guard gives no guard features, so two
    disabled guards compare equal whatever their options and calibration; the guard
    calibration compares by the sha256 of its file's bytes (``guard_calibration_sha256``)."""
    if settings.reading is not None:
        differs = _reading_difference(settings.reading, policy)
        if differs is not None:
            return differs
    if settings.guard is not None:
        return _guard_difference(settings.guard, policy, guard_calibration_sha256)
    return None


def _reading_difference(recorded: CalibratedReading, policy: Any) -> SettingsDifference | None:
    from dissensus.states.reading import Thresholds

    rd = policy.reading
    try:
        th = Thresholds.for_similarity(rd.similarity, rd.theta_s, rd.theta_a)
        now: dict[str, float | None] = {"theta_s": th.theta_s, "theta_a": th.theta_a}
    except ConfigError:  # a backend without a default theta_s, and none given
        now = {"theta_s": rd.theta_s, "theta_a": rd.theta_a}
    for name in ("theta_s", "theta_a"):
        then = getattr(recorded, name)
        if now[name] == then:
            continue
        shown = "no value (its backend has no default)" if now[name] is None else f"{now[name]}"
        if name == "theta_s" and rd.theta_s is None and now[name] is not None:
            shown += f" (the default of {rd.similarity})"
        return SettingsDifference(
            field=f"reading.{name}",
            recorded=f"{then}",
            policy=shown,
            message=f"the acceptance file was calibrated with {name} {then}, this policy reads "
            f"with {shown}: {_RECALIBRATE}",
        )
    return None


def _guard_difference(
    recorded: CalibratedGuard, policy: Any, sha256: str | None
) -> SettingsDifference | None:
    from dissensus.guard import GuardThresholds

    guard = policy.guard
    if recorded.enabled != guard.enabled:

        def said(on: bool) -> str:
            return "enabled" if on else "disabled"

        return SettingsDifference(
            field="guard.enabled",
            recorded=said(recorded.enabled),
            policy=said(guard.enabled),
            message=f"the acceptance file was calibrated with the guard "
            f"{said(recorded.enabled)}, this policy's guard is {said(guard.enabled)}: "
            f"{_RECALIBRATE}",
        )
    if not guard.enabled:
        return None  # no guard features either way
    then = GuardThresholds.model_validate(recorded.options).model_dump(mode="json")
    now = _guard_options(policy)
    for key, value in then.items():
        if now.get(key) != value:
            return SettingsDifference(
                field=f"guard.options.{key}",
                recorded=repr(value),
                policy=repr(now.get(key)),
                message=f"the acceptance file was calibrated with guard option {key} "
                f"{value!r}, this policy's guard uses {now.get(key)!r}: {_RECALIBRATE}",
            )
    ours = sha256 if guard.calibration else None
    if recorded.calibration_sha256 == ours:
        return None
    then_sha = recorded.calibration_sha256
    before = f"guard calibration sha256 {then_sha[:12]}" if then_sha else "no guard calibration"
    after = f"{guard.calibration} (sha256 {ours[:12]})" if ours else "none"
    return SettingsDifference(
        field="guard.calibration",
        recorded=f"sha256 {then_sha[:12]}" if then_sha else "none",
        policy=after,
        message=f"the acceptance file was calibrated with {before}, this policy's guard "
        f"calibration is {after}: {_RECALIBRATE}",
    )


USER_FIELD = "settings.user"
"""Where an acceptance file names its user features."""

ERROR_LIMIT = 200
"""How many characters of a user feature's exception a reason quotes."""


def load_user_features(
    specs: Sequence[str], *, file: str | None = None, field: str = "acceptance.features"
) -> dict[str, PanelFeature]:
    """Load each ``module:function`` user feature (:func:`~dissensus.loading.load_callable`).

    A spec that cannot be loaded is a :class:`ConfigError` naming it (and ``file`` /
    ``field``, where the specs were read). Importing runs the module's code: the caller
    decides whether that is allowed (:func:`check_user_features`).
    """
    found: dict[str, PanelFeature] = {}
    for spec in specs:
        try:
            found[spec] = load_callable(spec, field=field, file=file)
        except ConfigError as exc:
            raise ConfigError(
                f"user feature {quote_short(spec)}: {_without_place(exc)}", file=file, field=field
            ) from None
    return found


def check_user_features(
    specs: Sequence[str], *, allow_code: bool | None, file: str | None = None
) -> None:
    """Refuse the user features an acceptance file names unless running code is allowed
    (``allow_code``, else ``$DISSENSUS_ALLOW_CODE``): a :class:`ConfigError` naming the
    file (``file``), the feature and the setting."""
    if not specs or code_allowed(allow_code):
        return
    named = ", ".join(quote_short(s) for s in specs[:3])
    if len(specs) > 3:
        named += f" and {len(specs) - 3} more"
    raise ConfigError(
        f"the acceptance file names user feature {named}: Python code that runs with your "
        "rights over every panel; allow it with 'allow_code: true' in the policy (or "
        f"{ALLOW_CODE_ENV}=1), or calibrate without --feature",
        file=file,
        field=USER_FIELD,
    )


def _without_place(exc: ConfigError) -> str:
    """``exc``'s message without the ``file: field '...': `` prefix its constructor added."""
    text = str(exc)
    if exc.file:
        text = text.removeprefix(f"{exc.file}: ")
    if exc.field:
        text = text.removeprefix(f"field {exc.field!r}: ")
    return text


def _error_text(exc: BaseException) -> str:
    """``Type: message`` of an exception raised by user code: one line, at most
    :data:`ERROR_LIMIT` characters (then ``…``), whatever its ``str`` does."""
    try:
        message = " ".join(str(exc).split())
    except Exception:  # a user exception whose __str__ fails
        message = "(message not printable)"
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= ERROR_LIMIT else text[: ERROR_LIMIT - 1] + "…"


class FeatureValueError(ConfigError):
    """A feature acceptance cannot use on one panel, naming the panel and the feature: a
    value that is not finite or beyond :data:`~dissensus.acceptance.features.FEATURE_BOUND`,
    or a user feature that raised or returned something other than named numbers."""

    def __init__(self, panel: str, feature: str, why: str) -> None:
        self.panel = panel
        self.feature = feature
        self.reason = f"{feature} on panel {panel!r}: {why}"
        super().__init__(self.reason, field="acceptance.features")


def _user_values(panel: Panel, funcs: Mapping[str, PanelFeature]) -> dict[str, float]:
    out: dict[str, float] = {}
    for spec, func in funcs.items():
        feature = f"user feature {spec}"
        # User code: any failure is this panel's, named (KeyboardInterrupt goes through).
        try:
            values = func(panel)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise FeatureValueError(panel.id, feature, f"raised {_error_text(exc)}") from None
        try:
            items = [(str(key), value) for key, value in values.items()]
        except KeyboardInterrupt:
            raise
        except BaseException as exc:
            raise FeatureValueError(
                panel.id,
                feature,
                f"returned {type(values).__name__}, not a mapping of names to numbers "
                f"({_error_text(exc)})",
            ) from None
        for key, value in items:
            number, why = _user_number(value)
            if why is None:
                why = bad_value(number)
            if why is not None:
                raise FeatureValueError(panel.id, f"{feature} ({key!r})", why)
            out[key] = number
    return out


def _user_number(value: object) -> tuple[float, str | None]:
    """A user feature's value as a float, or why it is not a number: only a real number
    (``int``, ``float``, numpy's numbers) is one; a boolean, a string or anything else is
    not, whatever ``float()`` would make of it."""
    if isinstance(value, bool):
        return 0.0, f"{value!r} is a boolean, not a number"
    if isinstance(value, str):
        return 0.0, f"{quote_short(value)} is a string, not a number"
    if value is None:
        return 0.0, "None is not a number"
    if not isinstance(value, numbers.Real):
        return 0.0, f"a {type(value).__name__} is not a number"
    try:
        return float(value), None
    except OverflowError:
        return 0.0, f"exceeds the largest magnitude a feature may have ({FEATURE_BOUND:g})"
    except (ValueError, TypeError) as exc:
        return 0.0, f"a {type(value).__name__} that is no float ({_error_text(exc)})"


def _margins(
    panel: Panel, second: Mapping[str, SecondLike], markers: dict[str, list[str]]
) -> dict[str, float]:
    from dissensus.signals import MarkerLexicon, SecondAnswer, agent_signals

    lexicon = MarkerLexicon(
        concession=tuple(markers.get("concession", [])),
        grounding=tuple(markers.get("grounding", [])),
    )
    typed = {a: SecondAnswer(decision=s.decision, reasoning=s.reasoning) for a, s in second.items()}
    return {s.agent: float(s.score) for s in agent_signals(panel, typed, lexicon)}


def candidates_for(
    panel: Panel,
    *,
    reading: Any,
    guard: Any,
    second: Mapping[str, SecondLike] | None,
    settings: FeatureSettings,
    sim_backend: Any = None,
    user: Mapping[str, PanelFeature] | None = None,
) -> list[Candidate]:
    """Candidate rows for one case from its reading, guard decision and re-asks."""
    second = second or {}
    sims = (
        ReasoningSimilarity(sim_backend)(panel, second_pairs(second))
        if settings.reasoning and sim_backend is not None
        else None
    )
    margins = _margins(panel, second, settings.markers) if settings.markers is not None else None
    values = _user_values(panel, user) if user else None
    rows = candidate_rows(
        feature_inputs(
            panel,
            reading=reading,
            guard=guard,
            second=second,
            reasoning_sim=sims,
            margins=margins,
            user=values,
        )
    )
    bad = first_bad([c.features for c in rows])
    if bad is not None:
        raise FeatureValueError(panel.id, f"feature {bad[0]}", bad[1])
    return rows


def acceptance_guard(panel: Panel, guard: GuardInputs) -> Any:
    """The guard decision acceptance features are computed from (``None``: no guard features).

    The same audit as the pipeline's guard step (:func:`dissensus.pipeline.gates.guard_step`):
    the panel's votes, the run's guard calibration and options.
    """
    from dissensus.guard import GuardThresholds, guard_votes, panel_votes

    if not guard.enabled:
        return None
    votes = panel_votes(panel)
    if len(votes) < 2:
        return None
    settings = GuardThresholds.model_validate(dict(guard.options))
    return guard_votes(votes, guard.calibration, settings=settings, case_id=panel.id)


def prepare_cases(
    panels: Sequence[Panel],
    *,
    settings: FeatureSettings,
    backend: Any,
    theta_s: float | None = None,
    theta_a: float = 0.8,
    reask: bool = True,
    guard: GuardInputs | None = None,
    on_case: Callable[[int], None] | None = None,
    readings: Sequence[Any] | None = None,
) -> list[list[Candidate]]:
    """Candidate rows for every panel (``reask``: use the re-asks recorded in the panels).

    ``guard``: the deciding run's guard settings (default: no calibration, default
    options), so that the guard features are those ``decide`` computes. ``readings``:
    the panels' readings when the caller already has them (``theta_s`` / ``theta_a``
    are then not used).
    """
    from dissensus.signals import recorded_second_answers
    from dissensus.states import read_panels
    from dissensus.states.reading import Thresholds

    if readings is None:
        thresholds = Thresholds.for_model(backend.name, theta_s, theta_a)
        readings = read_panels(list(panels), backend, thresholds)
    user = load_user_features(settings.user) if settings.user else None
    inputs = guard if guard is not None else GuardInputs()
    out: list[list[Candidate]] = []
    for i, (panel, reading) in enumerate(zip(panels, readings, strict=True)):
        second = recorded_second_answers(panel) if reask else {}
        out.append(
            candidates_for(
                panel,
                reading=reading,
                guard=acceptance_guard(panel, inputs),
                second=second,
                settings=settings,
                sim_backend=backend,
                user=user,
            )
        )
        if on_case is not None:
            on_case(i)
    return out


def panel_case_key(panel: Panel) -> str:
    """:func:`~dissensus.acceptance.fit.case_key` of a panel: the fold model that scores it
    depends on what its agents said, never on computed figures (nor on the panel's id,
    which the chat door makes afresh for every request)."""
    return case_key([(o.agent, o.decision, o.reasoning) for o in panel.outputs])


class LearnedAcceptance:
    """An acceptance file ready to judge cases the way it was calibrated.

    ``similarity`` is the reader's backend name in the deciding policy: a file
    calibrated with another backend is refused (its similarity features would not mean
    the same). ``sim_backend`` computes the optional reasoning features. ``allow_code``
    (the deciding policy's ``allow_code``; ``None``: ``$DISSENSUS_ALLOW_CODE``) must
    allow the user features the file names (:func:`check_user_features`); ``file``
    names the file in errors.
    """

    def __init__(
        self,
        acc: AcceptanceFile,
        *,
        similarity: str | None = None,
        sim_backend: Any = None,
        allow_code: bool | None = None,
        file: str | None = None,
    ) -> None:
        wanted = acc.settings.similarity
        if (
            wanted is not None
            and similarity is not None
            and backend_key(wanted) != backend_key(similarity)
        ):
            raise ConfigError(
                f"the acceptance file was calibrated with similarity {wanted!r}, the policy reads with {similarity!r}",
                field="reading.similarity",
            )
        self.file = acc
        self.sim_backend = sim_backend
        self.user: dict[str, PanelFeature] | None = None
        if acc.settings.user:
            check_user_features(acc.settings.user, allow_code=allow_code, file=file)
            self.user = load_user_features(acc.settings.user, file=file, field=USER_FIELD)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        similarity: str | None = None,
        sim_backend: Any = None,
        allow_code: bool | None = None,
    ) -> LearnedAcceptance:
        """Read, verify and prepare the file at ``path``."""
        return cls(
            load_acceptance(path),
            similarity=similarity,
            sim_backend=sim_backend,
            allow_code=allow_code,
            file=str(path),
        )

    def judge(
        self, panel: Panel, *, reading: Any, guard: Any, second: Mapping[str, SecondLike] | None
    ) -> AcceptanceVerdict:
        """May the case's best-scored answer be committed?"""
        return self.judge_case(panel, reading=reading, guard=guard, second=second)[0]

    def judge_case(
        self, panel: Panel, *, reading: Any, guard: Any, second: Mapping[str, SecondLike] | None
    ) -> tuple[AcceptanceVerdict, dict[str, float] | None]:
        """:meth:`judge`, and the case's vector for the shift check
        (:func:`~dissensus.acceptance.shift.case_vector`; ``None`` for a case whose
        features could not be computed, :meth:`unjudged`)."""
        from dissensus.acceptance.shift import case_vector

        try:
            rows = candidates_for(
                panel,
                reading=reading,
                guard=guard,
                second=second,
                settings=self.file.settings,
                sim_backend=self.sim_backend,
                user=self.user,
            )
        except FeatureValueError as exc:
            return self.unjudged(exc.reason), None
        verdict = apply_acceptance(
            self.file,
            rows,
            stratum=stratum_of(panel.meta, self.file.strata_field),
            key=panel_case_key(panel),
        )
        return verdict, case_vector(rows)

    def unjudged(self, why: str) -> AcceptanceVerdict:
        """The verdict on a case whose features acceptance cannot use: nothing accepted
        (the case escalates), the reason naming the feature."""
        acc = self.file
        return AcceptanceVerdict(
            accepted=False,
            decision=None,
            reason=f"not judged by learned acceptance: {why}",
            family=acc.family,
            score=0.0,
            threshold=acc.threshold,
            target_precision=acc.target_precision,
            delta=acc.delta,
            calibration_n=acc.calibration_n,
            file_sha256=acc.sha256,
        )
