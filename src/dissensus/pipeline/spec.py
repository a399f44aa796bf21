"""The run specification: everything a run decides with, built and checked once.

Every door (``dissensus decide`` and ``runs resume``, :func:`dissensus.pipeline.decide` /
:func:`~dissensus.pipeline.adecide`, ``dissensus serve``, the Ray engine, the LangGraph
node, the Inspect AI reducer, the MCP ``decide`` tool) builds one :class:`RunSpec` with
:meth:`RunSpec.from_policy` and hands it to :func:`dissensus.pipeline.batch.start_run`;
the one run loop (:func:`dissensus.pipeline.batch.execute_run`) and its executors read
nothing else. So a door cannot drop a setting: there is nothing for it to assemble.

A spec holds the policy, the folder its relative paths resolve against, the loaded
files (learned acceptance, reliability calibration, guard calibration) with the sha256
of each file's bytes, and the model spec of live follow-ups. ``run.started`` journals
the spec (:meth:`RunSpec.started_fields`); a resumed run rebuilds it from there
(:meth:`RunSpec.from_started`), never from the files again.

Choices this module makes:

* **Relative paths.** Paths inside a policy file are relative to the policy file's
  folder; a :class:`~dissensus.pipeline.policy.Policy` object's relative paths are
  relative to ``base_dir`` (default: the working directory). ``acceptance=`` (the CLI's
  ``--acceptance``) is relative to the working directory and overrides
  ``acceptance.model``.
* **The model.** ``model=`` overrides the policy's ``seek_context.model``, which overrides
  ``$DISSENSUS_MODEL`` (read from ``environ``, default the process environment). The
  relative files of ``model=`` and of ``$DISSENSUS_MODEL`` are relative to the working
  directory and journalled absolute, so a run resumed from another directory reads
  (and records into) the same files; so are those of a ``Policy`` object's (or its
  data's) ``seek_context`` specs, against ``base_dir`` (default: the working directory),
  so every door journals one run the same spec. A relative recording
  (``record:FILE:...``) whose absolute path would hold a ``:`` is journalled as written
  (its file name ends at the first ``:``), and the journalled spec is checked again. The
  resolved spec is checked (its files read, nothing contacted) before any run exists, and
  so is every agent's own model spec (``seek_context.models``), whether or not the run
  will need it (a recorded re-ask calls no model): a bad spec is a configuration error
  naming the agent's field (``seek_context.models.<agent>``), never a run whose every
  follow-up fails. A file several of these specs name (one ``replay:`` recording for
  every agent) is read and validated once per build, known by its resolved path, size
  and modification time (:func:`~dissensus.llm.resolve.check_model_spec`'s ``checked``). DCI asks the run's model and CONCORD's table agents call no model,
  so these are all the model specs a run can use; ``panel.members`` are the chat
  endpoint's, checked when ``dissensus serve`` builds its panel, not by a run.
* **Code.** A ``module:function`` similarity backend is checked for ``allow_code`` and
  imported when the spec is built, so no door accepts one it cannot load; so are the
  user features a learned acceptance file names (``settings.user``,
  :func:`dissensus.acceptance.prepare.check_user_features`).
* **Same features.** A learned acceptance file that records the reading thresholds and
  guard settings its features were computed with (``settings.reading`` /
  ``settings.guard``) is refused when the policy differs, naming the policy's field
  (:func:`calibration_difference`, which ``calibrate-acceptance --journal`` uses too for
  the runs it reads; the guard calibration
  compares by the sha256 of its file's bytes, as :attr:`RunSpec.files` holds it); a file
  that records neither is used as before. So is one that records whether its cases had
  second answers (``settings.reask``) when the run would not have them, or would where
  calibration had none (:func:`reask_difference`, naming ``seek_context.followup``,
  ``max_followups`` or ``use_recorded``): the re-ask features would read as absent, or
  present, for every case.
* **Overrides** (``similarity``, ``deadline_s``, ``concurrency``) are written into the
  spec's policy, so the journal shows the settings the run really used. A ``similarity``
  override naming another backend than the policy's drops the policy's
  ``reading.theta_s`` (a threshold on that backend's cosines) for the new backend's
  calibrated default, and the journalled policy says ``theta_s: null``; one naming the
  same backend keeps it (:meth:`~dissensus.pipeline.policy.ReadingSettings.with_similarity`,
  the rule ``POST /v1/route?similarity=`` follows too). A learned acceptance file
  calibrated with another backend than the override's is refused naming the override
  (field ``similarity``; ``similarity_name``, ``--similarity`` on the command line), not
  the policy file, which did not choose it.
* **Resume.** :meth:`RunSpec.check_files` refuses a file whose bytes changed since the
  run started (naming the file): the run goes on with the journalled content, and a
  changed file means somebody expects it to be used, which only a new run can do. A file
  that is gone is not an error: the journal holds its content. Listing the files a
  run's model specs read (so no output overwrites them, :meth:`RunSpec.model_reads`)
  never refuses: a panel member's relative recording that could not be named from the
  policy's directory (its path holds ``:``) is read as written, its read files taken
  under that directory, so a run that never asks its panel resumes from anywhere.
* **Built directly.** ``RunSpec(policy=...)`` (a door the integrations document) checks
  the policy's routing rules as loading a policy does (a number compared with a label,
  ``decision == 1``, is refused: the rule would never fire); a spec read back from a
  journal (:meth:`RunSpec.from_started`) is not checked so, and resumes as it started.
* Journals written before run specifications existed have no ``files``; they resume
  with the journalled content and nothing to compare.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, model_validator

from dissensus.errors import ConfigError
from dissensus.files import not_a_file
from dissensus.guard import ReliabilityFit
from dissensus.io.jsontext import load_json_file
from dissensus.pipeline.learned import load_learned_data
from dissensus.pipeline.policy import (
    Policy,
    check_policy,
    check_routing_rules,
    check_similarity,
    load_policy,
    policy_from_dict,
    relative_model_spec,
    with_line,
    with_model_files_under,
)
from dissensus.pipeline.run_events import SpecFile, StartedSpec
from dissensus.pipeline.trust_regions import JOURNALLED, CalibrationFile, load_calibration
from dissensus.store import event_types as ev
from dissensus.types import JsonObject

if TYPE_CHECKING:
    from dissensus.acceptance.prepare import SettingsDifference
    from dissensus.llm.resolve import ModelFileKey

__all__ = [
    "MODEL_ENV",
    "PolicyLike",
    "RunSpec",
    "SpecFile",
    "calibration_difference",
    "check_guard_calibration_object",
    "file_sha256",
    "policy_calibration",
    "policy_guard_calibration",
    "reask_difference",
]

MODEL_ENV = "DISSENSUS_MODEL"
"""Environment variable naming the default model spec (as in :mod:`dissensus.llm`)."""


def file_sha256(path: str | Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


_STARTED, _JOURNALLED = "_made_started_fields", "_made_journalled"
_MADE = (_STARTED, _JOURNALLED)
"""Keys of what a :class:`RunSpec` makes once from its fields, in its ``__dict__``."""


class RunSpec(BaseModel):
    """Everything one run decides with (frozen). Build it with :meth:`from_policy`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    policy: Policy = Policy()
    """The policy, with the spec's overrides applied."""
    policy_file: str | None = None
    """The policy file as it was named, if the policy came from a file."""
    base_dir: str | None = None
    """The folder the policy's relative paths resolved against."""
    calibration: CalibrationFile | None = None
    """The reliability calibration (``acceptance.calibration``), loaded."""
    guard_calibration: ReliabilityFit | None = None
    """The guard calibration (``guard.calibration``), loaded: invariant 3 applies with it."""
    acceptance: JsonObject | None = None
    """The learned acceptance file's verified content (JSON passed through untouched to
    :mod:`dissensus.acceptance`, which validates it)."""
    model: str | None = None
    """Model spec of live follow-ups (``model=``, else ``seek_context.model``, else ``$DISSENSUS_MODEL``)."""
    files: tuple[SpecFile, ...] = ()
    """Every file loaded, with its sha256."""
    shift_hold: str | None = None
    """Why learned acceptance may commit nothing in this run (``acceptance.on_shift:
    escalate`` after a shift check flagged the file; :mod:`dissensus.pipeline.shift`)."""

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> RunSpec:
        """A copy (pydantic's), without what this spec made from its own fields
        (:meth:`started_fields`, :meth:`journalled`): a copy with other fields makes it
        again from its own."""
        copied = super().model_copy(update=update, deep=deep)
        for key in _MADE:
            copied.__dict__.pop(key, None)
        return copied

    @model_validator(mode="after")
    def _rules_read_as_labels(self, info: ValidationInfo) -> RunSpec:
        # A spec built directly (RunSpec(policy=...)) is a door of its own: its routing
        # rules are checked as a policy's load checks them, so a rule comparing a label
        # with a number (never true) is refused, not run unfired. Not a journalled one.
        if not (info.context or {}).get(JOURNALLED):
            check_routing_rules(self.policy, file=self.policy_file)
        return self

    # -- building ---------------------------------------------------------------------

    @classmethod
    def from_policy(
        cls,
        policy: RunSpec | Policy | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        policy_file: str | None = None,
        model: str | None = None,
        similarity: str | None = None,
        acceptance: str | os.PathLike[str] | None = None,
        deadline_s: float | None = None,
        concurrency: int | None = None,
        environ: Mapping[str, str] | None = None,
        similarity_name: str = "the override",
    ) -> RunSpec:
        """Build and check a run specification (:class:`ConfigError` naming file and field).

        ``policy`` is a policy file, a :class:`Policy`, a mapping (a policy's YAML or
        JSON data, validated as a file's), a :class:`RunSpec` (returned with the overrides
        applied) or ``None`` (the defaults); anything else is a :class:`ConfigError`. ``policy_file`` names the file a
        given :class:`Policy` was read from (errors and the journal name it). Every file the
        policy names is read and verified here, before any run exists. ``similarity_name``
        is what the caller calls its ``similarity`` override (``--similarity`` on the
        command line): a learned acceptance file calibrated with another backend than the
        override's is refused naming it (field ``similarity``), not the policy file.
        """
        try:
            if isinstance(policy, RunSpec):
                return policy._overridden(
                    model=model,
                    similarity=similarity,
                    deadline_s=deadline_s,
                    concurrency=concurrency,
                    similarity_name=similarity_name,
                )
            from_data = isinstance(policy, Mapping)
            if isinstance(policy, Mapping):  # a policy as parsed YAML / JSON data
                policy = policy_from_dict(dict(policy), file=policy_file)
            elif policy is not None and not isinstance(policy, Policy | str | os.PathLike):
                raise ConfigError(
                    "a policy is a policy file, a Policy, a RunSpec, a mapping or None, "
                    f"not {type(policy).__name__}",
                    field="policy",
                )
            files: list[SpecFile] = []
            if policy is None:
                pol = Policy()
                base = Path(base_dir).resolve() if base_dir is not None else None
            elif isinstance(policy, Policy):
                check_policy(policy, file=policy_file)
                base = Path(base_dir).resolve() if base_dir is not None else None
                # Its model files are relative to base_dir, else the working directory:
                # journalled absolute, as every door journals them.
                pol = (
                    with_model_files_under(policy, base)
                    if base is not None
                    else with_model_files_under(policy, Path.cwd(), confine=False)
                )
            else:
                policy_file = os.fspath(policy)
                # An explicit base_dir holds every relative path of the file, model files too.
                pol, base = load_policy(policy_file, base_dir=base_dir)
                files.append(_spec_file("policy", policy_file))
            pol = _with_overrides(
                pol, similarity=similarity, deadline_s=deadline_s, concurrency=concurrency
            )
            _check_similarity_code(pol, policy_file, similarity is not None)
            calibration = policy_calibration(pol, base, policy_file)
            if calibration is not None:
                where = _resolve(pol.acceptance.calibration, base)
                files.append(_spec_file("acceptance.calibration", where))
            guard_calibration = policy_guard_calibration(pol, base, policy_file)
            if guard_calibration is not None:
                files.append(_spec_file("guard.calibration", _resolve(pol.guard.calibration, base)))
            # Who chose the backend: an override, or the policy (errors name that one).
            chosen_by = similarity_name if similarity is not None else None
            learned, learned_path = _learned(pol, base, policy_file, acceptance, chosen_by)
            if learned_path is not None:
                files.append(_spec_file("acceptance.model", learned_path))
                guard_sha256 = next(
                    (f.sha256 for f in files if f.role == "guard.calibration"), None
                )
                pol = _read_as_calibrated(learned, pol, policy_file, guard_sha256, chosen_by)
                _check_user_features(learned, pol, learned_path)
            _check_theta_s(pol, policy_file, similarity is not None)
            env = environ if environ is not None else os.environ
            spec_model = model or pol.seek_context.model or env.get(MODEL_ENV) or None
            _check_reask(learned, pol, spec_model, policy_file)
            # The model files this build found valid: each is read once, however many specs name it.
            checked: set[ModelFileKey] = set()
            read: dict[str, str | None] = {f.role: f.path for f in files}  # no recording's file
            if spec_model:
                from dissensus.llm.resolve import check_model_spec

                try:
                    check_model_spec(spec_model, checked=checked, files=read)
                except ConfigError as exc:
                    if model or spec_model != pol.seek_context.model:
                        raise  # the caller's model (--model, the environment): no policy field
                    raise ConfigError(
                        exc.inner(), file=policy_file, field="seek_context.model"
                    ) from None
            _check_agent_models(pol, policy_file, checked, read)
            _check_budget_pays(pol, policy_file, spec_model)
            if spec_model and (model or not pol.seek_context.model):
                # The caller's spec (model=, the environment) names files relative to the
                # working directory: journalled absolute, a resume from elsewhere reads them.
                spec_model = _journalled_spec(spec_model, checked, read)
            # A Policy built in code may come with its members open (_check_panel_models).
            if policy_file is not None or from_data:
                _check_panel_models(pol, policy_file, base, checked, read)
            return cls(
                policy=pol,
                policy_file=policy_file,
                base_dir=str(base) if base is not None else None,
                calibration=calibration,
                guard_calibration=guard_calibration,
                acceptance=learned,
                model=spec_model,
                files=tuple(files),
            )
        except ConfigError as exc:
            # An error naming a field of the policy file names the line it is written on.
            if policy_file is None or exc.file != policy_file:
                raise
            raise with_line(exc, policy_file) from None

    def _overridden(
        self,
        *,
        model: str | None,
        similarity: str | None,
        deadline_s: float | None,
        concurrency: int | None,
        similarity_name: str,
    ) -> RunSpec:
        if model is None and similarity is None and deadline_s is None and concurrency is None:
            return self
        policy = _with_overrides(
            self.policy, similarity=similarity, deadline_s=deadline_s, concurrency=concurrency
        )
        if similarity is not None:
            _check_similarity_code(policy, self.policy_file, True)
            policy = _read_as_calibrated(
                self.acceptance,
                policy,
                self.policy_file,
                self.digests().get("guard.calibration"),
                similarity_name,
            )
            _check_theta_s(policy, self.policy_file, True)
        if model:
            from dissensus.llm.resolve import check_model_spec

            check_model_spec(model)
            model = _journalled_spec(model, set(), {})
            _check_reask(self.acceptance, policy, model, self.policy_file)
        return self.model_copy(update={"policy": policy, "model": model or self.model})

    def with_acceptance(self, acceptance: str | os.PathLike[str]) -> RunSpec:
        """This spec deciding with the learned acceptance file ``acceptance`` too (as
        ``from_policy(..., acceptance=)`` loads it: read, verified, hashed, its user
        features checked), the file checked against the policy and the guard calibration
        this spec decides with (:meth:`read_as_calibrated`). A spec that has learned
        acceptance already is a :class:`ConfigError`: a built spec is not re-specified."""
        if self.acceptance is not None:
            raise ConfigError(
                "the run specification has learned acceptance already", field="acceptance"
            )
        learned, path = _learned(self.policy, None, self.policy_file, acceptance)
        assert path is not None
        files = (*self.files, _spec_file("acceptance.model", path))
        spec = self.model_copy(update={"acceptance": learned, "files": files})
        spec = spec.read_as_calibrated()
        _check_user_features(learned, spec.policy, path)
        return spec

    def read_as_calibrated(self) -> RunSpec:
        """This spec, its learned acceptance checked against the policy and the guard
        calibration it decides with (the sha256 :attr:`files` holds): a
        :class:`ConfigError` naming the policy's field when they differ from what the
        acceptance file records (module docstring, *Same features*)."""
        if self.acceptance is None:
            return self
        policy = _read_as_calibrated(
            self.acceptance, self.policy, self.policy_file, self.digests().get("guard.calibration")
        )
        _check_reask(self.acceptance, policy, self.model, self.policy_file)
        return self if policy is self.policy else self.model_copy(update={"policy": policy})

    # -- the journal ------------------------------------------------------------------

    def started_fields(self) -> JsonObject:
        """The spec as ``run.started`` journals it (the 0.2 keys, plus ``base_dir``,
        ``files`` and ``shift_hold``): :meth:`started` as JSON. Made once per spec object
        (a spec is frozen): each call returns a new dictionary, its values shared with
        every other call's (JSON that nobody changes)."""
        # Kept in the instance's __dict__ beside the fields: neither a field nor private
        # state, so equality, hashing and dumps see the fields alone.
        made = self.__dict__.get(_STARTED)
        if made is None:
            made = self.__dict__[_STARTED] = self.started().payload()
        return dict(made)

    def journalled(self) -> RunSpec:
        """The spec a run started with this one reads back from its ``run.started``:
        :meth:`from_started` of :meth:`started_fields`, made once per spec object. The
        run decides with that one, whether it reads its start from the journal or is
        handed it (:func:`dissensus.pipeline.batch.start_run`), so a resumed run decides
        as the run did."""
        made = self.__dict__.get(_JOURNALLED)
        if made is None:
            made = self.__dict__[_JOURNALLED] = RunSpec.from_started(self.started_fields())
        return made

    def started(self) -> StartedSpec:
        """The spec as ``run.started`` journals it, every key given."""
        return StartedSpec(
            policy=self.policy.model_dump(mode="json"),
            policy_file=self.policy_file,
            base_dir=self.base_dir,
            calibration=self.calibration.model_dump(mode="json") if self.calibration else None,
            guard_calibration=self.guard_calibration.model_dump(mode="json")
            if self.guard_calibration
            else None,
            acceptance=self.acceptance,
            model=self.model,
            files=self.files,
            shift_hold=self.shift_hold,
        )

    @classmethod
    def from_started(cls, started: StartedSpec | Mapping[str, Any]) -> RunSpec:
        """The spec a run was started with (from its ``run.started`` payload, or the
        payload's model)."""
        try:
            fields = (
                started
                if isinstance(started, StartedSpec)
                else StartedSpec.model_validate(dict(started))
            )
        except ValidationError as exc:
            raise _journalled_invalid(exc, "") from None
        cal, guard_cal = fields.calibration, fields.guard_calibration
        try:
            # Read back as journalled: checks added since the run started do not apply.
            calibration = (
                CalibrationFile.model_validate(cal, context={JOURNALLED: True}) if cal else None
            )
        except ValidationError as exc:
            raise _journalled_invalid(exc, "calibration") from None
        try:
            # Read back as journalled: a routing rule a check added since refuses (a number
            # compared with a label) keeps the meaning the run started with.
            return cls.model_validate(
                {
                    "policy": Policy.model_validate(fields.policy or {}),
                    "policy_file": fields.policy_file,
                    "base_dir": fields.base_dir,
                    "calibration": calibration,
                    "guard_calibration": (
                        ReliabilityFit.model_validate(guard_cal) if guard_cal else None
                    ),
                    "acceptance": fields.acceptance,
                    "model": fields.model,
                    "files": fields.files,
                    "shift_hold": fields.shift_hold,
                },
                context={JOURNALLED: True},
            )
        except ValidationError as exc:
            raise _journalled_invalid(exc, "") from None

    def check_files(self) -> None:
        """Refuse (naming the file) when a file the spec loaded changed since; a gone file is fine."""
        for f in self.files:
            path = Path(f.path)
            if not path.is_file():
                continue
            try:
                now = file_sha256(path)
            except OSError:
                continue
            if now != f.sha256:
                raise ConfigError(
                    f"{f.path} changed since the run started (sha256 {f.sha256[:12]} then, "
                    f"{now[:12]} now); the run decides with the journalled content only, so start "
                    "a new run to use the changed file",
                    file=f.path,
                    field=f.role,
                )

    # -- views ------------------------------------------------------------------------

    def digests(self) -> dict[str, str]:
        """``role -> sha256`` of every loaded file."""
        return {f.role: f.sha256 for f in self.files}

    def model_reads(self) -> dict[str, str | None]:
        """``label -> path`` of every file a model spec of the run reads (the
        ``scripted:`` and ``replay:`` files of the run's model, of each
        ``seek_context.models`` entry and of each ``panel.members`` model, inside a
        ``record:`` spec too): files an output of the run may not overwrite.

        Never refuses: a panel member's spec that :func:`relative_model_spec` cannot
        rewrite under ``base_dir`` (a relative recording whose path there would hold a
        ``:``) is read as written, the files it reads taken under ``base_dir``, so a
        run that never asks its panel resumes from any directory."""
        from dissensus.llm.resolve import spec_reads

        base = Path(self.base_dir) if self.base_dir is not None else None
        members = [
            (f"panel.members.{i}.model", m.model) for i, m in enumerate(self.policy.panel.members)
        ]
        specs = [
            ("model", self.model),
            *((f"seek_context.models.{a}", m) for a, m in self.policy.seek_context.models.items()),
            *members,
        ]
        reads: dict[str, str | None] = {}
        for field, spec in specs:
            if not spec:
                continue
            paths = spec_reads(spec)
            if base is not None and field.startswith("panel."):
                try:  # as _check_panel_models
                    paths = spec_reads(relative_model_spec(spec, base, confine=False))
                except ConfigError:  # only ever a list of files to protect
                    paths = [p if Path(p).is_absolute() else str(base / p) for p in paths]
            for i, path in enumerate(paths):
                reads[f"the model file of {field}" + (f" ({i})" if i else "")] = path
        return reads

    # The JSON ``runs show`` prints (and its --json); the CLI reads it as a dict, so it
    # becomes a model when the CLI's outputs get response models.
    def summary(self) -> dict[str, Any]:
        """What ``runs show`` prints: where the settings came from, without the files' content."""
        acceptance = self.acceptance or {}
        return {
            "policy_file": self.policy_file,
            "base_dir": self.base_dir,
            "similarity": self.policy.reading.similarity,
            "theta_s": self.policy.reading.theta_s,
            "model": self.model,
            "models": dict(self.policy.seek_context.models),
            "concurrency": self.policy.concurrency,
            "deadline_s": self.policy.deadline_s,
            "budget": self.policy.budget.model_dump(mode="json"),
            "acceptance_sha256": acceptance.get("sha256"),
            "reliability_calibration": self.calibration is not None,
            "guard_calibration": self.guard_calibration is not None,
            "files": [f.model_dump(mode="json") for f in self.files],
            "shift_hold": self.shift_hold,
        }


def policy_calibration(
    policy: Policy, policy_dir: Path | None, policy_file: str | None
) -> CalibrationFile | None:
    """The reliability calibration file the policy names (``acceptance.calibration``,
    relative to ``policy_dir``), or ``None`` when it names none.

    :class:`~dissensus.errors.ConfigError` naming ``policy_file`` when the file is missing.
    """
    name = policy.acceptance.calibration
    if not name:
        return None
    path = _under(name, policy_dir)
    why = not_a_file(path)
    if why is not None:
        raise ConfigError(
            f"calibration file {why}: {path}", file=policy_file, field="acceptance.calibration"
        )
    return load_calibration(path, policy.acceptance.markers)


def policy_guard_calibration(
    policy: Policy, policy_dir: Path | None, policy_file: str | None
) -> ReliabilityFit | None:
    """The guard calibration the policy names (``guard.calibration``, relative to
    ``policy_dir``), or ``None`` when it names none.

    :class:`~dissensus.errors.ConfigError` naming ``policy_file`` when it cannot be read.
    """
    name = policy.guard.calibration
    if not name:
        return None
    path = _under(name, policy_dir)
    try:
        # Strict JSON (duplicate keys, NaN, huge integers refused, one line naming the file).
        return ReliabilityFit.model_validate(load_json_file(path, what="guard calibration"))
    except OSError as exc:
        raise ConfigError(
            f"cannot read guard calibration {path}: {exc.strerror}",
            file=policy_file,
            field="guard.calibration",
        ) from exc
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(
            f"{path}: invalid guard calibration: {first['msg']}",
            file=policy_file,
            field="guard.calibration",
        ) from exc


def _under(name: str, base: Path | None) -> Path:
    """``name`` relative to ``base`` (the policy's folder) unless it is absolute."""
    path = Path(name)
    return base / path if not path.is_absolute() and base is not None else path


def _resolve(name: str | None, base: Path | None) -> Path:
    assert name
    return _under(name, base).resolve()


def _spec_file(role: str, path: str | Path) -> SpecFile:
    resolved = Path(path).resolve()
    return SpecFile(role=role, path=str(resolved), sha256=file_sha256(resolved))


def _with_overrides(
    policy: Policy,
    *,
    similarity: str | None,
    deadline_s: float | None,
    concurrency: int | None,
) -> Policy:
    if similarity is None and deadline_s is None and concurrency is None:
        return policy
    data = policy.model_dump(mode="json")
    if similarity is not None:
        check_similarity(similarity, field="similarity")
        # theta_s is the policy's backend's own: not carried over to another backend.
        data["reading"] = policy.reading.with_similarity(similarity).model_dump(mode="json")
    if deadline_s is not None:
        data["deadline_s"] = deadline_s
    if concurrency is not None:
        data["concurrency"] = concurrency
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(str(first["msg"]), field=".".join(str(p) for p in first["loc"])) from None


def _learned(
    policy: Policy,
    base: Path | None,
    policy_file: str | None,
    override: str | os.PathLike[str] | None,
    similarity_by: str | None = None,
) -> tuple[JsonObject | None, Path | None]:
    if override:
        name = os.fspath(override)
        data = load_learned_data(name, None, policy_file=None, field="--acceptance")
        path = Path(name).resolve()
    elif policy.acceptance.model:
        data = load_learned_data(
            policy.acceptance.model, base, policy_file=policy_file, field="acceptance.model"
        )
        path = _resolve(policy.acceptance.model, base)
    else:
        return None, None
    _check_calibrated_similarity(data, policy, policy_file, similarity_by)
    return data, path


def _check_similarity_code(policy: Policy, policy_file: str | None, overridden: bool) -> None:
    """A ``module:function`` similarity backend runs only with ``allow_code`` and must be
    importable: checked when the spec is built, so every door refuses it before a run
    exists (not at its first case)."""
    from dissensus.loading import is_code_name, load_callable
    from dissensus.states.similarity import check_code_name

    name = policy.reading.similarity.strip()
    if not is_code_name(name):
        return
    field = "similarity" if overridden else "reading.similarity"
    try:
        check_code_name(name, allow_code=policy.allow_code or None, field=field)
    except ConfigError as exc:
        raise ConfigError(exc.inner(), file=policy_file, field=field) from None
    load_callable(name, field=field, file=policy_file)


def _check_theta_s(policy: Policy, policy_file: str | None, overridden: bool) -> None:
    """A backend without a calibrated default ``theta_s`` (a ``module:function`` one) reads
    only with the policy's ``reading.theta_s``: refused when the spec is built, so no
    door creates a run that stops at its first case."""
    from dissensus.states.reading import Thresholds

    reading = policy.reading
    if reading.theta_s is not None:
        return
    try:
        Thresholds.for_similarity(reading.similarity, None, reading.theta_a)
    except ConfigError:
        # An override to another backend drops the policy's theta_s (ReadingSettings.
        # with_similarity): such a backend is named in the policy, with its theta_s.
        where = (
            "name it in the policy as reading.similarity, with reading.theta_s"
            if overridden
            else "set reading.theta_s in the policy"
        )
        raise ConfigError(
            f"the similarity backend {reading.similarity.strip()!r} has no calibrated "
            f"default theta_s: {where} (derive it with 'dissensus calibrate-thresholds')",
            file=policy_file,
            field="reading.theta_s",
        ) from None


def _check_user_features(learned: Mapping[str, Any] | None, policy: Policy, path: Path) -> None:
    """The user features the acceptance file names run only with ``allow_code`` and must be
    importable: checked and loaded when the spec is built, before any run exists."""
    user = ((learned or {}).get("settings") or {}).get("user") or []
    if not user:
        return
    from dissensus.acceptance.prepare import USER_FIELD, check_user_features, load_user_features

    check_user_features(user, allow_code=policy.allow_code or None, file=str(path))
    load_user_features(user, file=str(path), field=USER_FIELD)


def _check_calibrated_similarity(
    learned: Mapping[str, Any] | None,
    policy: Policy,
    policy_file: str | None,
    similarity_by: str | None = None,
) -> None:
    differs = _similarity_difference((learned or {}).get("settings"), policy, similarity_by)
    if differs is not None:
        raise ConfigError(differs.message, file=_blamed(policy_file, differs), field=differs.field)


def _blamed(policy_file: str | None, differs: SettingsDifference) -> str | None:
    """The file an error about ``differs`` names: the policy's, unless an override (field
    ``similarity``, no policy field) chose the setting."""
    return None if differs.field == "similarity" else policy_file


def _similarity_difference(
    settings: Mapping[str, Any] | None, policy: Policy, similarity_by: str | None = None
) -> SettingsDifference | None:
    """How the policy's similarity backend differs from the one ``settings`` records, or
    ``None``. ``similarity_by`` names the override that chose the backend (``None``: the
    policy did); the difference then names it and its field ``similarity``."""
    from dissensus.acceptance.prepare import SettingsDifference
    from dissensus.states.similarity import backend_key

    calibrated_with = (settings or {}).get("similarity")
    # Names of one backend (``all-MiniLM-L6-v2``, ``minilm``) are one backend.
    if not calibrated_with or backend_key(calibrated_with) == backend_key(
        policy.reading.similarity
    ):
        return None
    return SettingsDifference(
        field="similarity" if similarity_by else "reading.similarity",
        recorded=repr(calibrated_with),
        policy=repr(policy.reading.similarity),
        message=f"the acceptance file was calibrated with similarity {calibrated_with!r}, "
        f"{similarity_by or 'the policy'} reads with {policy.reading.similarity!r}",
    )


def calibration_difference(
    settings: Mapping[str, Any] | None,
    policy: Policy,
    guard_sha256: str | None = None,
    similarity_by: str | None = None,
) -> SettingsDifference | None:
    """The first setting ``policy`` reads or guards with otherwise than a learned
    acceptance file's ``settings`` record (its similarity backend, reading thresholds and
    guard settings; ``guard_sha256``: the sha256 of the guard calibration file the policy
    names), or ``None``: what a run's specification refuses the file for
    (:func:`dissensus.acceptance.prepare.calibrated_difference`). Settings that record
    neither the reading nor the guard (a file written before they were) compare the
    similarity backend only. ``similarity_by``: the override that chose the policy's
    similarity backend (``--similarity``), which a difference in it then names."""
    differs = _similarity_difference(settings, policy, similarity_by)
    if differs is not None:
        return differs
    recorded = settings or {}
    if recorded.get("reading") is None and recorded.get("guard") is None:
        return None
    from dissensus.acceptance.file import FeatureSettings
    from dissensus.acceptance.prepare import calibrated_difference

    # Already validated with the file; read as the run keeps it (a journalled copy too).
    features = FeatureSettings.model_validate(dict(recorded), strict=False)
    return calibrated_difference(features, policy, guard_calibration_sha256=guard_sha256)


def _read_as_calibrated(
    learned: Mapping[str, Any] | None,
    policy: Policy,
    policy_file: str | None,
    guard_sha256: str | None = None,
    similarity_by: str | None = None,
) -> Policy:
    """``policy`` (refused when learned acceptance was calibrated with another similarity
    backend, or with other reading thresholds or guard settings than the file records:
    :func:`calibration_difference`). Names of one backend are one backend
    (``all-MiniLM-L6-v2`` is ``minilm``): the policy then names it as the acceptance file
    does, so what reads the spec later compares equal names."""
    settings = (learned or {}).get("settings")
    differs = calibration_difference(settings, policy, guard_sha256, similarity_by)
    if differs is not None:
        raise ConfigError(differs.message, file=_blamed(policy_file, differs), field=differs.field)
    calibrated_with = (settings or {}).get("similarity")
    if not calibrated_with or calibrated_with == policy.reading.similarity:
        return policy
    reading = policy.reading.model_copy(update={"similarity": str(calibrated_with)})
    return policy.model_copy(update={"reading": reading})


def reask_difference(
    settings: Mapping[str, Any] | None, policy: Policy, model: str | None
) -> SettingsDifference | None:
    """How a run of ``policy`` (deciding with ``model``, the run's model spec: ``None``
    for none) differs from a learned acceptance file's ``settings`` in having second
    answers for the cases acceptance judges, or ``None``. Second answers are a re-ask
    follow-up's (``seek_context.followup: reask``, at least one round), recorded
    (``use_recorded``) or a model's (the run's, or an agent's own in
    ``seek_context.models``); calibration read them under the same rule
    (:func:`dissensus.pipeline.gates.second_answers_under`) and the file records whether
    it had them (``settings.reask``; not recorded: not compared)."""
    from dissensus.acceptance.prepare import SettingsDifference

    recorded = (settings or {}).get("reask")
    if not isinstance(recorded, bool):
        return None
    sc = policy.seek_context
    now = (
        sc.followup == "reask"
        and sc.max_followups > 0
        and (sc.use_recorded or bool(model or sc.models))
    )
    if now == recorded:
        return None
    if not recorded:
        field, said = "seek_context.followup", "this policy re-asks"
    elif sc.followup != "reask":
        field, said = "seek_context.followup", f"this policy's follow-up is {sc.followup!r}"
    elif sc.max_followups == 0:
        field, said = "seek_context.max_followups", "this policy runs no follow-up round"
    else:
        field = "seek_context.use_recorded"
        said = "this policy neither uses the recorded re-asks nor has a model to re-ask"
    then = "with" if recorded else "without"
    return SettingsDifference(
        field=field,
        recorded="re-asks" if recorded else "no re-asks",
        policy="no re-asks" if recorded else "re-asks",
        message=f"the acceptance file was calibrated {then} second answers (the re-ask "
        f"and order-stability features), {said}: its features would not mean the same; "
        "calibrate with this policy (calibrate-acceptance --policy)",
    )


def _check_reask(
    learned: Mapping[str, Any] | None, policy: Policy, model: str | None, policy_file: str | None
) -> None:
    """Refuse a run whose second answers differ from the calibration's
    (:func:`reask_difference`): a :class:`ConfigError` naming the policy file and field."""
    differs = reask_difference((learned or {}).get("settings"), policy, model)
    if differs is not None:
        raise ConfigError(differs.message, file=policy_file, field=differs.field)


def check_guard_calibration_object(learned: Mapping[str, Any] | None) -> None:
    """Refuse a guard calibration given as an object (not a file the policy names) beside
    an acceptance file that records the guard calibration its features were computed with:
    it records the file's sha256, which an object has none of to compare (a
    :class:`ConfigError` naming ``guard_calibration``). A file that records no guard, or a
    disabled one (no guard features), takes any."""
    guard = ((learned or {}).get("settings") or {}).get("guard")
    if isinstance(guard, Mapping) and guard.get("enabled"):
        raise ConfigError(
            "the acceptance file records the guard calibration its features were computed "
            "with by the sha256 of its file, and an object has no file to compare: name the "
            "file in the policy (guard.calibration) instead",
            field="guard_calibration",
        )


PolicyLike = RunSpec | Policy | Mapping[str, Any] | str | os.PathLike[str] | None
"""What every door takes as its policy: a spec, a policy, its data, a policy file, or the
defaults."""


def _journalled_spec(spec: str, checked: set[ModelFileKey], files: dict[str, str | None]) -> str:
    """The caller's model spec ``spec`` (already checked) as the run journals it: its
    relative files made absolute under the working directory (a recording whose path
    would then hold a ``:`` kept as written: :func:`relative_model_spec`), checked
    again when that changed it, for the journalled string is the one a resume reads."""
    from dissensus.llm.resolve import check_model_spec

    absolute = relative_model_spec(spec, Path.cwd(), confine=False)
    if absolute != spec:
        check_model_spec(absolute, checked=checked, files=files)
    return absolute


def _check_budget_pays(policy: Policy, policy_file: str | None, model: str | None) -> None:
    """Refuse a budget of no calls (or no tokens) beside a follow-up that asks a model:
    every follow-up would fail once the run had started (exit 1 after the whole run);
    ``seek_context.followup: none`` says "no model calls" instead, unless a ``deliberate``
    route still deliberates with the model (:func:`~dissensus.pipeline.gates.asks_a_model`,
    the one reading of whether a policy can call a model)."""
    from dissensus.pipeline.gates import asks_a_model

    sc, budget = policy.seek_context, policy.budget
    if not (model or sc.models) or not asks_a_model(policy):
        return
    asker = (
        "a deliberate route deliberates with the model: every deliberation would fail; "
        "raise it, or route no state to deliberate"
        if sc.followup == "none"
        else f"the follow-up ({sc.followup}) asks a model: every follow-up would fail; "
        "raise it, or set seek_context.followup: none to run without model calls"
    )
    for key, value in (("max_calls", budget.max_calls), ("max_tokens", budget.max_tokens)):
        if value == 0:
            raise ConfigError(
                f"0 pays for no model call, yet {asker}",
                file=policy_file,
                field=f"budget.{key}",
            )


def _check_panel_models(
    policy: Policy,
    policy_file: str | None,
    base: Path | None,
    checked: set[ModelFileKey],
    files: dict[str, str | None],
) -> None:
    """Check each panel member's model spec (``panel.members``) as the run's is checked,
    whichever door reads the policy (``decide`` asks no member, yet the policy is one):
    a :class:`ConfigError` naming the member's field and the spec. An ``openai:``
    member's key and server come from the environment of the door that opens the panel
    (``serve``), which checks them then: a batch run elsewhere needs neither. Checked for
    a policy file and a policy given as its data (a mapping, as a file's YAML parses:
    one policy is accepted or refused alike however it is passed); not for a
    :class:`Policy` built in code, which may come with its members' backends already
    open (``PanelChat(policy, members=...)``), its specs then unused."""
    if not policy.panel.members:
        return
    from dissensus.llm.resolve import check_model_spec, model_id_problem

    for i, member in enumerate(policy.panel.members):
        field = f"panel.members.{i}.model"
        spec = member.model
        if base is not None:
            spec = relative_model_spec(spec, base, file=policy_file, field=field)
        kind, _, rest = spec.partition(":")
        if kind == "openai" and rest:
            # The id is sent as written, whichever server or key the member names.
            problem = model_id_problem(rest)
            if problem is not None:
                raise ConfigError(f"model spec {spec!r}: {problem}", file=policy_file, field=field)
            continue  # the key or server comes from the environment when it is opened
        try:
            check_model_spec(spec, checked=checked, files=files)
        except ConfigError as exc:
            raise ConfigError(exc.inner(), file=policy_file, field=field) from None


def _check_agent_models(
    policy: Policy,
    policy_file: str | None,
    checked: set[ModelFileKey],
    files: dict[str, str | None] | None = None,
) -> None:
    """Check each agent's model spec (``seek_context.models``) as the run's is checked: a
    :class:`ConfigError` naming the agent's field and the spec (nothing is contacted).
    A file found valid by this build (``checked``) is not read again."""
    models = policy.seek_context.models
    if not models:
        return
    from dissensus.llm.resolve import check_model_spec

    for agent, spec in models.items():
        try:
            check_model_spec(spec, checked=checked, files=files)
        except ConfigError as exc:
            raise ConfigError(
                exc.inner(), file=policy_file, field=f"seek_context.models.{agent}"
            ) from None


def _journalled_invalid(exc: ValidationError, prefix: str) -> ConfigError:
    """The one line for a journalled specification that does not validate: the field's
    full path (``calibration.agents...`` for the reliability file's), the message without
    pydantic's ``Value error, ``."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in (prefix, *first["loc"]) if str(p)) or ev.RUN_STARTED
    message = str(first["msg"]).removeprefix("Value error, ")
    return ConfigError(f"the run's journalled specification is invalid: {message}", field=where)
