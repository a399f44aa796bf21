"""An Inspect AI score reducer that decides a grader panel with the dissensus pipeline.

>>> from inspect_ai.scorer import multi_scorer
>>> scorer = multi_scorer(scorers=[g1(), g2(), g3()], reducer="dissensus/dissensus")  # doctest: +SKIP
>>> scorer = multi_scorer([g1(), g2(), g3()], reducer=dissensus_reducer(
...     graders=["g1", "g2", "g3"], policy="policy.yaml"))               # doctest: +SKIP

The graders' scores become a :class:`~dissensus.types.Panel` (grader = agent, score value
= decision, explanation = reasoning), :func:`dissensus.pipeline.adecide` decides it, and
the reduced ``Score`` carries:

* ``value``: the guarded decision -- the pipeline's committed decision, else (escalated)
  the guard's answer (:func:`dissensus.guard.guard_votes` on the same votes: unweighted
  majority when consensus weighting is refused, ties broken by the posterior, then by
  the smallest label, never by the graders' order);
* ``answer``: the pipeline's action (``auto``, ``auto_explain``, ``escalate``, ...), so
  that ``inspect view`` filters escalated samples with ``answer == 'escalate'``;
* ``metadata``: ``state``, ``action``, ``decision`` (``None`` unless committed),
  ``escalate``, ``reason``, ``confidence`` and ``n_eff`` (the guard's posterior and
  effective number of independent graders), ``guard_mode``, ``tie``, ``agreement``,
  ``support`` (graders on the value / panel size, declined graders included),
  ``n_graders``, ``abstentions``, ``graders`` (each grader's decision), ``review_id``,
  ``notes`` (what of the graders' scores had to be changed or left out, below).

Choices where the frameworks are silent:

* **Grader names.** A score's ``metadata["grader"]`` names its grader; otherwise the
  reducer's ``graders`` argument names the scores in order when every grader scored;
  otherwise scores are ``grader-1``, ``grader-2``, ...
  Two scores of one sample naming one grader leave that sample unscored, naming the
  grader (one grader, one vote; :func:`scores_panel` raises an
  :class:`~dissensus.errors.InputError`), not a raw validation error: the tags are the
  scorers' output, which may go wrong for one sample only. A ``graders`` list of fewer than
  two names, or naming one twice, is a :class:`~dissensus.errors.ConfigError` (field
  ``graders``) when the reducer is made: no sample could be decided with it. So is every
  argument of the wrong kind, naming it (``graders`` or ``options`` not a list or tuple
  of strings, ``acceptance`` or ``guard_calibration`` no path or a name the system refuses, ``shift_every`` not a
  whole number 0 or more even with no journal to watch), never Python's own
  ``TypeError`` from deep inside the check.
* **Declined graders are abstentions**, never dropped: a score whose value is ``None``
  or NaN (``Score.unscored``), and -- when ``graders`` is given -- each listed grader
  with no score (``multi_scorer`` drops scorers that returned ``None``) stays in the
  panel with ``decision: null``. The panel's size, and so ``support``, counts them.
* **Values** are labels in the panel: ``"C"`` stays ``"C"``, ``1``/``1.0`` -> ``"1"``,
  ``True`` -> ``"true"``, other values their JSON text. A score's ``metadata`` may add
  ``family``, ``confidence`` and ``evidence`` (``[{"source": ..., "present": ...}]``) for
  the guard. The reduced ``value`` is the graders' own value of the label decided (that
  of the first score giving it: ``4``, not ``"4"``; a dict of values, not its JSON
  text), so that the scorer's metrics read it as they read a grader's: a dict-valued
  panel reduced to a JSON string failed the whole eval under a dict of metrics
  (``A dictionary of metrics specified for a non-dictionary score``).
* **One bad score fails one sample, never the eval.** What a panel cannot hold is made to
  fit and noted in ``metadata["notes"]`` naming the grader (its first 80 characters) and
  the field: a text (the
  explanation, the value, the grader's name, the family) over
  :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters is cut to it, a lone
  surrogate is read as U+FFFD (a grader with no explanation reasons ``name: value``, cut
  to the same bound), and a ``family`` that is not text or ``evidence`` not in
  the shape above is left out, as is a ``confidence`` that is not a number in [0, 1]
  (words, a boolean, NaN, 5, an integer too large for a float). A sample whose panel
  is still refused -- more text than a record holds, a value no label holds (an integer
  of more than 4,300 digits, alone or in a list), fewer than two graders (one scored,
  the others returned ``None`` and ``graders`` does not name them), two scores naming
  one grader -- is unscored with
  the reason on one line (``answer`` ``"error"``, ``metadata["error"]``) and a warning
  in the log; the other samples are decided as usual.
* **The sample.** Inspect passes a reducer the scores only. The panel's ``meta`` says
  which sample they are of (``source: inspect``, ``sample_id``, ``epoch``, ``question``,
  ``target``; ``dissensus review show`` shows the question): each is the first score's
  ``metadata`` value of that key, else what Inspect holds of the sample being scored
  (its id, epoch, input text and target; nothing outside a sample's scoring: a call
  outside an eval, an ``Epochs`` reducer, where only the scores' ``metadata`` can name
  it), else absent. A question or target is cut and noted as a grader's text is; one
  that is not text (an id or epoch not text or a whole number) is left out and noted.
* **Panel id** is ``inspect-``, the sample id and ``-`` when it is a plain token (at
  most 64 of ``A-Z a-z 0-9 . _ : -``), then the first 12 hex digits of the sha256 of
  everything the pipeline reads of the panel (each output's every field, and ``meta``):
  panels that differ in anything (evidence, a family, the sample) are two cases. Each
  reduction is one run in the journal (in memory unless ``journal`` is a path).
* **The journal** is checked when the reducer is made, opened and closed once (an
  SQLite file not there yet is created). A relative path is resolved then, against the
  working folder the policy file is read from (``inspect eval`` makes a task in the task
  file's folder and restores the launch folder before it reduces), never at a
  reduction: anything that is no path (``journal=5``), an empty or blank path (which the
  error says is not the in-memory journal leaving ``journal`` out gives) or a
  journal that cannot be opened (a directory, in a folder that does not exist) is a
  :class:`~dissensus.errors.ConfigError` naming ``journal``, not a failure of every
  sample in an eval reported as a success. A journal that cannot be opened at a
  reduction (removed meanwhile) raises that ``ConfigError`` from the reducer: Inspect
  reports the sample's error and the eval's, never a sample unscored for its scores.
  It is opened as every door opens a journal
  (:func:`dissensus.store.journal.open_journal`): with ``$DISSENSUS_SIGNING_KEY`` set,
  each reduction's run is sealed, and a key set but unusable is a ``ConfigError``
  naming the variable when the reducer is made (a journal in memory too).
* **Acceptance and guard calibration**: ``acceptance`` is a learned acceptance file
  written by ``dissensus calibrate-acceptance`` (``dissensus.acceptance/2``, passed as the
  policy's ``acceptance.model``) or a reliability file (``dissensus.reliability/1``, passed
  as ``acceptance.calibration``); ``guard_calibration`` is a ``dissensus calibrate`` file
  (the policy's ``guard.calibration``). They go into the policy, and the reducer builds
  one :class:`~dissensus.pipeline.RunSpec` from it when it is made, as ``dissensus
  decide`` would: every file is loaded, checked and hashed before the first sample (a
  policy file's digest too). Given a ``RunSpec``, the reducer keeps all of it (learned
  acceptance, model, files, overrides) and only adds the files passed; passing a file
  the spec already has (``acceptance=`` on a spec with learned acceptance,
  ``guard_calibration=`` on one with a guard calibration) is a
  :class:`~dissensus.errors.ConfigError`, not a silent replacement. The learned
  acceptance file (the spec's or the one passed) is checked against the guard settings
  the reducer decides with, the spec's guard calibration or the one passed
  (:meth:`~dissensus.pipeline.RunSpec.read_as_calibrated`), as ``dissensus decide``
  checks it: a file calibrated with another guard calibration, or without one, is
  refused naming ``guard.calibration``.
* **Options.** Inspect knows no options of a grader's value, so a panel has none unless
  ``options`` lists them (``options=["C", "I"]``): they become every panel's
  ``meta.options``, which a follow-up re-ask (``seek_context`` with a model) offers the
  graders again, and which lead the options a reviewer is shown. Without them a re-ask
  ends ``the case has no explicit options to re-ask`` and the case goes on to acceptance
  or a reviewer. A list of fewer than two labels, naming one twice, or a label with a
  control character is a :class:`~dissensus.errors.ConfigError` (field ``options``).
* **Registered names.** The reducer is registered twice: as ``"dissensus"`` and, in the
  ``package/name`` form Inspect gives extension packages, as ``"dissensus/dissensus"``.
  Inspect looks a namespaced name up by loading that package's ``inspect_ai`` entry
  point, so ``reducer="dissensus/dissensus"`` resolves wherever dissensus is installed,
  with nothing imported first. A plain name loads no entry point: ``"dissensus"``
  resolves once this module is imported, or once Inspect has loaded every entry point
  (``eval()`` and ``get_model()`` do, so a task file run by ``inspect eval`` may use it);
  a scorer built with it before either is Inspect's ``LookupError``.
* **Shift watch.** Each reduction is a run of one panel, too few cases for a run's own
  shift check, so a reducer with a ``journal`` path keeps a shift watch
  (:mod:`dissensus.pipeline.shift_watch`) and steps it after each reduction: every
  ``shift_every`` judged cases (default 100; 0: no watch) it checks the latest cases
  judged with the policy's acceptance file in the journal and journals a check that
  flags the file, so that under ``acceptance.on_shift: escalate`` later samples are held
  as ``dissensus decide`` holds them. A failed check is logged, never the sample's.
* **The eval log.** Inspect records a reducer's creation parameters in the eval log (the
  scorer's ``reducer.params``, each sample's ``scorer_args``). The ``journal`` is
  recorded as every message names it, a ``postgresql://`` URL's password masked
  (:func:`~dissensus.store.targets.mask_url`): the log is shared and viewed. The
  reducer still writes to the journal the URL names; re-creating it from the log needs
  the password from libpq's own sources (``PGPASSWORD``, ``~/.pgpass``). A ``policy``
  given as a :class:`~dissensus.pipeline.RunSpec` is recorded without the content of
  the files it loaded (``acceptance``, ``calibration``, ``guard_calibration``): Inspect
  wrote the whole spec, the learned acceptance file's calibration vectors included
  (150 kB for the LLMBar file), into the log's header and into every sample's score, so
  an eval of 20 samples logged 14.6 MB where the same eval with the policy file's path
  logged 0.3 MB. Each is recorded by the figures that name it instead: the sha256 of
  its content as ``run.started`` journals it (``content_sha256``), its ``format`` and,
  for a learned acceptance file, its own ``sha256``; its ``files`` name the files
  by path and sha256 when the spec was built from them. A spec made with the content
  and no file (``RunSpec(policy=..., acceptance=...)``) has no ``files``, and its log
  named nothing of the acceptance file that judged its samples.
* Inspect calls reducers synchronously inside its event loop, so the pipeline runs on a
  worker thread for the duration of the call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from dissensus.integrations._extras import missing_extra

try:
    from inspect_ai.scorer import Score, ScoreReducer, score_reducer
except ModuleNotFoundError as exc:  # named with the extra that installs it
    raise missing_extra(exc, door="the Inspect AI integration", extra="inspect") from exc

from dissensus.errors import ConfigError, InputError
from dissensus.guard import guard_votes
from dissensus.integrations._journal import MEMORY, checked_journal, open_journal
from dissensus.io.limits import MAX_FIELD_CHARS
from dissensus.pipeline import (
    CaseRecord,
    Policy,
    RunSpec,
    SpecFile,
    adecide,
    load_policy,
    panel_votes,
    policy_from_dict,
)
from dissensus.pipeline.policy import guard_thresholds
from dissensus.pipeline.shift_watch import EVERY, ShiftWatch, check_every
from dissensus.pipeline.spec import file_sha256
from dissensus.quoting import one_line, quote_short
from dissensus.store.canonical import canonical, sha256_text
from dissensus.store.targets import mask_url
from dissensus.types import AgentOutput, Evidence, JsonObject, Panel, option_id_problem

__all__ = ["dissensus_reducer", "scores_panel"]

T = TypeVar("T")

log = logging.getLogger("dissensus.integrations.inspect")

DECLINED = "declined to score"


class _Unfit(InputError):
    """Internal: this sample's scores make no panel (a value that is no label, fewer than
    two graders): the sample is unscored with the reason, the eval goes on."""


def _label(value: Any, name: str) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, str):
        return value or None
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
            return str(int(value))
        if isinstance(value, float):
            return repr(value)
        return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            why = f"holds an integer of more than {sys.get_int_max_str_digits()} digits"
        else:
            why = " ".join(str(exc).split())
        raise _Unfit(f"{_who(name)}: value: no label can hold it ({why})") from None
    except (TypeError, RecursionError) as exc:
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise _Unfit(f"{_who(name)}: value: no label can hold it ({why})") from None


def _names(
    scores: Sequence[Score], graders: Sequence[str] | None, notes: list[str]
) -> tuple[list[str], list[str]]:
    """Names of the scores, and of the listed graders that gave no score."""
    tagged = [(s.metadata or {}).get("grader") for s in scores]
    named = [isinstance(t, str) and bool(t) for t in tagged]
    if all(named):
        names = [str(t) for t in tagged]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise _Unfit(
                f"grader {quote_short(twice[0])} gave more than one score for this sample: one grader, "
                "one vote (give each scorer its own metadata['grader'])"
            )
        stray = [n for n in names if graders is not None and n not in graders]
        if stray:
            listed = ", ".join(quote_short(g) for g in graders or [])
            raise _Unfit(
                f"grader {quote_short(stray[0])} is not one of graders ({listed}): a score's "
                "metadata['grader'] names one of them"
            )
        missing = [g for g in graders or [] if g not in names]
        return names, missing
    if any(named):
        raise _Unfit(
            f"{sum(named)} of {len(scores)} scores name their grader in metadata['grader'] "
            "and the others do not: tag every score, or none"
        )
    if graders is not None and len(graders) == len(scores):
        return list(graders), []
    if graders is not None and len(scores) > len(graders):
        raise _Unfit(
            f"{len(scores)} scores for the {len(graders)} graders listed: one grader, one vote"
        )
    names = [f"grader-{i + 1}" for i in range(len(scores))]
    extra = max(0, len(graders or []) - len(scores))
    if extra:
        notes.append(
            f"the {len(scores)} scores name no grader and graders lists {extra} more: they are "
            f"named grader-1 ... and {extra} counted as declined (tag each score with "
            "metadata['grader'] to keep the names)"
        )
    return names, [f"declined-{k + 1}" for k in range(extra)]


def _confidence(value: object, name: str, notes: list[str]) -> float | None:
    """A grader's ``metadata.confidence`` as the panel takes it: a number in [0, 1], or a
    string holding one (scorers that parse a model's reply often keep the text); anything
    else (a boolean, words, NaN, a number out of range or too large for a float) is no
    confidence rather than a failed sample, and noted."""
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = float(value)
        except (ValueError, OverflowError):
            number = None
    if number is None or not 0.0 <= number <= 1.0:  # NaN is not in range either
        notes.append(f"{_who(name)}: metadata.confidence left out (not a number in [0, 1])")
        return None
    return number


_SURROGATE = re.compile("[\ud800-\udfff]")

_WHO_CHARS = 80
"""How many characters of a grader's name a note shows (a name may be 32,768 long)."""


def _who(name: str) -> str:
    """A grader's name as a note names it: at most :data:`_WHO_CHARS` characters, then
    ``…``, what shows as nothing escaped (a grader's name is untrusted text, and notes
    reach logs and screens)."""
    cut = name if len(name) <= _WHO_CHARS else name[:_WHO_CHARS] + "…"
    return one_line(cut)


def _text(name: str, field: str, text: str, notes: list[str]) -> str:
    """A grader's text as the panel can hold it: a lone surrogate (which no UTF-8 journal
    holds) as U+FFFD, and at most :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters;
    each change noted (``notes``) with the grader and the field."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
        notes.append(f"{_who(name)}: {field}: a lone surrogate read as U+FFFD")
    if len(text) > MAX_FIELD_CHARS:
        notes.append(
            f"{_who(name)}: {field}: cut from {len(text)} to {MAX_FIELD_CHARS} characters "
            "(the most a field holds)"
        )
        text = text[:MAX_FIELD_CHARS]
    return text


def _output(name: str, score: Score | None, notes: list[str]) -> AgentOutput:
    """A grader's score as a panel's output; what of its metadata the panel cannot take
    (a family that is not text, evidence not in the documented shape) is left out and
    noted, never a failed sample."""
    name = _text(name, "grader", name, notes)
    if score is None:
        return AgentOutput(agent=name, decision=None, reasoning=DECLINED)
    decision = _label(score.value, name)
    if decision is not None:
        decision = _text(name, "value", decision, notes)
    meta = score.metadata or {}
    family = meta.get("family")
    if family is not None and not (isinstance(family, str) and family.strip()):
        notes.append(f"{_who(name)}: metadata.family left out (not a non-empty string)")
        family = None
    elif isinstance(family, str):
        family = _text(name, "metadata.family", family, notes)
    raw_evidence = meta.get("evidence")
    evidence: list[Evidence] | None = None
    if raw_evidence is not None:
        try:
            evidence = [Evidence.model_validate(e) for e in raw_evidence]
        except (TypeError, ValidationError):
            notes.append(
                f"{_who(name)}: metadata.evidence left out (not a list of {{source, present}})"
            )
    reasoning = _text(name, "explanation", (score.explanation or "").strip(), notes)
    confidence = _confidence(meta.get("confidence"), name, notes)
    try:
        return AgentOutput(
            agent=name,
            decision=decision,
            reasoning=reasoning or _stand_in(name, decision),
            family=family,
            confidence=confidence,
            evidence=evidence,
        )
    except ValidationError as exc:
        raise _Unfit(f"{_who(name)}: {_one_line(exc)}") from None


def _stand_in(name: str, decision: str | None) -> str:
    """The reasoning of a grader that gave no explanation: ``name: decision`` (or
    :data:`DECLINED`), at most :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters. A
    value cut to that bound made the text longer than a field holds, and the sample was
    refused for a reasoning the grader never gave."""
    return DECLINED if decision is None else f"{name}: {decision}"[:MAX_FIELD_CHARS]


def scores_panel(
    scores: Sequence[Score],
    graders: Sequence[str] | None = None,
    notes: list[str] | None = None,
    options: Sequence[str] | None = None,
) -> Panel:
    """The panel of a list of grader scores (declined graders as abstentions); what had to
    be changed or left out to make it is appended to ``notes``. ``options`` (the labels a
    grader may give) become the panel's ``meta.options``."""
    kept = notes if notes is not None else []
    names, missing = _names(scores, graders, kept)
    outputs = [_output(n, s, kept) for n, s in zip(names, scores, strict=True)]
    outputs += [_output(n, None, kept) for n in missing]
    if len(outputs) < 2:
        hint = (
            ""
            if graders
            else (
                "; pass graders=[...] so that a scorer that returned None counts as an abstention"
            )
        )
        raise _Unfit(
            f"{len(outputs)} grader(s) scored this sample: a panel needs at least two{hint}"
        )
    meta = _case_meta(scores, kept)
    if options is not None:
        meta["options"] = list(options)
    try:
        return Panel(id=_panel_id(outputs, meta), meta=meta, outputs=outputs)
    except ValidationError as exc:
        raise _Unfit(_one_line(exc)) from None


_SAFE_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")
"""A sample id the panel id shows as it is (anything else is known by the digest only)."""


def _panel_id(outputs: Sequence[AgentOutput], meta: JsonObject) -> str:
    """``inspect-`` [sample id ``-``] and 12 hex digits of the sha256 of everything the
    pipeline reads of the panel (each output's every field, and ``meta``): panels that
    differ in anything are two cases."""
    body = canonical(
        {"meta": meta, "outputs": [o.model_dump(mode="json", exclude_none=True) for o in outputs]}
    )
    digest = hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]
    sid = meta.get("sample_id")
    shown = str(sid) if isinstance(sid, str | int) and not isinstance(sid, bool) else ""
    return f"inspect-{shown}-{digest}" if _SAFE_ID.fullmatch(shown) else f"inspect-{digest}"


SAMPLE_KEYS = ("sample_id", "epoch", "question", "target")
"""What a score's ``metadata`` may say of its sample, copied to the panel's ``meta``."""


def _case_meta(scores: Sequence[Score], notes: list[str]) -> JsonObject:
    """The panel's ``meta``: the sample the scores are of. Each of :data:`SAMPLE_KEYS` is
    the first score's ``metadata`` value that has it, else the running sample's (what
    Inspect holds of the sample being scored), else absent; texts made to fit as a
    grader's are."""
    running = _running_sample()
    meta: JsonObject = {"source": "inspect"}
    for key in SAMPLE_KEYS:
        given = [m[key] for s in scores if (m := s.metadata or {}).get(key) is not None]
        value = given[0] if given else running.get(key)
        if key in ("sample_id", "epoch") and isinstance(value, int) and not isinstance(value, bool):
            meta[key] = value
        elif isinstance(value, str):
            meta[key] = _text("sample", f"metadata.{key}", value, notes)
        elif value is not None:
            notes.append(f"sample: metadata.{key} left out (not text or a whole number)")
    return meta


def _running_sample() -> dict[str, object]:
    """The sample Inspect is scoring, as :data:`SAMPLE_KEYS` (empty outside an eval, or
    when this Inspect keeps no running sample). Inspect passes a reducer the scores
    only; the sample it holds for the task running them is read where it keeps it."""
    try:
        from inspect_ai.solver._task_state import sample_state

        state = sample_state()
        if state is None:
            return {}
        return {
            "sample_id": state.sample_id,
            "epoch": state.epoch,
            "question": state.input_text,
            "target": state.target.text,
        }
    except Exception:  # another Inspect: the scores' metadata still names the sample
        return {}


def _one_line(exc: ValidationError) -> str:
    """A validation error's first failure on one line: the field and the message."""
    first = exc.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"]) or "panel"
    message = str(first["msg"]).removeprefix("Value error, ")
    return " ".join(f"{where}: {message}".split())


def _run_sync(coro: Coroutine[Any, Any, T]) -> T:
    try:
        running = asyncio.get_running_loop() is not None
    except RuntimeError:
        running = False
    if not running:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _spec(
    policy: str | Policy | RunSpec | JsonObject | None,
    acceptance: str | None,
    guard_calibration: str | None,
) -> RunSpec:
    """The reducer's run specification: the policy, with the reducer's files in its place.

    A :class:`RunSpec` keeps every field (its files, learned acceptance, model, overrides)
    and gains only the files passed here; a file the spec already has (``acceptance=`` on
    a spec with learned acceptance, a reliability file on a spec with one,
    ``guard_calibration=`` on a spec with a guard calibration) is a :class:`ConfigError`:
    a built spec is not silently re-specified. Otherwise the reducer's files replace the
    policy's, as ``dissensus decide --acceptance`` does.
    """
    _check_files(acceptance=acceptance, guard_calibration=guard_calibration)
    acceptance = None if acceptance is None else os.fspath(acceptance)
    guard_calibration = None if guard_calibration is None else os.fspath(guard_calibration)
    if acceptance is None and guard_calibration is None:
        return RunSpec.from_policy(policy)
    learned = acceptance if acceptance is not None and _is_learned_acceptance(acceptance) else None
    reliability = acceptance if acceptance is not None and learned is None else None
    if isinstance(policy, RunSpec):
        return _with_files(policy, learned, reliability, guard_calibration)
    base_dir: Path | None = None
    policy_file: str | None = None
    files: tuple[SpecFile, ...] = ()
    if isinstance(policy, Policy):
        pol = policy
    elif isinstance(policy, dict):
        pol = policy_from_dict(policy)
    elif policy is None:
        pol = Policy()
    else:
        pol, base_dir = load_policy(policy)
        policy_file = str(policy)
        # The policy file's digest is journalled, as ``dissensus decide --policy`` does.
        resolved = Path(policy).resolve()
        files = (SpecFile(role="policy", path=str(resolved), sha256=file_sha256(resolved)),)
    pol = _with_paths(pol, reliability, guard_calibration)
    spec = RunSpec.from_policy(pol, base_dir=base_dir, policy_file=policy_file, acceptance=learned)
    return spec.model_copy(update={"files": files + spec.files}) if files else spec


def _with_paths(pol: Policy, reliability: str | None, guard_calibration: str | None) -> Policy:
    """``pol`` naming the reducer's reliability and guard calibration files (absolute)."""
    if reliability is None and guard_calibration is None:
        return pol
    data = pol.model_dump(mode="json")
    if reliability is not None:
        data["acceptance"]["calibration"] = str(Path(reliability).resolve())
    if guard_calibration is not None:
        data["guard"]["calibration"] = str(Path(guard_calibration).resolve())
    return policy_from_dict(data)


def _with_files(
    spec: RunSpec, learned: str | None, reliability: str | None, guard_calibration: str | None
) -> RunSpec:
    """``spec`` with the reducer's files added: every field of the spec is kept."""
    for arg, given, held in (
        ("acceptance", learned, spec.acceptance),
        ("acceptance", reliability, spec.calibration),
        ("guard_calibration", guard_calibration, spec.guard_calibration),
    ):
        if given is not None and held is not None:
            raise ConfigError(
                f"the RunSpec already has this file ({given} would replace it); pass it in "
                "the spec or here, not both",
                field=arg,
            )
    pol = _with_paths(spec.policy, reliability, guard_calibration)
    # Only the new files are read: the spec's own are taken as they are (never re-read).
    data = pol.model_dump(mode="json")
    data["acceptance"]["model"] = None
    if reliability is None:
        data["acceptance"]["calibration"] = None
    if guard_calibration is None:
        data["guard"]["calibration"] = None
    added = RunSpec.from_policy(policy_from_dict(data), policy_file=spec.policy_file, environ={})
    out = spec.model_copy(
        update={
            "policy": pol,
            "calibration": added.calibration or spec.calibration,
            "guard_calibration": added.guard_calibration or spec.guard_calibration,
            "files": spec.files + added.files,
        }
    )
    # Learned acceptance (the spec's own or the one passed) is checked against the guard
    # the reducer decides with: the spec's guard calibration, or the one passed here.
    return out.with_acceptance(learned) if learned is not None else out.read_as_calibrated()


def _is_learned_acceptance(path: str) -> bool:
    """Whether ``path`` is a ``calibrate-acceptance`` file (else a reliability file)."""
    from dissensus.acceptance.file import ACCEPTANCE_FORMAT

    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return False  # the pipeline's own loader reports the problem with the file
    return isinstance(data, dict) and data.get("format") == ACCEPTANCE_FORMAT


def _metadata(panel: Panel, record: CaseRecord, spec: RunSpec) -> tuple[str | None, JsonObject]:
    votes = panel_votes(panel)
    settings = guard_thresholds(spec.policy)
    guard = (
        guard_votes(votes, spec.guard_calibration, settings=settings, case_id=panel.id)
        if len(votes) >= 2
        else None
    )
    fallback = guard.answer if guard is not None else (votes[0].answer if votes else None)
    value = record.decision if record.decision is not None else fallback
    counts = [o.decision for o in panel.outputs]
    tally = {d: counts.count(d) for d in dict.fromkeys(c for c in counts if c is not None)}
    top = max(tally.values(), default=0)
    meta: JsonObject = {
        "state": record.state,
        "action": record.action,
        "decision": record.decision,
        "escalate": record.action == "escalate",
        "reason": record.reason,
        "confidence": guard.confidence if guard is not None else None,
        "n_eff": guard.n_eff if guard is not None else float(len(votes)),
        "guard_mode": guard.mode if guard is not None else None,
        "tie": sorted(d for d, n in tally.items() if n == top)
        if list(tally.values()).count(top) > 1
        else [],
        "agreement": (top / len(votes)) if votes else 0.0,
        "support": (tally.get(value, 0) / len(panel.outputs)) if value is not None else 0.0,
        "n_graders": len(panel.outputs),
        "abstentions": sum(d is None for d in counts),
        "graders": {o.agent: o.decision for o in panel.outputs},
        "review_id": record.review_id,
    }
    return value, meta


def _given_value(scores: Sequence[Score], label: str | None) -> Any:
    """The value a grader gave whose panel label is ``label`` (the first score giving it),
    as the graders gave it (``4``, ``True``, a dict of values), else ``label`` itself."""
    if label is None:
        return None
    for score in scores:
        try:
            found = _label(score.value, "")
        except _Unfit:  # refused in the panel already; no label of this one
            continue
        if found is not None and _text("", "value", found, []) == label:
            return score.value
    return label


def _not_decided(exc: BaseException, notes: list[str]) -> Score:
    """The unscored score of a sample whose panel was refused, with the reason on one line
    (also logged as a warning)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    log.warning("dissensus reducer: sample not decided: %s", text)
    return Score.unscored(
        reason=f"not decided: {text}",
        answer="error",
        explanation=f"not decided: {text}",
        metadata={"error": text, "notes": notes},
    )


def _check_options(options: list[str] | None) -> None:
    """The ``options`` argument: at least two labels, each once, each one line (what a
    decision is), checked when the reducer is made."""
    if options is None:
        return
    if not _is_list(options) or not all(isinstance(o, str) and o.strip() for o in options):
        raise ConfigError(
            "expected a list of non-empty labels (the graders' values)", field="options"
        )
    if len(set(options)) < 2 or len(set(options)) != len(options):
        raise ConfigError(
            f"{len(options)} option(s), {len(set(options))} distinct: a re-ask needs at least "
            "two, each once",
            field="options",
        )
    found = option_id_problem({"options": list(options)})
    if found is not None:
        raise ConfigError(found[1], field=found[0].removeprefix("meta."))


def _is_list(value: object) -> bool:
    """Whether ``value`` is a list (or tuple) of names, as ``graders`` and ``options`` are:
    a string, a mapping, a generator or a number is none."""
    return isinstance(value, list | tuple)


def _check_files(**given: object) -> None:
    """The file arguments (``acceptance``, ``guard_calibration``): a path (a ``str`` or
    ``os.PathLike``) of a file that is there, else a :class:`ConfigError` naming the
    argument."""
    for arg, value in given.items():
        if value is None:
            continue
        if not isinstance(value, str | os.PathLike) or not isinstance(os.fspath(value), str):
            raise ConfigError(f"expected a file path, not {type(value).__name__}", field=arg)
        try:
            found = Path(value).is_file()
        except OSError as exc:  # a name the system refuses (too long)
            raise ConfigError(f"not a usable path: {exc.strerror or exc}", field=arg) from None
        if not found:
            raise ConfigError(f"file not found: {os.fspath(value)}", field=arg)


def _check_graders(graders: list[str] | None) -> None:
    """The ``graders`` argument: at least two names, each once (the eval's set-up, so a
    :class:`ConfigError` when the reducer is made, not a failure of every sample)."""
    if graders is None:
        return
    if not _is_list(graders) or not all(isinstance(g, str) and g for g in graders):
        raise ConfigError("expected a list of non-empty grader names", field="graders")
    if len(graders) < 2:
        raise ConfigError(
            f"{len(graders)} grader(s) named: a panel needs at least two", field="graders"
        )
    twice = sorted({g for g in graders if graders.count(g) > 1})
    if twice:
        raise ConfigError(
            f"grader {quote_short(twice[0])} is named twice: one grader, one vote", field="graders"
        )


class _Reducer:
    """The reducer Inspect is given: ``reduce``, with the parameters Inspect records of it
    (its eval log's ``reducer.params``, each sample's ``scorer_args``) holding the
    ``journal`` as every message names it, a database URL's password masked: the log is
    shared and viewed, never the place of a credential."""

    _reduce: Callable[[list[Score]], Score]
    _policy: JsonObject | None

    def __init__(
        self, reduce: Callable[[list[Score]], Score], policy: JsonObject | None = None
    ) -> None:
        object.__setattr__(self, "_reduce", reduce)
        object.__setattr__(self, "_policy", policy)

    @property
    def __name__(self) -> str:
        return "reduce"

    def __call__(self, scores: list[Score]) -> Score:
        return self._reduce(scores)

    def __setattr__(self, name: str, value: object) -> None:
        # Inspect tags the reducer with its creation parameters (setattr), once made.
        if isinstance(value, dict) and isinstance(value.get("journal"), str):
            value = {**value, "journal": mask_url(value["journal"])}
        if isinstance(value, dict) and "policy" in value and self._policy is not None:
            value = {**value, "policy": self._policy}
        object.__setattr__(self, name, value)


def _recorded_policy(policy: object) -> JsonObject | None:
    """What the eval log records of a ``policy`` given as a :class:`RunSpec` (``None``:
    the argument as Inspect records it): the spec with each file content it loaded
    (``acceptance``, ``calibration``, ``guard_calibration``) replaced by the figures that
    name it (:func:`_loaded_figures`), its ``files`` naming the files by path and sha256."""
    if not isinstance(policy, RunSpec):
        return None
    recorded = policy.model_dump(
        mode="json", exclude={"acceptance", "calibration", "guard_calibration"}
    )
    started = policy.started()
    for key, content in (
        ("acceptance", started.acceptance),
        ("calibration", started.calibration),
        ("guard_calibration", started.guard_calibration),
    ):
        recorded[key] = None if content is None else _loaded_figures(content)
    return recorded


def _loaded_figures(content: JsonObject) -> JsonObject:
    """What names a loaded file's ``content`` in the eval log: ``content_sha256``, the
    sha256 of its canonical JSON as ``run.started`` journals it, its ``format`` when it
    states one and, for a learned acceptance file, its own ``sha256`` (the figure its
    shift checks and ``acceptance`` commands name it by)."""
    try:
        digest: str | None = sha256_text(canonical(content))
    except (TypeError, ValueError):  # not JSON a journal could hold either
        digest = None
    figures: JsonObject = {"content_sha256": digest}
    for key in ("format", "sha256"):
        value = content.get(key)
        if isinstance(value, str):
            figures[key] = value
    return figures


@score_reducer(name="dissensus")
def dissensus_reducer(
    graders: list[str] | None = None,
    policy: str | JsonObject | Policy | RunSpec | None = None,
    acceptance: str | None = None,
    guard_calibration: str | None = None,
    journal: str | None = None,
    shift_every: int = EVERY,
    options: list[str] | None = None,
) -> ScoreReducer:
    """Reduce a grader panel's scores to the pipeline's guarded decision.

    ``graders`` names the scorers in order (and lets a grader that returned ``None``
    count as an abstention); ``policy`` is a policy file, dict, :class:`Policy` or
    :class:`~dissensus.pipeline.RunSpec`;
    ``acceptance`` a ``calibrate-acceptance`` file (or a reliability file); ``guard_calibration`` a guard
    calibration file; ``journal`` a journal path (default: in memory); ``shift_every``
    the judged cases between two checks of the reducer's shift watch (as ``dissensus
    serve --shift-every``; 0: none; a journal in memory is never watched); ``options``
    the labels a grader may give, the case's options (what a follow-up re-ask offers).
    """
    _check_graders(graders)
    _check_options(options)
    check_every(shift_every)  # checked with no journal too: a wrong argument is never ignored
    spec = _spec(policy, acceptance, guard_calibration)
    # The shift watch of the reducer's cases (dissensus.pipeline.shift_watch).
    watch = ShiftWatch(spec, every=shift_every if journal is not None else 0)
    # Against the folder the policy is read from (the task's, where Inspect makes it):
    # Inspect restores the launch folder before it reduces.
    # In memory too, so that a signing key that cannot be used is named now, not per sample.
    if isinstance(journal, str) and not journal.strip():
        # Not the CLI's words ("leave the option out for $DISSENSUS_JOURNAL"): left out
        # here, the journal is in memory.
        raise ConfigError(
            "the journal is an empty path: name an SQLite file or a postgresql:// URL, or "
            "leave journal out for a journal in memory (nothing kept after the eval)",
            field="journal",
        )
    target = checked_journal(MEMORY if journal is None else journal, resolve=True)

    def reduce(scores: list[Score]) -> Score:
        notes: list[str] = []
        try:
            panel = scores_panel(scores, graders, notes, options)
        except _Unfit as exc:  # this sample's scores, not the eval: it stays unscored
            return _not_decided(exc, notes)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            return _not_decided(exc, notes)

        async def run() -> CaseRecord:
            store = open_journal(target)  # gone bad meanwhile: the eval's fault, not the sample's
            try:
                record = await adecide(panel, spec, journal=store)
                if watch.enabled:
                    await asyncio.to_thread(watch.step_quietly, store)
                return record
            finally:
                store.close()

        try:
            record = _run_sync(run())
        except InputError as exc:  # this sample's scores, not the eval: it stays unscored
            return _not_decided(exc, notes)
        value, meta = _metadata(panel, record, spec)
        meta["notes"] = notes
        given = _given_value(scores, value)
        explanation = f"{record.action}: {record.reason}"
        if value is None:
            return Score.unscored(
                reason="every grader declined",
                answer=record.action,
                explanation=explanation,
                metadata=meta,
            )
        return Score(value=given, answer=record.action, explanation=explanation, metadata=meta)

    return _Reducer(reduce, _recorded_policy(policy))


@score_reducer(name="dissensus/dissensus")
def _namespaced_reducer(
    graders: list[str] | None = None,
    policy: str | JsonObject | Policy | RunSpec | None = None,
    acceptance: str | None = None,
    guard_calibration: str | None = None,
    journal: str | None = None,
    shift_every: int = EVERY,
    options: list[str] | None = None,
) -> ScoreReducer:
    """:func:`dissensus_reducer` under its namespaced name, ``"dissensus/dissensus"``, which
    Inspect resolves through the package's entry point with nothing imported first."""
    return dissensus_reducer(
        graders=graders,
        policy=policy,
        acceptance=acceptance,
        guard_calibration=guard_calibration,
        journal=journal,
        shift_every=shift_every,
        options=options,
    )
