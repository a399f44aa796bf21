"""Deliberation tasks and DCI settings, read from YAML (``docs/dci.md``).

A task file needs only ``question:``. Optional: ``id``, ``type`` (the paper's task
types: hidden_profile, late_evidence, risk, disagreement, policy, architecture,
routine), ``context``, ``options`` (each ``{id, text}``), ``criteria`` (list of
strings), ``participants`` (each ``{id, archetype, preferred_acts}``) and ``dci``
(settings, see :class:`DCIConfig`). Without ``options`` the participants generate them.

Choices this module makes:

* Task options keep their own id as ``label``; inside a deliberation every option is
  addressed as ``o<n>`` (task options first, in file order) so that every target has
  one grammar.
* Unknown keys in a task file are an error naming the key, so a typo never silently
  drops a setting.
* Numbers and switches are read strictly, as problem files are (``docs/cli.md``): a
  boolean is not a number (``deadline_s: true`` is not one second), a string is not a
  number (``max_rounds: '2'``), a count is an integer (``2``, not ``2.0``), a non-finite
  number (``.inf``, ``.nan``) is refused, and a switch is ``true`` or ``false``.
* An error in a task file names the file, the field and the line the field is
  written on (``field 'participants.1.archetype': ... (line 7)``; the nearest written
  parent's line for a missing field), as problem and policy files do.
* Blank text is refused where it names or says something: an option's id or text
  (``options.0.text: "  "``, an option no participant could read), the task's ``id``
  (it labels the task's outputs) and the ``question``. The option and id checks are a
  task file's (:func:`parse_task`); a :class:`Task` built in code is not held to them.
* Option ids are unique (compared after an integer id is read as its string, so
  ``1`` and ``'1'`` collide): a repeated id would make ``selected_option`` ambiguous.
  Option texts are unique too, compared ignoring case and spacing
  (:func:`~dissensus.dci.selection.fold_text`): a choice naming a repeated text could
  not tell its options apart. Texts that differ otherwise are distinct options, never
  merged (``C++`` and ``C#``, ``Use Redis`` and ``Use Redis.``;
  :mod:`dissensus.dci.selection`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
)

from dissensus.dci.acts import act_spec
from dissensus.dci.archetypes import archetype
from dissensus.dci.selection import fold_text
from dissensus.errors import ConfigError, field_path
from dissensus.io.yamlfile import load_yaml_text, read_text_file, with_field_line
from dissensus.quoting import missing_misspelt, misspelling

__all__ = [
    "DEFAULT_PARTICIPANTS",
    "DCIConfig",
    "ParticipantSpec",
    "Task",
    "TaskOption",
    "load_task",
    "parse_task",
]


class DCIConfig(BaseModel):
    """DCI-CF settings; defaults are the paper's (Table 9)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    max_rounds: StrictInt = 2
    """Maximum loops of stages 3-6 (at least 1)."""
    max_options: StrictInt = Field(default=5, ge=1)
    """Options kept after canonicalisation in stage 2."""
    finalist_count: StrictInt = Field(default=3, ge=1)
    """Options kept after scoring in stage 5."""
    convergence_margin: StrictFloat = Field(default=0.15, ge=0.0, le=1.0)
    """Lead the top finalist needs over the second (mean score) to converge."""
    reasks: StrictInt = Field(default=1, ge=0)
    """Times an invalid act is re-asked before it is recorded as a failure."""
    concordance_threshold: StrictFloat = Field(default=0.6, ge=0.0, le=1.0)
    """Outranking: share of participants (weights) that must score a >= b."""
    discordance_threshold: StrictFloat = Field(default=0.4, ge=0.0, le=1.0)
    """Outranking: largest score deficit of a against b that still allows a to outrank b."""
    satisficing_level: StrictFloat = Field(default=0.5, ge=0.0, le=1.0)
    """Satisficing: every participant's score must reach this level."""
    archetypes: StrictBool = True
    """Ablation A1 when false: every participant is a neutral ``Participant``."""
    typed_grammar: StrictBool = True
    """Ablation A2 when false: utterances are untyped contributions (no act names)."""
    convergent_flow: StrictBool = True
    """Ablation A3 when false: open rounds then selection by mean score, no DCI-CF."""
    full_transcript: StrictBool = False
    """Show every earlier act verbatim instead of the compacted workspace (measurement only)."""
    deadline_s: StrictFloat | None = Field(default=None, gt=0, exclude=True)
    """Wall-clock seconds the run may take; then it stops with ``status: deadline_exceeded``
    (a request in flight is cancelled) and selects over whatever exists. None = no limit. A run control, not a method setting: packets do not repeat it."""

    @field_validator("max_rounds")
    @classmethod
    def _rounds(cls, value: int) -> int:
        if value < 1:
            raise ValueError("max_rounds must be at least 1")
        return value


class ParticipantSpec(BaseModel):
    """One participant of the panel."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    archetype: str
    preferred_acts: tuple[str, ...] | None = None
    """Overrides the archetype's preferred acts."""


DEFAULT_PARTICIPANTS: tuple[ParticipantSpec, ...] = (
    ParticipantSpec(id="framer", archetype="Framer"),
    ParticipantSpec(id="explorer", archetype="Explorer"),
    ParticipantSpec(id="challenger", archetype="Challenger"),
    ParticipantSpec(id="integrator", archetype="Integrator"),
)


class TaskOption(BaseModel):
    """An option given by the task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    text: str = Field(min_length=1)

    @field_validator("id", mode="before")
    @classmethod
    def _id(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value


class Task(BaseModel):
    """A deliberation task."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = "task"
    type: str | None = None
    question: str = Field(min_length=1)
    context: str | None = None
    options: tuple[TaskOption, ...] = ()
    criteria: tuple[str, ...] = ()
    participants: tuple[ParticipantSpec, ...] = DEFAULT_PARTICIPANTS
    dci: DCIConfig = Field(default_factory=DCIConfig)

    @field_validator("question")
    @classmethod
    def _question(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("question must not be empty")
        return value.strip()


def parse_task(data: Any, *, file: str | None = None, default_id: str = "task") -> Task:
    """Validate a task mapping; every problem is a :class:`ConfigError` naming its field."""
    if not isinstance(data, dict):
        raise ConfigError("a task file must be a mapping with at least 'question'", file=file)
    if "question" not in data:
        hint = misspelling("question", data, Task.model_fields)
        raise ConfigError("a task needs a question" + hint, file=file, field="question")
    data = {"id": default_id, **data}
    try:
        task = Task.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = errors[0]
        message = first["msg"] + missing_misspelt(errors)
        raise ConfigError(message, file=file, field=field_path(*first["loc"])) from None
    _check_participants(task, file)
    _check_options(task, file)
    return task


def _check_options(task: Task, file: str | None) -> None:
    if not task.id.strip():  # the id that labels the task's outputs (judge groups by it)
        raise ConfigError("the task id must not be blank", file=file, field="id")
    seen: set[str] = set()
    texts: dict[str, int] = {}
    for i, option in enumerate(task.options):
        for name, value in (("id", option.id), ("text", option.text)):
            if not value.strip():  # an option nobody could name or read
                raise ConfigError(
                    f"an option's {name} must not be blank", file=file, field=f"options.{i}.{name}"
                )
        if option.id in seen:
            raise ConfigError(
                f"duplicate option id {option.id!r}", file=file, field=f"options.{i}.id"
            )
        seen.add(option.id)
        first = texts.setdefault(fold_text(option.text), i)
        if first != i:
            raise ConfigError(
                f"duplicate option text {option.text!r} (options.{first}.text has it, "
                "ignoring case and spacing)",
                file=file,
                field=f"options.{i}.text",
            )


def _check_participants(task: Task, file: str | None) -> None:
    if not task.participants:
        raise ConfigError("at least one participant is needed", file=file, field="participants")
    seen: set[str] = set()
    for i, spec in enumerate(task.participants):
        try:
            archetype(spec.archetype)
        except ConfigError as exc:
            raise ConfigError(
                _message(exc), file=file, field=f"participants.{i}.archetype"
            ) from None
        for j, act in enumerate(spec.preferred_acts or ()):
            try:
                act_spec(act)
            except ConfigError as exc:
                raise ConfigError(
                    _message(exc), file=file, field=f"participants.{i}.preferred_acts.{j}"
                ) from None
        if spec.id in seen:
            raise ConfigError(
                f"duplicate participant id {spec.id!r}", file=file, field=f"participants.{i}.id"
            )
        seen.add(spec.id)


def _message(exc: ConfigError) -> str:
    text = str(exc)
    prefix = f"field {exc.field!r}: " if exc.field else ""
    return text[len(prefix) :] if prefix and text.startswith(prefix) else text


def load_task(path: str | Path) -> Task:
    """Read a task YAML file; an error names the file, the field and the line the field
    is written on (``field 'options.1.text': ... (line 4)``)."""
    p = Path(path)
    file = str(p)
    text = read_text_file(p, what="task file")
    data = load_yaml_text(text, file=file)
    try:
        return parse_task(data, file=file, default_id=p.stem)
    except ConfigError as exc:
        raise with_field_line(exc, file, text, what="task file") from None
