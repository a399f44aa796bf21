"""ZeroEval solver outputs -> dissensus panels (one panel per problem, one agent per model).

ZeroEval (Lin et al., ``yuchenlin/ZeroEval``) stores one JSON file per model: a list of
``{session_id, question, output, generator, answer, ...}`` in the same order, where
``output`` is a one-element list holding the model's raw text (asked for a JSON block
``{"reasoning": ..., "answer": ...}``) and ``answer`` is the gold (GSM8K writes it
``"# 18"``). Every model is an agent; ``session_id`` joins the files.

Answer extraction, in order (the first that states an answer wins):

1. the ``answer`` field of the JSON block (:func:`dissensus.llm.jsonparse.extract_json`,
   tolerant of fences, prose and trailing commas);
2. an ``"answer": ...`` field in text that does not parse as JSON (truncated output);
3. an explicit final-answer phrase: ``#### X``, ``\\boxed{X}``, ``the (final) answer is X``
   (its sentence only: ``the answer is 7. I checked it 3 times`` is 7, not 3).

The answer text is then normalised to a number (:func:`normalise_number`): commas,
``$``, ``%`` and units go, the last number in it is kept (``"9 * 2 = 18"`` -> ``18``),
``18.0`` -> ``18``; it is read as the decimal written, so an integer keeps every digit,
and a decimal is rounded to :data:`PLACES` decimal places. An output
with no parseable answer is an **abstention** (``decision: null``), not an error and
not a vote; its text is still the agent's reasoning.

Choices where the source is silent, made so that no vote is invented (an answer the
extractor is not sure of is an abstention):

* An answer field the output states is its answer: one without a number (``null``,
  ``"None"``, ``""``, ``"___"``, a list or an object of several values) is an
  abstention, and no number is looked for in the reasoning (it was: ``"None"`` became
  the reasoning's "the answer is 18"). Only a field cut off inside its string (a
  truncated output) lets the phrases of step 3 speak.
* An answer that says it has none (:data:`_REFUSAL`: "cannot be determined", "not
  possible", "step 3 failed") is an abstention, whatever number it mentions.
* A sign before a currency sign is the number's: ``-$10,000`` is ``-10000``.
* A fraction (``3/4``, ``16 / 3``, ``3 1/2``, ``\\frac{3}{4}``) is its value when
  :data:`PLACES` decimal places hold it exactly (``0.75``, ``3.5``), else no number:
  ``2/3`` would need a rounded value the model did not state, and GSM8K's golds are
  whole numbers, so it is an abstention (it was read as ``3``). A clock time or a ratio
  (``2:00 pm``, ``3:2``) is no number either (it was read as its last digits).

The reasoning is the JSON ``reasoning`` field when present, else the raw output (the
strings of ``output`` joined by newlines, nulls left out); a ``reasoning`` field that
decodes to a lone surrogate (``"\\ud800"`` written in the block) is not text, and
counts as absent. An empty output (``output``
absent, null, ``[]``, or only nulls and blank strings) is an abstention with an
**empty reasoning**: no text is invented for it, since invented text would enter the
similarity reading (the ``"(no output)"`` once written for every empty output read as
identical reasoning, similarity 1.0, so a panel of silent models was a convergent
disagreement, escalated), and the reading names the agent in ``missing_reasoning``.
The model stays in the panel, as a VariErrNLI annotator without an explanation does.
An ``output`` that is not a list of strings and nulls (an object, a bare string,
``[{"reasoning": ...}]``, ``[["a"]]``, ``[true]``), or a ``question`` or ``source``
that is not a string (absent or null is ``""``), skips the problem, reported through
``on_skip`` naming the model file and the field: its ``str()`` would be text the model
did not write (``[{"answer": "18"}]`` was the reasoning ``"{'answer': '18'}"`` and a
vote for 18). The family is read from the model name by
:func:`dissensus.families.model_family` (Llama -> meta, Mistral/Mixtral -> mistral,
gemma -> google, gpt -> openai, Qwen -> alibaba, Phi -> microsoft, Yi -> 01-ai,
otherwise the name, lower-cased); the gold is normalised like the answers
and written to ``meta.gold``, taken from the model files that give one (a file without
a gold for the problem -- no ``answer``, null or blank -- contradicts none, whichever
file sorts first); a problem answered by fewer than two models, no file gives a gold
for, or whose gold is not a number, is skipped and reported through ``on_skip`` naming
a model file (the one at fault). So is an item that
is not an object or whose ``session_id`` is missing or not a string (file and index
named), and every repeat of a ``session_id`` within one model file: the first is kept,
each later one is reported as skipped. A problem two model files give different golds
for (compared normalised) is skipped and reported naming the second file and the
first: which gold is right cannot be told. A problem whose panel a reader would refuse
(an output or question over :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters:
:func:`~dissensus.convert.skips.over_limits`) is skipped naming the model file and
field its text came from. Model files that are all empty lists are a
:class:`ConvertError`, and so is a ``*.json`` in the directory that is not a regular
file (a broken symbolic link, a named pipe, a directory): it is refused, never passed
over as a model absent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from fractions import Fraction
from pathlib import Path
from typing import Any, NamedTuple

from dissensus.convert.skips import (
    ConvertError,
    SkipHandler,
    Skipped,
    check_source_file,
    load_json_source,
    name_problem,
    over_limits,
    overrun_message,
    report_skip,
    shown_value,
)
from dissensus.families import model_family
from dissensus.io.limits import Overrun
from dissensus.llm.jsonparse import JSONExtractError, extract_json
from dissensus.types import AgentOutput, JsonObject, Panel, lone_surrogate_at

__all__ = [
    "PLACES",
    "extract_answer",
    "iter_zeroeval_panels",
    "model_family",
    "normalise_number",
    "zeroeval_source_files",
]

# A number may carry an exponent: "1e5" is 100000 (read without it, its vote was 5).
_NUMBER_TEXT = r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+(?:[eE][-+]?\d+)?"
_UNSIGNED_TEXT = r"\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
# The numbers of an answer, each one of: a clock time or ratio ("12:30", "3:2": no
# number, so no vote), a mixed number ("3 1/2"), a fraction ("2/3", "16 / 3") or a
# plain number. Alternatives are tried left to right at each position.
_TOKEN = re.compile(
    r"(?P<clock>\d+(?::\d+)+)"
    r"|(?P<whole>-?\d+) +(?P<part>\d+)/(?P<parts>\d+)(?![\d.,/])"
    rf"|(?P<num>{_NUMBER_TEXT})\s*/\s*(?P<den>{_UNSIGNED_TEXT})"
    rf"|(?P<plain>{_NUMBER_TEXT})"
)
# A LaTeX fraction is the fraction it typesets: "\frac{2}{3}" is 2/3 (not 3).
_LATEX_FRACTION = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]*?)\s*\}\s*\{\s*([^{}]*?)\s*\}")
# "-$5" is minus five dollars: the sign before a currency sign is the number's. Not after
# a word, a number or a bracket, where "-" is a subtraction ("$20-$5").
_SIGNED_CURRENCY = re.compile(r"(?<![\w.)\]])-[$€£¥]")
# An answer that says it has none is no vote, whatever number it mentions: "I cannot
# solve this, step 3 failed" is not an answer of 3.
_REFUSAL = re.compile(
    r"\b(?:cannot|can ?not|can't|could ?not|couldn't|unable|impossible|not possible"
    r"|not solvable|unsolvable|no (?:valid |possible |single )?(?:solution|answer)"
    r"|not enough|insufficient|undetermined|indeterminate|not (?:be )?determin\w*"
    r"|unknown|n/a|failed|error|inconsistent)(?!\w)",
    re.IGNORECASE,
)
_FIELD = re.compile(r"[\"']answer[\"']\s*:\s*(\"(?:[^\"\\]|\\.)*\"|[^,}\n]+)", re.IGNORECASE)
_PHRASES = (
    re.compile(r"####\s*([^\n]+)"),
    re.compile(r"\\boxed\{((?:[^{}]|\{[^{}]*\})*)\}"),  # one level of braces: \frac{a}{b}
    re.compile(r"(?:final answer|the answer)\s*(?:is|:)\s*([^\n]+)", re.IGNORECASE),
)


PLACES = 6
"""Decimal places a fraction keeps (rounded half to even): a float's print artifact in a
model's answer (``106.09000000000001``, ``2.6666666666666665``) reads as the number
meant (``106.09``, ``2.666667``), as a model rounding to 6 places would write it. A
fraction written with a slash is read only when this many places hold its value
exactly (``3/4`` -> ``0.75``; ``2/3`` is no number)."""

_QUANTUM = Decimal(1).scaleb(-PLACES)
_SCALE = 10**PLACES


def normalise_number(text: str) -> str | None:
    """The last number in ``text`` in canonical form (``"$1,800.00"`` -> ``"1800"``), or ``None``.

    The number is read as the decimal it is written as, never through a binary float, so
    an integer keeps every digit (``"12345678901234567890123"``; ``"1e30"`` -> ``"1"``
    and 30 zeros; ``"2.0"`` -> ``"2"``; ``"-0"`` -> ``"0"``). A decimal is rounded to
    :data:`PLACES` decimal places, half to even, and written without trailing zeros or
    an exponent (``"0.1250"`` -> ``"0.125"``, ``"1.5e-3"`` -> ``"0.0015"``; one that
    rounds to a whole number is that integer: ``"1e-7"`` -> ``"0"``). A number too large
    to be a finite float is no number, so an exponent cannot ask for millions of digits.

    A sign before a currency sign is the number's (``"-$10,000"`` -> ``"-10000"``). When
    the last number is a fraction (``"3/4"``, ``"16 / 3"``, ``"3 1/2"``,
    ``"\\frac{3}{4}"``) it is read as its value if :data:`PLACES` decimal places hold it
    exactly (``"0.75"``, ``"3.5"``), else there is no number (``"2/3"``: a rounded
    value would be a number the text does not state); a clock time or ratio (``"12:30"``)
    is no number either. Neither reads as its last digits (``"2/3"`` was ``"3"``).
    """
    cleaned = _LATEX_FRACTION.sub(r"\1/\2", text)
    cleaned = _SIGNED_CURRENCY.sub("-", cleaned).replace("$", " ").replace("%", " ")
    found = list(_TOKEN.finditer(cleaned))
    last = found[-1] if found else None
    if last is None or last["clock"] is not None:
        return None
    if last["plain"] is not None:
        value = _decimal(last["plain"])
        return None if value is None else _canonical(value)
    if last["whole"] is not None:
        # Each read as the decimal it is (a float's size at most, as every number here):
        # int() of more than 4,300 digits was a traceback that stopped the conversion.
        whole, part, parts = (_decimal(last[key]) for key in ("whole", "part", "parts"))
        if whole is None or part is None or parts is None or parts == 0:
            return None
        sign = -1 if last["whole"].startswith("-") else 1
        return _exact(int(whole) + sign * Fraction(int(part), int(parts)))
    num, den = _decimal(last["num"]), _decimal(last["den"])
    if num is None or den is None or den == 0:
        return None
    if (num != 0 and float(num) == 0) or float(den) == 0:
        return None  # a part too small for a float: its exact value has too many digits
    return _exact(Fraction(num) / Fraction(den))


def _decimal(raw: str) -> Decimal | None:
    """``raw`` (a number as written, commas allowed) as a finite decimal, or None."""
    digits = raw.replace(",", "")
    try:
        value = Decimal(digits)
        magnitude = float(digits)
    except (InvalidOperation, ValueError):
        return None
    return value if math.isfinite(magnitude) else None


def _exact(value: Fraction) -> str | None:
    """A fraction's value in canonical form when :data:`PLACES` decimal places hold it
    exactly (and it is a finite float's size), else None."""
    scaled = value * _SCALE
    if scaled.denominator != 1:
        return None
    try:
        float(value)
    except OverflowError:
        return None
    return _canonical(Decimal(f"{scaled.numerator}e-{PLACES}"))


def _canonical(value: Decimal) -> str:
    """``value`` rounded to :data:`PLACES` places, written without an exponent or
    trailing zeros (``"-0"`` is ``"0"``)."""
    exponent = value.as_tuple().exponent
    if isinstance(exponent, int) and exponent < -PLACES:
        with localcontext() as exact:  # enough digits that only the rounding rounds
            exact.prec = max(exact.prec, value.adjusted() + PLACES + 2)
            value = value.quantize(_QUANTUM, rounding=ROUND_HALF_EVEN)
    digits = format(value, "f")  # every digit, never in exponent notation
    if "." in digits:
        digits = digits.rstrip("0").rstrip(".")
    if digits.lstrip("-").strip("0") == "":
        return "0"
    return digits


def _answer_number(text: str) -> str | None:
    """The number an answer text states, or None: no number, or an answer that says it
    has none (:data:`_REFUSAL`: "cannot be determined", "step 3 failed")."""
    if _REFUSAL.search(text):
        return None
    return normalise_number(text)


class _Stated(NamedTuple):
    """Whether an output states an answer field, and the number it holds (None: none)."""

    stated: bool
    number: str | None


_UNSTATED = _Stated(stated=False, number=None)


def _from_json(text: str) -> tuple[_Stated, str | None]:
    """The JSON block's ``answer`` (unstated when there is no block or it holds no
    ``answer`` key) and its ``reasoning`` (None when not a non-empty string)."""
    try:
        # A key written twice is read as json.loads reads it (the last value), as the
        # published figures were computed (:mod:`dissensus.llm.jsonparse`).
        data = extract_json(text, want_object=True, unique_keys=False)
    except JSONExtractError:
        return _UNSTATED, None
    if not isinstance(data, dict):
        return _UNSTATED, None
    reasoning = data.get("reasoning")
    # A reasoning that decodes to a lone surrogate ("\\ud800" in the block) is no text:
    # no reader takes it, so the raw output, which the model did write, is the trace.
    usable = (
        isinstance(reasoning, str) and reasoning.strip() and lone_surrogate_at(reasoning) is None
    )
    trace = reasoning if usable else None
    if "answer" not in data:
        return _UNSTATED, trace
    answer = data["answer"]
    if isinstance(answer, float):
        answer = _written(text, answer)
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        return _Stated(stated=True, number=None), trace  # null, a list, an object: no number
    return _Stated(stated=True, number=_answer_number(str(answer))), trace


def _written(text: str, answer: float) -> str | float:
    """A JSON number answer as the model wrote it (``12345678901234567890123.0``), not as
    the float JSON parsing made of it (``1.2345678901234568e+22``): the text of the
    first ``"answer":`` field when it holds a bare number equal to ``answer``."""
    found = _FIELD.search(text)
    if found is None:
        return answer
    raw = found.group(1).strip()
    if not re.fullmatch(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?", raw):
        return answer
    try:
        return raw if float(raw) == answer else answer
    except (ValueError, OverflowError):
        return answer


def _from_field(text: str) -> _Stated:
    """The ``"answer": ...`` field of text that is not JSON: unstated when there is none
    or its string is cut off (never closed: the output was truncated in it) and holds no
    number."""
    m = _FIELD.search(text)
    if m is None:
        return _UNSTATED
    value = m.group(1).strip()
    if value.startswith('"'):
        try:
            value = str(json.loads(value))
        except json.JSONDecodeError:  # cut off: what it holds so far, if it is a number
            number = _answer_number(value.strip('"'))
            return _UNSTATED if number is None else _Stated(stated=True, number=number)
    return _Stated(stated=True, number=_answer_number(value))


# Where the sentence that states an answer ends, once its first number is read: a full
# stop before a space or the end ("7. I checked it 3 times"), ";", "!", "?", a comma
# before a space ("18, since 3 ..."; not "1,800"), or an opening bracket ("7 (in 2 ways)").
_CLAUSE_END = re.compile(r"\.(?=\s|$)|[;!?]|,\s|\s\(")
_DIGIT = re.compile(r"\d")


def _clause(text: str) -> str:
    """``text`` (what follows "the answer is") up to the end of its sentence after its
    first number: the answer, not what the sentences after it count."""
    first = _DIGIT.search(text)
    if first is None:
        return text
    end = _CLAUSE_END.search(text, first.end())
    return text if end is None else text[: end.start()]


def _from_phrases(text: str) -> str | None:
    """The number of the last final-answer phrase of the first kind that states one (a
    phrase that refuses ends the search: no number). After "the answer is" only its
    sentence counts (:func:`_clause`)."""
    for pattern in _PHRASES:
        hits = pattern.findall(text)
        if not hits:
            continue
        if pattern is _PHRASES[-1]:
            hits = [_clause(hit) for hit in hits]
        if _REFUSAL.search(hits[-1]):
            return None
        number = normalise_number(hits[-1])
        if number is not None:
            return number
    return None


def extract_answer(text: str) -> tuple[str | None, str]:
    """``(answer or None, reasoning)`` from one raw output (see the module docstring).

    An answer the output states -- the JSON block's ``answer`` field, or an ``"answer":
    ...`` field in text that does not parse -- is the answer: when it holds no number
    (``null``, ``"None"``, ``""``, ``"___"``, a refusal, a fraction no decimal of
    :data:`PLACES` places holds) the output is an abstention, and no number is looked
    for elsewhere in the text.

    A blank ``text`` reads as ``(None, "")``: an abstention with empty reasoning, as the
    converter writes an empty output and the chat door reads a member's empty answer
    (:mod:`dissensus.panels.answers`); no text is invented, since invented text would
    enter the similarity reading.
    """
    found, reasoning = _from_json(text)
    if not found.stated:
        found = _from_field(text)
    number = found.number if found.stated else _from_phrases(text)
    trace = reasoning or text.strip()
    return number, trace


def _load(path: Path) -> list[Any]:
    data: list[Any] = load_json_source(path, list, what="a list of ZeroEval results")
    return data


def _output_text(item: JsonObject) -> tuple[str | None, str]:
    """``(text, "")``: the item's raw output, its strings joined by newlines (``""`` for
    an output absent, null, ``[]`` or of nulls and empty strings only), or ``(None,
    why)`` for an output that is not a list of strings and nulls: no text of it is made
    up (``str()`` of an object or a boolean is not what the model wrote)."""
    out = item.get("output")
    if out is None:
        return "", ""
    if not isinstance(out, list):
        return None, (
            f"must be a list of strings (or null), got {type(out).__name__} {shown_value(out)}"
        )
    for index, element in enumerate(out):
        if element is not None and not isinstance(element, str):
            return None, (
                f"element {index} must be a string or null, got "
                f"{type(element).__name__} {shown_value(element)}"
            )
    return "\n".join(x for x in out if x is not None), ""


def _agent(name: str, text: str) -> AgentOutput:
    """One model's agent from its raw output ``text``: an empty (or blank) output is an
    abstention with empty reasoning (the reading names it in ``missing_reasoning``), not
    an invented trace that every empty output would share."""
    if not text.strip():
        return AgentOutput(agent=name, decision=None, reasoning="", family=model_family(name))
    answer, reasoning = extract_answer(text)
    return AgentOutput(agent=name, decision=answer, reasoning=reasoning, family=model_family(name))


def _meta_text(item: JsonObject, field: str) -> tuple[str | None, str]:
    """``(text, "")``: the item's ``field`` (``""`` when absent or null), or ``(None,
    why)`` when it is not a string (never its ``str()``)."""
    value = item.get(field)
    if value is None:
        return "", ""
    if not isinstance(value, str):
        return None, f"must be a string, got {type(value).__name__} {shown_value(value)}"
    return value, ""


def zeroeval_source_files(directory: str | Path) -> list[Path]:
    """The model files converting ``directory`` reads (every ``*.json`` file in it, sorted).

    Raises :class:`ConvertError` when ``directory`` is not a directory or holds fewer
    than two model files. An output must be none of them.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConvertError(f"{root}: not a directory of ZeroEval result files")
    # Every *.json is a model file: one that cannot be read as a file (a broken symbolic
    # link, a named pipe, a directory) is refused, never passed over (a model fewer).
    files = sorted(root.glob("*.json"))
    for file in files:
        check_source_file(file, "a ZeroEval model file")
        if (why := name_problem(file.stem)) is not None:
            raise ConvertError(f"{file}: the model's name {why}")
    if len(files) < 2:
        raise ConvertError(f"{root}: need at least two model files (*.json), found {len(files)}")
    return files


def iter_zeroeval_panels(
    directory: str | Path, *, on_skip: SkipHandler | None = None, limit: int | None = None
) -> Iterator[Panel]:
    """One panel per problem of the ZeroEval result files in ``directory`` (models sorted by name)."""
    root = Path(directory)
    files = zeroeval_source_files(root)
    models = {f.stem: _load(f) for f in files}
    if not any(models.values()):
        raise ConvertError(f"{root}: no problem in any model file (every file is an empty list)")
    return _panels(models, {f.stem: f for f in files}, root, on_skip, limit)


def _session_id(item: Any) -> tuple[str | None, str, str]:
    """``(session_id, field, message)``: the item's id, or ``None`` with why it has none."""
    if not isinstance(item, dict):
        return None, "<item>", f"expected an object, got {type(item).__name__}"
    if "session_id" not in item:
        return None, "session_id", "missing"
    sid = item["session_id"]
    if not isinstance(sid, str):
        return None, "session_id", f"must be a string, got {type(sid).__name__} {shown_value(sid)}"
    return sid, "", ""


def _panels(
    models: dict[str, list[Any]],
    paths: dict[str, Path],
    root: Path,
    on_skip: SkipHandler | None,
    limit: int | None,
) -> Iterator[Panel]:
    # The first item of each session_id (in model order) gives the problem's gold,
    # question and task; ``order`` is the problems' order in the files (the earliest
    # position any file gives a problem, then the order first seen), so a bad item in
    # one file does not move its problem (or push it out of ``limit``).
    order: list[str] = []
    rank: dict[str, int] = {}
    first_seen: dict[str, JsonObject] = {}
    first_file: dict[str, str] = {}
    by_model: dict[str, dict[str, JsonObject]] = {}
    files = {name: str(paths.get(name, root / f"{name}.json")) for name in models}
    for name, items in models.items():
        file = files[name]
        table: dict[str, JsonObject] = {}
        where: dict[str, int] = {}
        for index, item in enumerate(items):
            sid, field, message = _session_id(item)
            if sid is None:
                report_skip(
                    on_skip, Skipped(file=file, item=str(index), field=field, message=message)
                )
                continue
            if sid in table:
                report_skip(
                    on_skip,
                    Skipped(
                        file=file,
                        item=str(index),
                        field="session_id",
                        message=(
                            f"duplicate session_id {shown_value(sid)} (first at item "
                            f"{where[sid]}); the first is kept"
                        ),
                    ),
                )
                continue
            table[sid] = item
            where[sid] = index
            rank[sid] = min(rank.get(sid, index), index)
            if sid not in first_seen:
                first_seen[sid] = item
                first_file[sid] = file
                order.append(sid)
        by_model[name] = table
    order.sort(key=rank.__getitem__)  # stable: ties keep the order first seen
    done = 0
    missing: dict[str, int] = dict.fromkeys(by_model, 0)
    for sid in order:
        if limit is not None and done >= limit:
            break
        first = first_seen[sid]
        gold = _gold(sid, by_model, files)
        if isinstance(gold, Skipped):
            report_skip(on_skip, gold)
            continue
        agents = _agents(sid, by_model, files)
        if isinstance(agents, Skipped):
            report_skip(on_skip, agents)
            continue
        outputs, absent = agents
        if len(outputs) < 2:
            report_skip(
                on_skip,
                Skipped(
                    file=first_file[sid],
                    item=sid,
                    field="<item>",
                    message=f"only {len(outputs)} model(s) answered",
                ),
            )
            continue
        meta = _meta(sid, first, first_file[sid], gold)
        if isinstance(meta, Skipped):
            report_skip(on_skip, meta)
            continue
        panel = Panel(id=sid, meta=meta, outputs=outputs)
        over = over_limits(panel)
        if over is not None:
            report_skip(on_skip, _overrun(panel, over, first_file[sid], files))
            continue
        done += 1
        for name in absent:
            missing[name] += 1
        yield panel
    # A model that did not answer problems the others did is reported, not passed over:
    # its panels were converted with one agent fewer (a model file cut short, most often).
    for name, count in missing.items():
        if count:
            report_skip(
                on_skip,
                Skipped(
                    file=str(paths.get(name, root / f"{name}.json")),
                    item="<missing>",
                    field="session_id",
                    message=(
                        f"no answer to {count} problem(s) other models answered "
                        "(is the file cut short?); those panels have one agent fewer"
                    ),
                ),
            )


def _agents(
    sid: str, by_model: dict[str, dict[str, JsonObject]], files: dict[str, str]
) -> tuple[list[AgentOutput], list[str]] | Skipped:
    """``(agents, absent)``: one agent per model that answered problem ``sid`` (models
    sorted by name) and the models that did not, or the skip of the problem when a
    model's ``output`` is not a list of strings and nulls (its file named)."""
    outputs: list[AgentOutput] = []
    absent: list[str] = []
    for name in sorted(by_model):
        item = by_model[name].get(sid)
        if item is None:
            absent.append(name)
            continue
        text, why = _output_text(item)
        if text is None:
            return Skipped(file=files[name], item=sid, field="output", message=why)
        outputs.append(_agent(name, text))
    return outputs, absent


def _meta(sid: str, first: JsonObject, file: str, gold: str) -> JsonObject | Skipped:
    """The panel's ``meta``, its task and question from the problem's first item (in
    ``file``), or the skip of the problem when either is not a string."""
    task, why_task = _meta_text(first, "source")
    question, why_question = _meta_text(first, "question")
    if task is None:
        return Skipped(file=file, item=sid, field="source", message=why_task)
    if question is None:
        return Skipped(file=file, item=sid, field="question", message=why_question)
    return {"source": "ZeroEval", "task": task, "question": question, "gold": gold}


def _given_gold(item: JsonObject) -> object | None:
    """The gold an item gives (its ``answer``), or None when it gives none (no
    ``answer``, null, or a blank string)."""
    raw: object = item.get("answer")
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    return raw


def _gold(
    sid: str, by_model: dict[str, dict[str, JsonObject]], files: dict[str, str]
) -> str | Skipped:
    """The problem's gold, normalised, from the model files that give one (a file without
    a gold for it contradicts none), or the skip of a problem none gives a gold for, one
    gives a gold that is not a number, or two give different golds (compared normalised:
    ``"# 18"`` and ``"18"`` agree): which is right cannot be told, so the problem is not
    converted. Each skip names the model file at fault."""
    gold: str | None = None
    first_name = ""
    first_raw: object = None
    for name, table in by_model.items():
        item = table.get(sid)
        raw = None if item is None else _given_gold(item)
        if raw is None:
            continue
        number = normalise_number(str(raw))
        if number is None:
            message = f"gold is not a number: {shown_value(raw)}"
            return Skipped(file=files[name], item=sid, field="answer", message=message)
        if gold is None:
            gold, first_name, first_raw = number, name, raw
        elif number != gold:
            message = (
                f"gold {shown_value(raw)} differs from {shown_value(first_raw)} in "
                f"{Path(files[first_name]).name}; which is right cannot be told, so the "
                "problem is skipped"
            )
            return Skipped(file=files[name], item=sid, field="answer", message=message)
    if gold is None:
        holder = next(name for name, table in by_model.items() if sid in table)
        message = "no model file gives a gold for it (answer missing, null or blank in each)"
        return Skipped(file=files[holder], item=sid, field="answer", message=message)
    return gold


# Where a panel's field comes from in the first item of the problem.
_META_SOURCES = {"meta.question": "question", "meta.task": "source", "meta.gold": "answer"}


def _overrun(panel: Panel, over: Overrun, first: str, files: dict[str, str]) -> Skipped:
    """The skip of a problem whose panel is over a bound, naming the model file and field
    its text came from (an agent's output, else the first item of the problem)."""
    parts = over.field.split(".")
    if parts[0] == "outputs" and len(parts) > 1 and parts[1].isdigit():
        name = panel.outputs[int(parts[1])].agent
        return Skipped(
            file=files[name],
            item=panel.id,
            field="output",
            message=overrun_message(over, f"model {shown_value(name)}: "),
        )
    if over.field == "id":
        field = "session_id"
    elif over.count:
        field = "<item>"
    else:
        field = _META_SOURCES.get(".".join(parts[:2]), over.field)
    return Skipped(file=first, item=panel.id, field=field, message=overrun_message(over))
