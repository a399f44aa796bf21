"""The pipeline policy: one YAML file, every setting typed and documented with its default.

A policy says how to read a panel, how the guard and calibrated reliability gate the
automatic routes, which follow-up ``seek_context`` runs, and when CONCORD may decide.
Every field has a default, so an empty file (or no file) is a valid policy:

.. code-block:: yaml

    reading:
      similarity: minilm             # or tfidf (offline, fast)
      theta_s: null                  # null: the backend's calibrated default
      theta_a: 0.8
    routing:
      rules: []                      # domain rules (dissensus.states rule format)
      defaults: {}                   # e.g. {DD: escalate}
      superiority: []                # [[winner, loser], ...]
      convergent_disagreement_without_values: escalate   # or seek_context
    guard:
      enabled: true
      calibration: null              # guard calibration (dissensus calibrate --out)
      options: {}                    # guard thresholds
    acceptance:
      model: null                    # learned acceptance file (dissensus calibrate-acceptance)
      calibration: null              # reliability file (trust regions), relative to this policy
      target_precision: 0.9
      min_support: 10
      veto_precision: 0.75
      min_families: 3
      fallback_max_score: 0
      markers: {concession: [], grounding: []}   # margin-score lexicon (LLMBar's: see examples/)
      on_shift: warn                 # or escalate: hold the file after a flagged shift check
      shift_alpha: 0.1               # chance a good file is ever flagged, over its life
    seek_context:
      followup: reask                # reask | dci | none
      use_recorded: true             # recorded re-asks (outputs' reask) count as the re-ask
      perturbation: swap_order       # swap_order | add_context
      context: ""                    # text added by the add_context perturbation
      model: null                    # model spec; null: $DISSENSUS_MODEL (one extra voice)
      models: {}                     # agent -> model spec (that agent's own re-ask)
      max_followups: 1
    concord:
      enabled: true
      floor: 0.7
      margin: 0.05
      rounds: 6
    budget: {max_calls: 200, max_tokens: null}
    concurrency: 4
    deadline_s: null                 # wall-clock seconds a decide / resume may run
    panel:                           # the members behind POST /v1/chat/completions (docs/chat.md)
      members: []                    # [{name, model, family}], model as a model spec
      answer: structured             # structured | number | regex
      options: null                  # structured: the decision's enum (null: any normalised string)

Choices this module makes: unknown keys are errors (a typo must not silently
fall back to a default); switches (``enabled``, ``use_recorded``, ``allow_code``) are
``true`` / ``false`` only, so a quoted ``"false"`` or a ``0`` is an error rather than
read as a switch either way; a number is a number: a quoted ``"0.9"`` or a YAML
``yes`` / ``on`` where a number belongs is an error naming the field (an integer may be
written ``4.0``), as is a number where a switch or text belongs (``1e-3``, which YAML 1.1
reads as text, is refused saying to write ``1.0e-3``). An error about a field of a
policy file names the line it is written on (``(line 5)``: :func:`with_line`, for
errors raised while the file is read and while a run's specification is built from
it), and an unknown key names the known key it is spelt close to (``did you mean
'shift_alpha'?``), or lists the known keys of its section. This holds for a new
policy (a file, a request's mapping); a policy read back from a journal is read as it
was written; a bad policy raises :class:`ConfigError` naming the file and
the dotted field; relative paths inside the policy are relative to the folder the
policy file is in (for a symbolic link, the folder of the file it points to, where the
policy's own files were written beside it), including the file of a ``scripted:`` /
``replay:`` / ``record:FILE:...`` model spec. A section left empty (``guard:`` with
nothing under it, or only comments: YAML's null) is that section's defaults, as a
section left out is. A panel member's ``base_url`` is checked as the policy is loaded,
by every door (the command line, the library, the service): an empty one (``""``, an
unset template variable) is refused naming its field, not read as "no base_url", which
would send the member's prompts to ``$OPENAI_BASE_URL`` or OpenAI's own API.
A routing rules document found valid once (the same JSON text) is not compiled again
to be checked. ``reading.theta_s`` belongs to ``reading.similarity``'s backend: an
override of the backend to another one (:meth:`ReadingSettings.with_similarity`, which
every door's override goes through) drops it for the new backend's calibrated default,
and an override naming the same backend keeps it.
"""

from __future__ import annotations

import json
import os
import re
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from dissensus.errors import ConfigError, field_path
from dissensus.families import decision_form
from dissensus.io.yamlfile import load_yaml_text, read_text_file, with_field_line
from dissensus.quoting import missing_misspelt
from dissensus.signals import MarkerLexicon
from dissensus.types import JsonObject

if TYPE_CHECKING:
    from dissensus.guard import GuardThresholds

__all__ = [
    "PIPELINE_ACTIONS",
    "AcceptanceSettings",
    "BudgetSettings",
    "ConcordSettings",
    "GuardSettings",
    "PanelMember",
    "PanelSettings",
    "Policy",
    "ReadingSettings",
    "RoutingSettings",
    "SeekContextSettings",
    "check_policy",
    "check_routing_rules",
    "load_policy",
    "policy_from_dict",
    "with_model_files_under",
]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReadingSettings(_Section):
    """How a panel is read (``docs/states.md``)."""

    similarity: str = "minilm"
    """Similarity backend (``minilm``: bundled offline MiniLM embeddings; ``tfidf``: lexical; ``static``: distilled MiniLM token vectors)."""
    theta_s: float | None = Field(default=None, ge=-1.0, le=1.0)
    """Reasoning-similarity threshold; ``None``: the backend's calibrated default."""
    theta_a: float = Field(default=0.8, gt=0.0, le=1.0)
    """Conclusion-agreement threshold (share of voters on the plurality decision)."""

    def with_similarity(self, similarity: str) -> ReadingSettings:
        """This reading with the similarity backend ``similarity`` (an override: ``decide
        --similarity``, ``similarity=``, ``POST /v1/route?similarity=``): the one rule every
        door follows. ``theta_s`` is a threshold on one backend's cosines, so it stays only
        when ``similarity`` names the same backend (by
        :func:`~dissensus.states.similarity.backend_key`: ``all-MiniLM-L6-v2`` is
        ``minilm``); for another backend it is dropped (``None``: that backend's
        calibrated default). ``theta_a`` reads decisions, not cosines, and stays."""
        from dissensus.states.similarity import backend_key

        same = backend_key(similarity) == backend_key(self.similarity)
        theta_s = self.theta_s if same else None
        return self.model_copy(update={"similarity": similarity, "theta_s": theta_s})


class RoutingSettings(_Section):
    """Defeasible routing (``docs/states.md``) and how the pipeline treats its outcome."""

    rules: list[JsonObject] = Field(default_factory=list)
    """Domain rules in the :mod:`dissensus.states` rule format; they can defeat the defaults."""
    defaults: dict[str, str] = Field(default_factory=dict)
    """Replacement actions of the default rules, by state (e.g. ``{DD: escalate}``)."""
    superiority: list[list[str]] = Field(default_factory=list)
    """``[winner, loser]`` pairs between rules."""
    convergent_disagreement_without_values: Literal["escalate", "seek_context"] = "escalate"
    """Route of a CD panel whose agents declare no value profile: a disagreement with
    similar reasoning and no stated values is not (yet) a value conflict. ``seek_context``
    switches on the built-in rule ``cd-without-values`` (priority 0, defeats
    ``default-CD``; :data:`dissensus.states.routing.BUILTIN_RULES`), so the record names
    it; it is not switched on when ``defaults`` gives CD another action, and a domain rule
    that routes CD (priority 1 by default) beats it."""

    def rules_document(self) -> JsonObject:
        """The rules in the :class:`dissensus.states.RuleSet` document form."""
        builtins: list[str] = []
        cd_default = self.defaults.get("CD", "escalate")
        if (
            self.convergent_disagreement_without_values == "seek_context"
            and cd_default == "escalate"
        ):
            builtins.append("cd-without-values")
        return {
            "rules": self.rules,
            "defaults": self.defaults,
            "superiority": self.superiority,
            "builtins": builtins,
        }


class GuardSettings(_Section):
    """The guard (``docs/guard.md``) in front of every automatic route."""

    enabled: StrictBool = True
    """When false, no agreement is ever accepted on the guard's word (only on calibration)."""
    calibration: str | None = None
    """Guard calibration (JSON of ``dissensus calibrate``), relative to the policy: with it,
    invariant 3 (beta bounded by a measured beta*) must hold as well."""
    options: JsonObject = Field(default_factory=dict)
    """Extra keyword settings passed to the guard's check (its thresholds)."""


class AcceptanceSettings(_Section):
    """When an agreement the guard cannot back may still be accepted (calibrated reliability)."""

    model: str | None = None
    """Learned acceptance file (``dissensus calibrate-acceptance``), relative to the policy.
    When set, it decides instead of the trust regions of ``calibration``."""
    calibration: str | None = None
    """Reliability calibration file (:mod:`dissensus.pipeline.trust_regions`), relative to the policy."""
    target_precision: float = Field(default=0.9, gt=0.0, le=1.0)
    """Worst-stratum precision an agent's trust region must reach on the calibration file."""
    min_support: int = Field(default=10, ge=1)
    """Calibration answers needed in every stratum of a trust region."""
    veto_precision: float = Field(default=0.75, gt=0.0, le=1.0)
    """A calibrated agent this reliable (stable answers, worst stratum) can veto by contradicting."""
    min_families: int = Field(default=3, ge=1)
    """Without calibration: independent model families that must agree, stable and decisive."""
    fallback_max_score: int = 0
    """Without calibration: the largest margin score that counts as decisive."""
    markers: MarkerLexicon = Field(default_factory=MarkerLexicon)
    """Marker lexicon of the margin score (must match the calibration file's)."""
    on_shift: Literal["warn", "escalate"] = "warn"
    """When a run's shift check finds its cases unlike the acceptance file's calibration
    cases: ``warn`` reports it; ``escalate`` also holds the file, so runs started after
    the flag commit nothing on it until a new file is calibrated
    (:mod:`dissensus.pipeline.shift`)."""
    shift_alpha: float = Field(default=0.1, gt=0.0, lt=1.0)
    """The shift checks' level over the acceptance file's life: the probability that a file
    whose cases stay exchangeable with its calibration cases is ever flagged in a journal
    (each check spends a share of it; :mod:`dissensus.pipeline.shift`)."""
    shift_permutations: int = Field(default=200, ge=19, le=10000)
    """Deprecated and ignored: the label permutations of the permutation test the shift
    check used to be (it is a sample-split rank test now, with no permutations). Still
    accepted so that earlier policy files load (a policy file that sets it warns with a
    :class:`FutureWarning`; :func:`load_policy`), and kept at its default so that the run specification a
    policy without it journals stays what it was."""
    audit_rate: float = Field(default=0.05, ge=0.0, le=1.0)
    """Share of automatic commits that also open a blind audit item (the reviewer sees
    neither the committed answer nor the suggestion); chosen by a hash of
    ``(audit_seed, run id, line)``, so a resumed run and every door pick the same cases."""
    audit_seed: int = 0
    """Seed of the audit choice."""


class SeekContextSettings(_Section):
    """The bounded follow-up of ``seek_context``."""

    followup: Literal["reask", "dci", "none"] = "reask"
    """``reask``: ask every agent again under a perturbation; ``dci``: a DCI deliberation."""
    use_recorded: StrictBool = True
    """Use a re-ask recorded in the panel (each output's ``reask``; LLMBar's ``swap_decision`` /
    ``swap_reasoning`` as an alias) instead of calling a model."""
    perturbation: Literal["swap_order", "add_context"] = "swap_order"
    """``swap_order`` presents the options in reverse order; ``add_context`` appends ``context``."""
    context: str = ""
    """Text added by the ``add_context`` perturbation."""
    model: str | None = None
    """Model spec for live follow-ups; ``None``: ``$DISSENSUS_MODEL``. A model that answers for
    no particular agent is one extra voice (asked in both presentations), never an agent's."""
    models: dict[str, str] = Field(default_factory=dict)
    """Agent -> model spec: the model that *is* the agent. Only an answer from an agent's
    own model counts as that agent's re-ask (its stability, its calibration)."""
    max_followups: int = Field(default=1, ge=0, le=3)
    """Follow-ups per case (each followed by one more reading)."""


class ConcordSettings(_Section):
    """CONCORD (``docs/concord.md``) for decisions over explicit options with role utilities."""

    enabled: StrictBool = True
    """Run CONCORD on escalated panels whose ``meta`` holds ``options`` and ``utilities``."""
    floor: float = Field(default=0.7, ge=0.0, le=1.0)
    margin: float = Field(default=0.05, ge=0.0, le=1.0)
    rounds: int = Field(default=6, ge=0)


class BudgetSettings(_Section):
    """Model budget of one run."""

    max_calls: int | None = Field(default=200, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)


class PanelMember(_Section):
    """One member model of a chat panel (``panel.members``)."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    """The member's agent id in the panel (unique; letters, digits, ``.``, ``_``, ``-``)."""
    model: str = Field(min_length=3)
    """Model spec (``openai:MODEL``, ``scripted:FILE``, ``replay:FILE``, ``record:FILE:<spec>``);
    relative files are relative to the policy file."""
    family: str | None = None
    """Model family (e.g. ``meta``), which the guard and acceptance count as shared causes."""
    base_url: str | None = None
    """``openai:`` members only: the member's OpenAI-compatible server (``None``: ``$OPENAI_BASE_URL``).
    No credentials in it (user-info, a key in the query or a path parameter) and no
    fragment: the policy is journalled with
    every run (:func:`member_url_problem`); a key comes from ``api_key_env``."""
    api_key_env: str | None = Field(
        default=None, min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$"
    )
    """``openai:`` members only: the environment variable holding the member's API key
    (``None``: ``$OPENAI_API_KEY``). Only the variable's name is in the policy."""

    @model_validator(mode="after")
    def _base_url_for_openai(self) -> PanelMember:
        if self.base_url is not None and not self.model.startswith("openai:"):
            raise ValueError("base_url is only read for openai: members")
        if self.api_key_env is not None and not self.model.startswith("openai:"):
            raise ValueError("api_key_env is only read for openai: members")
        return self


def member_url_problem(url: str) -> str | None:
    """What is wrong with a panel member's ``base_url`` for a policy, or ``None``: not an
    ``http(s)`` URL with a host, a fragment, or credentials in it (user-info, a query or
    path parameter whose name says key, token, secret, password, signature or auth), which
    the journalled policy
    would keep and show to every caller who may read a run. The rule of every base URL
    (:func:`dissensus.llm.openai_backend.base_url_problem`)."""
    from dissensus.llm.openai_backend import base_url_problem

    return base_url_problem(url)


class PanelSettings(_Section):
    """A panel of member models behind ``POST /v1/chat/completions`` (see ``docs/chat.md``)."""

    members: list[PanelMember] = Field(default_factory=list)
    """The member models every request fans out to (none: the chat endpoint answers 404)."""
    answer: Literal["structured", "number", "regex"] = "structured"
    """How a member's answer becomes a decision: ``structured`` asks for a JSON object with
    ``decision`` and ``reasoning``; ``number`` extracts the final number of a free-form
    answer (as ``convert zeroeval``); ``regex`` takes a group of ``pattern``."""
    options: list[str] | None = None
    """``structured``: the decision's options (an enum); ``None``: any string, normalised
    (whitespace collapsed, case folded)."""
    pattern: str | None = None
    """``regex``: searched in the answer; its group ``decision``, else group 1 (or the match)
    is the decision (:mod:`dissensus.panels.answers`)."""
    instructions: str | None = None
    """System message put before the client's messages for every member (``None``: none)."""
    max_members: int = Field(default=16, ge=2, le=64)
    """Most members a panel may name."""
    min_answers: int = Field(default=2, ge=1)
    """Members that must answer (a decision or an abstention) for the panel to be decided;
    fewer: the request fails with ``502`` naming every member's failure."""
    deadline_s: float = Field(default=30.0, gt=0, allow_inf_nan=False)
    """Wall-clock seconds the fan-out of one request may take; members still running then
    are cancelled and count as failed (the rest of the panel is decided)."""
    attempt_timeout_s: float = Field(default=10.0, gt=0, allow_inf_nan=False)
    """Longest one attempt of a member may take (a timed-out attempt is retried while the
    deadline allows)."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries of a member's transient failures (429, 5xx, timeouts, broken bodies)."""
    max_tokens: int | None = Field(default=1024, ge=1)
    """Completion cap per member answer (a request's own ``max_tokens`` may lower it)."""
    request_max_tokens: int | None = Field(default=None, ge=1)
    """Token budget of one request across its members, every attempt counted (``None``: none);
    each member's completion cap is lowered to its share of it less the prompt, so that all
    members are asked at once (:mod:`dissensus.panels.fanout`)."""
    max_request_chars: int = Field(default=200_000, ge=1)
    """Most characters of message content in one request (413 above)."""
    member_concurrency: int = Field(default=16, ge=1, le=1024)
    """Calls in flight at once per member, across all requests (more wait for a slot,
    within the request's deadline)."""

    @field_validator("options")
    @classmethod
    def _distinct_options(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        # Compared as members' answers are matched to them (decision_form): an option
        # only invisible characters, or two a member's answer cannot tell apart, would
        # never be chosen, or be chosen for the other.
        if not value or any(not decision_form(o) for o in value):
            raise ValueError("options must be non-empty strings (not only invisible characters)")
        if len({decision_form(o) for o in value}) != len(value):
            raise ValueError(
                "options must be distinct (case, surrounding spaces, fullwidth letters and "
                "invisible characters ignored)"
            )
        return value

    @model_validator(mode="after")
    def _check_members(self) -> PanelSettings:
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError(f"member names must be unique: {names}")
        if len(self.members) > self.max_members:
            raise ValueError(f"{len(self.members)} members; at most max_members={self.max_members}")
        if self.members and len(self.members) < 2:
            raise ValueError("a panel needs at least two members")
        if self.min_answers > max(2, len(self.members)):
            raise ValueError(
                f"min_answers={self.min_answers} exceeds the {len(self.members)} members"
            )
        if self.answer == "regex":
            if not self.pattern:
                raise ValueError("answer: regex needs a pattern")
            try:
                re.compile(self.pattern)
            except re.error as exc:
                raise ValueError(f"invalid pattern: {exc}") from None
        return self


class Policy(_Section):
    """The whole pipeline policy (see the module docstring for the YAML form)."""

    reading: ReadingSettings = Field(default_factory=ReadingSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    guard: GuardSettings = Field(default_factory=GuardSettings)
    acceptance: AcceptanceSettings = Field(default_factory=AcceptanceSettings)
    seek_context: SeekContextSettings = Field(default_factory=SeekContextSettings)
    concord: ConcordSettings = Field(default_factory=ConcordSettings)
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    concurrency: int = Field(default=4, ge=1, le=64)
    """Cases decided at the same time."""
    allow_code: StrictBool = False
    """Allow ``module:function`` names that run code over panel text (the similarity
    backend); off by default. A policy file is trusted configuration either way."""
    deadline_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    """Wall-clock seconds one ``decide`` (or ``runs resume``) may run; then the run stops with
    status ``deadline`` (cases in flight are cancelled, the run stays resumable)."""
    panel: PanelSettings = Field(default_factory=PanelSettings)
    """Member models behind ``POST /v1/chat/completions`` (:mod:`dissensus.panels`)."""


_SECTIONS = frozenset(
    name
    for name, info in Policy.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, _Section)
)
"""The policy's sections (``reading``, ``guard``, ...): the keys holding settings of their own."""


def _field(loc: tuple[int | str, ...]) -> str:
    """The dotted field of ``loc`` as every error names it, each part cut to 64
    characters (:func:`dissensus.errors.field_path`): an unknown key of a page's length
    is named, not echoed."""
    return field_path(*loc) or "<root>"


def policy_from_dict(data: Any, *, file: str | None = None) -> Policy:
    """Validate a policy mapping; errors name the file and the dotted field."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("a policy must be a mapping", file=file)
    if any(data.get(name, ()) is None for name in _SECTIONS):
        # An empty section is its defaults (module docstring).
        data = {k: v for k, v in data.items() if not (v is None and k in _SECTIONS)}
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise _config_error(exc, file, ()) from exc
    _check_strict(data, file)
    _check_parts(policy, file)
    return policy


def _check_strict(data: dict[str, Any], file: str | None) -> None:
    """Refuse a value that validation only accepted by converting its type (``"0.9"`` or
    ``true`` for a number, ``1`` or ``"yes"`` for a switch): the policy validated as
    JSON in strict mode, where an integral float still counts as an integer."""
    try:
        text = json.dumps(_integral(data), default=str, allow_nan=True)
    except (TypeError, ValueError, RecursionError):
        return  # not JSON (a Python caller's objects): the lax validation stands
    try:
        Policy.model_validate_json(text, strict=True)
    except ValidationError as exc:
        first = exc.errors()[0]
        got = first.get("input")
        kind = {bool: "a switch", str: "text", int: "a number", float: "a number"}.get(
            type(got), type(got).__name__
        )
        message = f"{first['msg']}, not {kind} ({json.dumps(got, default=str)[:60]})"
        if isinstance(got, str) and _EXPONENT_ONLY.fullmatch(got.strip()):
            # YAML 1.1 (PyYAML) reads 1e-3 as text: only 1.0e-3 is a float.
            mantissa, _, exponent = got.strip().lower().partition("e")
            message += (
                f"; YAML reads a number with an exponent but no '.' as text: "
                f"write {mantissa}.0e{exponent}"
            )
        raise ConfigError(message, file=file, field=_field(tuple(first["loc"]))) from None


_EXPONENT_ONLY = re.compile(r"[-+]?[0-9]+[eE][-+]?[0-9]+")
"""A number written with an exponent and no ``.`` (``1e-3``), which YAML 1.1 reads as text."""


def _integral(value: Any) -> Any:
    """``value`` with each integral float made an int (``4.0`` is a valid integer)."""
    if value.__class__ is float and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_integral(v) for v in value]
    return value


DEPRECATED_SETTINGS: dict[tuple[str, str], str] = {
    ("acceptance", "shift_permutations"): (
        "the shift check is a sample-split rank test with no permutations; "
        "acceptance.shift_alpha is its level over the file's life"
    ),
}
"""Settings still accepted and ignored: (section, key) -> why, in words. A policy *file*
that sets one warns (:func:`load_policy`); a mapping does not, since every dump of a
:class:`Policy` holds them."""


def _warn_deprecated(data: Any, file: str) -> None:
    """A :class:`FutureWarning` for each deprecated setting a policy file sets: a warning
    for the file's author, shown by default (the CLI prints it as one ``warning:`` line),
    where a :class:`DeprecationWarning` from inside the package would be hidden."""
    for (section, key), why in DEPRECATED_SETTINGS.items():
        part = data.get(section) if isinstance(data, dict) else None
        if isinstance(part, dict) and key in part:
            where = f" (in {file})"
            warnings.warn(
                f"policy setting {section}.{key}{where} is deprecated and ignored: {why}",
                FutureWarning,
                stacklevel=3,
            )


def _config_error(
    exc: ValidationError,
    file: str | None,
    prefix: tuple[str, ...],
    model: type[BaseModel] | None = None,
) -> ConfigError:
    """The first problem of ``exc`` as a :class:`ConfigError` naming ``file`` and the
    dotted field (under ``prefix``); an unknown key of ``model`` (the model validated,
    :class:`Policy` by default) says which of its keys it is spelt close to."""
    errors = exc.errors()
    first = errors[0]
    message = first["msg"]
    if message.startswith("Value error, "):
        message = message[len("Value error, ") :]
    if first.get("type") == "extra_forbidden" and first.get("loc"):
        message = "unknown key" + _did_you_mean(
            tuple(first["loc"]), Policy if model is None else model
        )
    message += missing_misspelt(errors)
    return ConfigError(message, file=file, field=_field((*prefix, *first["loc"])))


def _did_you_mean(loc: tuple[int | str, ...], model: type[BaseModel]) -> str:
    """`` (did you mean 'theta_a'?)`` for the unknown key ``loc[-1]`` when ``model``'s
    mapping at ``loc[:-1]`` has a key spelt close to it (difflib's ratio at least 0.6);
    else ``` (known keys: ...)``` listing that mapping's keys, or nothing when the path
    does not lead to a model's mapping."""
    import difflib

    for part in loc[:-1]:
        info = model.model_fields.get(part) if isinstance(part, str) else None
        annotation = info.annotation if info is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return ""
        model = annotation
    keys = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known keys: {', '.join(keys)})" if keys else ""


SIMILARITY_NAMES = frozenset(
    {
        "minilm",
        "default",
        "all-minilm-l6-v2",
        "sentence-transformers/all-minilm-l6-v2",
        "tfidf",
        "static",
        "static-all-minilm-l6-v2",
    }
)
"""Built-in similarity backends (:func:`dissensus.states.similarity.get_backend`)."""


def check_similarity(
    name: str, *, file: str | None = None, field: str = "reading.similarity"
) -> None:
    """Refuse an unknown similarity backend before a run starts (a ``module:function`` is
    imported when the run specification is built: :meth:`dissensus.pipeline.RunSpec.from_policy`)."""
    key = name.strip()
    if key.lower() not in SIMILARITY_NAMES and ":" not in key:
        raise ConfigError(
            f"unknown similarity backend {key!r} (expected 'minilm', 'tfidf', 'static' or 'module:function')",
            file=file,
            field=field,
        )


PIPELINE_ACTIONS = (
    "auto",
    "auto_explain",
    "seek_context",
    "escalate",
    "concord",
    "deliberate",
)
"""Route actions the pipeline runs: the disagreement-states paper's four, ``concord`` (escalate through
CONCORD) and ``deliberate`` (seek context with a DCI deliberation)."""


def _check_actions(policy: Policy, file: str | None) -> None:
    """Refuse an action the pipeline does not run, wherever the policy names one."""
    named: list[tuple[str, object]] = [
        (f"routing.defaults.{state}", action) for state, action in policy.routing.defaults.items()
    ]
    named += [
        (f"routing.rules.{i}.action", rule.get("action"))
        for i, rule in enumerate(policy.routing.rules)
        if isinstance(rule, dict) and "action" in rule
    ]
    for where, action in named:
        if action not in PIPELINE_ACTIONS:
            raise ConfigError(
                f"unknown action {action!r} (the pipeline runs: {', '.join(PIPELINE_ACTIONS)})",
                file=file,
                field=where,
            )


def guard_thresholds(policy: Policy) -> GuardThresholds:
    """The guard's thresholds of a policy, new or journalled (``guard.options``).

    Read with :class:`~dissensus.guard.GuardThresholds`, so a run journalled with
    ``min_sources: 1`` still resumes (counted as 2); a number out of its range or not
    finite (it gave NaN or meaningless confidences) is a :class:`ConfigError` naming
    ``guard.options.FIELD``, never a validation traceback."""
    from dissensus.guard import GuardThresholds

    try:
        return GuardThresholds.model_validate(policy.guard.options)
    except ValidationError as exc:
        raise _config_error(exc, None, ("guard", "options"), GuardThresholds) from None


def check_policy(policy: Policy, *, file: str | None = None) -> None:
    """Check a policy built in Python as :func:`policy_from_dict` checks a file's
    (actions, rules, guard thresholds, similarity backend); :class:`ConfigError` otherwise."""
    _check_parts(policy, file)


def _check_parts(policy: Policy, file: str | None) -> None:
    """Validate the sections other parts interpret (route actions, routing rules, guard
    thresholds, the similarity backend's name) now, not at the first case."""
    _check_actions(policy, file)
    from dissensus.guard.decision import CheckedGuardThresholds
    from dissensus.states.routing import check_priorities

    check_similarity(policy.reading.similarity, file=file)
    for i, member in enumerate(policy.panel.members):
        if member.base_url is not None and not member.base_url:
            # Read as "no base_url", the member would talk to $OPENAI_BASE_URL or to
            # OpenAI's own API: a member meant to be a local server (an unset template
            # variable) sending its prompts elsewhere. Refused here, by every door.
            raise ConfigError(
                f"member {member.name}: base_url is empty: give the member's server URL, "
                "or leave base_url out for $OPENAI_BASE_URL",
                file=file,
                field=f"panel.members.{i}.base_url",
            )
        problem = member.base_url and member_url_problem(member.base_url)
        if problem:
            raise ConfigError(
                f"base_url {problem}: the policy is journalled with every run; give the "
                "member's key by the environment (api_key_env)",
                file=file,
                field=f"panel.members.{i}.base_url",
            )
    from dissensus.states.similarity import check_code_name

    try:  # a module:function backend runs code: only with allow_code (or the environment)
        check_code_name(policy.reading.similarity, allow_code=policy.allow_code or None)
    except ConfigError as exc:
        raise ConfigError(exc.inner(), file=file, field="reading.similarity") from None

    try:
        # Strict, as the policy's own sections are: a quoted "2" or a switch given as 1 is
        # refused, not converted (a policy journalled with a run is not checked again).
        CheckedGuardThresholds.model_validate(policy.guard.options, strict=True)
    except ValidationError as exc:
        raise _config_error(exc, file, ("guard", "options"), CheckedGuardThresholds) from exc
    check_priorities(policy.routing.rules, file=file, prefix="routing.")
    named = {
        "acceptance.model": policy.acceptance.model,
        "acceptance.calibration": policy.acceptance.calibration,
        "guard.calibration": policy.guard.calibration,
        "seek_context.model": policy.seek_context.model,
    }
    for where, value in named.items():
        # An empty name is no file: a template expanding to nothing must not switch a
        # file off unseen (``None``, the key left out, is "none").
        if value is not None and not value.strip():
            raise ConfigError(
                "an empty value names nothing: leave the key out (or null) for none",
                file=file,
                field=where,
            )
    check_routing_rules(policy, file=file)


def check_routing_rules(policy: Policy, *, file: str | None = None) -> None:
    """Compile ``policy``'s routing rules as a policy's load does (a number compared with
    a label refused, ``decision == 1``); :class:`ConfigError` naming the rule's field
    (``routing.rules.0.condition``) otherwise. A :class:`~dissensus.pipeline.spec.RunSpec`
    built directly is checked so too; one read back from a journal is not."""
    from dissensus.states import RuleSet

    document = policy.routing.rules_document()
    try:
        # The document's JSON, keys in their order: two documents with the same text are
        # the same rules. One that is not JSON is checked every time.
        seen: str | None = json.dumps(document)
    except (TypeError, ValueError):
        seen = None
    if seen is not None and seen in _VALID_RULES:
        return
    try:
        RuleSet.from_dict(document, file=file)
    except ConfigError as exc:
        where = f"routing.{exc.field}" if exc.field else "routing"
        text = str(exc)
        for prefix in (f"{file}: " if file else "", f"field {exc.field!r}: " if exc.field else ""):
            if prefix and text.startswith(prefix):
                text = text[len(prefix) :]
        raise ConfigError(text, file=file, field=where) from exc
    if seen is not None:
        with _VALID_RULES_LOCK:
            if len(_VALID_RULES) >= _VALID_RULES_KEPT:
                _VALID_RULES.pop(next(iter(_VALID_RULES)))
            _VALID_RULES[seen] = None


_VALID_RULES: dict[str, None] = {}
"""Rules documents (as JSON) :func:`check_policy` found valid, oldest first: a service
checks every request's policy, and compiling the rules parses every condition."""

_VALID_RULES_KEPT = 64
_VALID_RULES_LOCK = threading.Lock()


def load_policy(
    path: str | Path | None, *, base_dir: str | os.PathLike[str] | None = None
) -> tuple[Policy, Path | None]:
    """Read a policy file (``None``: the defaults); also returns the directory its
    relative paths are under: the file's own, or ``base_dir`` when given (model files
    included, as every other relative path of the policy)."""
    if path is None:
        return Policy(), None
    p = Path(path)
    text = read_text_file(p, what="policy")
    data = load_yaml_text(text, file=str(path))
    try:
        policy = policy_from_dict(data, file=str(path))
        _warn_deprecated(data, str(path))
        base = Path(base_dir).resolve() if base_dir is not None else p.resolve().parent
        return with_model_files_under(policy, base, file=str(path)), base
    except ConfigError as exc:
        raise with_line(exc, str(path), text) from None


def with_line(exc: ConfigError, file: str, text: str | None = None) -> ConfigError:
    """``exc`` naming the line of the policy file ``file`` its field is written on
    (:func:`~dissensus.io.yamlfile.with_field_line`; ``text``: the file's text, read again
    when not given), or ``exc`` itself."""
    return with_field_line(exc, file, text, what="policy")


def with_model_files_under(
    policy: Policy, base: Path, *, file: str | None = None, confine: bool = True
) -> Policy:
    """``policy`` with the relative files of its model specs resolved under ``base``
    (relative paths inside a policy are relative to the policy file, model files too);
    a :class:`ConfigError` naming ``file`` and the field of a spec that cannot be.
    ``confine``: as :func:`relative_model_spec` takes it (false for a policy with no
    file, whose base is the working directory)."""
    sc = policy.seek_context
    if not (sc.model or sc.models):
        return policy
    # Field values for model_copy(update=...) of SeekContextSettings.
    update: dict[str, Any] = {
        "models": {
            a: relative_model_spec(
                m, base, file=file, field=f"seek_context.models.{a}", confine=confine
            )
            for a, m in sc.models.items()
        }
    }
    if sc.model:
        update["model"] = relative_model_spec(
            sc.model, base, file=file, field="seek_context.model", confine=confine
        )
    return policy.model_copy(update={"seek_context": sc.model_copy(update=update)})


def relative_model_spec(
    spec: str,
    base: Path,
    *,
    file: str | None = None,
    field: str | None = None,
    confine: bool = True,
) -> str:
    """``spec`` with a relative file of ``scripted:``, ``replay:`` or ``record:FILE:...``
    under ``base``; a :class:`ConfigError` naming ``file`` and ``field`` (the policy's
    file and the spec's field) for a recording outside ``base`` (unless not
    ``confine``: a caller's own spec, made absolute under the working directory).

    A recording's file name ends at the first ``:`` of ``record:FILE:INNER``: a relative
    recording whose absolute path would hold a ``:`` (a directory named ``x:y``) is
    kept as written when ``base`` is the working directory (the spec reads the same
    file from there), and is otherwise a :class:`ConfigError` (no spec can name it)."""
    kind, sep, rest = spec.partition(":")
    if not sep or not rest:
        return spec
    if kind in ("scripted", "replay"):
        return spec if Path(rest).is_absolute() else f"{kind}:{base / rest}"
    if kind == "record":
        path, sep2, inner = rest.partition(":")
        if not sep2 or not path:
            return spec
        if not Path(path).is_absolute():
            inside = (base / path).resolve()
            if confine and not inside.is_relative_to(base.resolve()):
                # A policy writes recordings only beside itself unless it names an absolute path.
                raise ConfigError(
                    f"record: file {path!r} leaves the policy's directory; give an absolute path",
                    file=file,
                    field=field,
                )
            if ":" not in str(base / path):
                path = str(base / path)
            elif base.resolve() != Path.cwd().resolve():
                raise ConfigError(
                    f"record: file {path!r} would be {str(base / path)!r}, whose ':' ends "
                    "a recording's file name in a model spec; move the files to a "
                    "directory without ':' in its path",
                    file=file,
                    field=field,
                )
        inner = relative_model_spec(inner, base, file=file, field=field, confine=confine)
        return f"record:{path}:{inner}"
    return spec
