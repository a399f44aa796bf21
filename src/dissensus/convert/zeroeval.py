"""ZeroEval solver outputs -> dissensus panels (one panel per problem, one agent per model).

ZeroEval (Lin et al., ``yuchenlin/ZeroEval``) stores one JSON file per model: a list of
``{session_id, question, output, generator, answer, ...}`` in the same order, where
``output`` is a one-element list holding the model's raw text (asked for a JSON block
``{"reasoning": ..., "answer": ...}``) and ``answer`` is the gold (GSM8K writes it
``"# 18"``). Every model is an agent; ``session_id`` joins the files.

Answer extraction, in order (the first that yields a number wins):

1. the ``answer`` field of the JSON block (:func:`dissensus.llm.jsonparse.extract_json`,
   tolerant of fences, prose and trailing commas);
2. an ``"answer": ...`` field in text that does not parse as JSON (truncated output);
3. an explicit final-answer phrase: ``#### X``, ``\\boxed{X}``, ``the (final) answer is X``.

The answer text is then normalised to a number (:func:`normalise_number`): commas,
``$``, ``%`` and units go, the last number in it is kept (``"9 * 2 = 18"`` -> ``18``),
``18.0`` -> ``18``; it is read as the decimal written, so an integer keeps every digit,
and a fraction is rounded to :data:`PLACES` decimal places. An output
with no parseable answer is an **abstention** (``decision: null``), not an error and
not a vote; its text is still the agent's reasoning.

Choices where the source is silent: the reasoning is the JSON ``reasoning`` field when
present, else the raw output (an empty output becomes ``"(no output)"``, since a panel
needs a non-empty trace); the family is read from the model name by
:func:`dissensus.families.model_family` (Llama -> meta, Mistral/Mixtral -> mistral,
gemma -> google, gpt -> openai, Qwen -> alibaba, Phi -> microsoft, Yi -> 01-ai,
otherwise the name, lower-cased); the gold is normalised like the answers
and written to ``meta.gold``; a problem answered by fewer than two models, or whose
gold is not a number, is skipped and reported through ``on_skip``. So is an item that
is not an object or whose ``session_id`` is missing or not a string (file and index
named), and every repeat of a ``session_id`` within one model file: the first is kept,
each later one is reported as skipped. A problem whose gold one model file gives
differently from the first (compared normalised) is skipped and reported naming that
file: which gold is right cannot be told. A problem whose panel a reader would refuse
(an output or question over :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters:
:func:`~dissensus.convert.skips.over_limits`) is skipped naming the model file and
field its text came from. Model files that are all empty lists are a
:class:`ConvertError`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation, localcontext
from pathlib import Path
from typing import Any

from dissensus.convert.skips import (
    ConvertError,
    SkipHandler,
    Skipped,
    load_json_source,
    over_limits,
    overrun_message,
    report_skip,
    shown_value,
)
from dissensus.families import model_family
from dissensus.io.limits import Overrun
from dissensus.llm.jsonparse import JSONExtractError, extract_json
from dissensus.types import AgentOutput, JsonObject, Panel

__all__ = [
    "PLACES",
    "extract_answer",
    "iter_zeroeval_panels",
    "model_family",
    "normalise_number",
    "zeroeval_source_files",
]

# A number may carry an exponent: "1e5" is 100000 (read without it, its vote was 5).
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+(?:[eE][-+]?\d+)?")
_FIELD = re.compile(r"[\"']answer[\"']\s*:\s*(\"(?:[^\"\\]|\\.)*\"|[^,}\n]+)", re.IGNORECASE)
_PHRASES = (
    re.compile(r"####\s*([^\n]+)"),
    re.compile(r"\\boxed\{([^}]*)\}"),
    re.compile(r"(?:final answer|the answer)\s*(?:is|:)\s*([^\n]+)", re.IGNORECASE),
)


PLACES = 6
"""Decimal places a fraction keeps (rounded half to even): a float's print artifact in a
model's answer (``106.09000000000001``, ``2.6666666666666665``) reads as the number
meant (``106.09``, ``2.666667``), as a model rounding to 6 places would write it."""

_QUANTUM = Decimal(1).scaleb(-PLACES)


def normalise_number(text: str) -> str | None:
    """The last number in ``text`` in canonical form (``"$1,800.00"`` -> ``"1800"``), or ``None``.

    The number is read as the decimal it is written as, never through a binary float, so
    an integer keeps every digit (``"12345678901234567890123"``; ``"1e30"`` -> ``"1"``
    and 30 zeros; ``"2.0"`` -> ``"2"``; ``"-0"`` -> ``"0"``). A fraction is rounded to
    :data:`PLACES` decimal places, half to even, and written without trailing zeros or
    an exponent (``"0.1250"`` -> ``"0.125"``, ``"1.5e-3"`` -> ``"0.0015"``; one that
    rounds to a whole number is that integer: ``"1e-7"`` -> ``"0"``). A number too large
    to be a finite float is no number, so an exponent cannot ask for millions of digits.
    """
    cleaned = text.replace("$", " ").replace("%", " ")
    found = _NUMBER.findall(cleaned)
    if not found:
        return None
    raw = found[-1].replace(",", "")
    try:
        value = Decimal(raw)
        magnitude = float(raw)
    except (InvalidOperation, ValueError):
        return None
    if not math.isfinite(magnitude):
        return None
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


def _from_json(text: str) -> tuple[str | None, str | None]:
    try:
        data = extract_json(text, want_object=True)
    except JSONExtractError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    reasoning = data.get("reasoning")
    answer = data.get("answer")
    if isinstance(answer, float):
        answer = _written(text, answer)
    number = normalise_number(str(answer)) if answer is not None else None
    return number, reasoning if isinstance(reasoning, str) and reasoning.strip() else None


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


def extract_answer(text: str) -> tuple[str | None, str]:
    """``(answer or None, reasoning)`` from one raw output (see the module docstring)."""
    number, reasoning = _from_json(text)
    if number is None:
        m = _FIELD.search(text)
        if m:
            value = m.group(1).strip()
            if value.startswith('"'):
                try:
                    value = str(json.loads(value))
                except json.JSONDecodeError:
                    value = value.strip('"')
            number = normalise_number(value)
    if number is None:
        for pattern in _PHRASES:
            hits = pattern.findall(text)
            if hits:
                number = normalise_number(hits[-1])
                if number is not None:
                    break
    trace = reasoning or text.strip() or "(no output)"
    return number, trace


def _load(path: Path) -> list[Any]:
    data: list[Any] = load_json_source(path, list, what="a list of ZeroEval results")
    return data


def _text(item: JsonObject) -> str:
    out = item.get("output")
    if isinstance(out, list):
        return "\n".join(str(x) for x in out if x is not None)
    return "" if out is None else str(out)


def zeroeval_source_files(directory: str | Path) -> list[Path]:
    """The model files converting ``directory`` reads (every ``*.json`` file in it, sorted).

    Raises :class:`ConvertError` when ``directory`` is not a directory or holds fewer
    than two model files. An output must be none of them.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ConvertError(f"{root}: not a directory of ZeroEval result files")
    files = sorted(p for p in root.glob("*.json") if p.is_file())
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
    # question and task; ``order`` is the order problems were first seen.
    order: list[str] = []
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
            if sid not in first_seen:
                first_seen[sid] = item
                first_file[sid] = file
                order.append(sid)
        by_model[name] = table
    done = 0
    missing: dict[str, int] = dict.fromkeys(by_model, 0)
    for sid in order:
        if limit is not None and done >= limit:
            break
        first = first_seen[sid]
        gold = normalise_number(str(first.get("answer", "")))
        if gold is None:
            report_skip(
                on_skip,
                Skipped(
                    file=str(root),
                    item=sid,
                    field="answer",
                    message=f"gold is not a number: {shown_value(first.get('answer'))}",
                ),
            )
            continue
        other = _other_gold(sid, gold, by_model, files)
        if other is not None:
            report_skip(on_skip, other)
            continue
        outputs = []
        absent = []
        for name in sorted(by_model):
            item = by_model[name].get(sid)
            if item is None:
                absent.append(name)
                continue
            answer, reasoning = extract_answer(_text(item))
            outputs.append(
                AgentOutput(
                    agent=name, decision=answer, reasoning=reasoning, family=model_family(name)
                )
            )
        if len(outputs) < 2:
            report_skip(
                on_skip,
                Skipped(
                    file=str(root),
                    item=sid,
                    field="<item>",
                    message=f"only {len(outputs)} model(s) answered",
                ),
            )
            continue
        meta = {
            "source": "ZeroEval",
            "task": str(first.get("source", "")),
            "question": str(first.get("question", "")),
            "gold": gold,
        }
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


def _other_gold(
    sid: str, gold: str, by_model: dict[str, dict[str, JsonObject]], files: dict[str, str]
) -> Skipped | None:
    """The skip of a problem whose gold one model file gives differently from the first
    (compared normalised: ``"# 18"`` and ``"18"`` agree), or None when every file agrees.
    Which of the two is right cannot be told, so the problem is not converted. A file
    that gives no gold for it (no ``answer``, or null) contradicts none."""
    first_name: str | None = None
    for name, table in by_model.items():
        item = table.get(sid)
        if item is None:
            continue
        if first_name is None:
            first_name = name
            continue
        raw = item.get("answer")
        if raw is not None and normalise_number(str(raw)) != gold:
            first_raw = by_model[first_name][sid].get("answer")
            return Skipped(
                file=files[name],
                item=sid,
                field="answer",
                message=(
                    f"gold {shown_value(raw)} differs from {shown_value(first_raw)} in "
                    f"{Path(files[first_name]).name}; which is right cannot be told, so the "
                    "problem is skipped"
                ),
            )
    return None


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
