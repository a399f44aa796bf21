"""LLMBar judge panels -> dissensus panels or guard votes (``docs/convert.md``).

LLMBar (Zeng et al., ICLR 2024) recorded six LLM judges choosing the better of two
outputs for an instruction, with a gold label. A directory laid out like LLMBar holds
any number of *subsets*; a subset is a directory with ``dataset.json`` (a list of
``{input, output_1, output_2, label}``) and ``evaluators/<judge>/<strategy>/result.json``
(the same list, each item with ``results[0]["swap = False"]`` and, for some strategies,
``results[0]["swap = True"]``, each ``{"winner": "1"|"2"|null, "completion": [text,
finish_reason]}``; the winner is always in the original numbering).

One item becomes one :class:`~dissensus.types.Panel`: one output per judge, decision =
the winner, reasoning = the completion text, ``family`` = the judge's model family; the
panel's ``meta`` holds the instruction as ``input`` and the two outputs as the generic
``options`` (``{"1": output_1, "2": output_2}``), which the pipeline re-asks over.

Choices where the source is silent:

* Subsets are found by walking the directory (sorted, so the order is stable),
  following symbolic links to folders (a folder of links to the subsets one wants is
  a layout too; they were passed over in silence), each folder read once however
  many ways lead to it (a link loop ends there); a
  subset's name is its path relative to the directory with ``/`` separators
  (``Adversarial/Neighbor``); when the directory itself is a subset, its own name.
* Panel and vote ids are ``<subset>/<index>``, the index being the 0-based position in
  ``dataset.json``.
* Judges appear in a fixed order (GPT-4, ChatGPT, ChatGPT-0301, PaLM2, LLaMA2, Falcon);
  judges not in that list follow, sorted by name, with family ``None``.
* A null or missing winner is an *abstention* (``decision: None``), not an error and not
  a vote. Any other winner than ``1``/``2`` makes the item malformed.
* A judge whose completion text is empty has no reasoning trace, and a panel needs one
  for every output; such a judge is left out of ``outputs`` (no text is invented for it,
  since invented text would enter the similarity reading) and recorded in
  ``meta.judges_without_trace`` as ``{judge: decision}``. In the votes format the trace
  does not matter: such a judge still votes if it named a winner.
* Every strategy's files hold a swapped-order run too; it is kept only for ``Swap_CoT``,
  as each output's generic ``reask: {decision, reasoning, perturbation: swap_order}``
  (``decision`` / ``reasoning`` ``None`` when the swapped run abstained or returned no
  text), the recorded "ask again under a perturbation". Panels written before this field
  existed carry ``swap_decision`` / ``swap_reasoning`` instead; the pipeline reads them
  as an alias. In the votes format the swapped answers go to ``meta.swap_answers``.
* Votes: judges have no retrieval, so ``evidence_source`` is ``parametric:<family>``
  (``parametric:<judge>`` for an unknown judge) and ``evidence_present`` is ``False``;
  abstainers cast no vote and are listed in ``meta.abstained``.
* ``dataset.json`` and a judge's ``result.json`` are read by position; a result entry
  repeats its item's ``input``, ``output_1`` and ``output_2``, and one whose text
  differs from the dataset item at its position is the judge's verdict on another item
  (a file reordered, cut in the middle, or of another dataset): the item is skipped,
  naming the result file and the field, never given that verdict. A result entry
  without those texts is taken by its position alone.
* An item whose panel would have fewer than two agents (or case fewer than two voters),
  whose gold label is not 1/2, or whose result entry is missing or mistyped is skipped and
  reported through ``on_skip`` (see :mod:`dissensus.convert.skips`); the rest is converted.
  So is an item whose panel or vote case a reader would refuse (a completion, an
  instruction or an output over :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters,
  too much text or too many judges: :func:`~dissensus.convert.skips.over_limits`),
  named by the source file and field the text came from.
* A missing directory, a directory without any subset, a subset without any judge for the
  strategy, a file that is not a JSON list, or a ``dataset.json`` without any item is a
  :class:`ConvertError` (exit code 2). So is a ``dataset.json`` or a judge's
  ``<strategy>/result.json`` that is there but is not a regular file (a broken symbolic
  link, a named pipe, a directory of that name): found when the layout is checked,
  before anything is written, and never passed over as a judge absent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

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
from dissensus.errors import InputError
from dissensus.io.limits import Overrun
from dissensus.types import AgentOutput, JsonObject, Panel, Vote, VoteCase, lone_surrogate_at

__all__ = [
    "FAMILIES",
    "JUDGE_ORDER",
    "STRATEGIES",
    "JudgeAnswer",
    "LLMBarItem",
    "LLMBarSubset",
    "find_subsets",
    "item_to_panel",
    "item_to_votes",
    "iter_llmbar_items",
    "iter_llmbar_panels",
    "iter_llmbar_votes",
    "llmbar_source_files",
]

Strategy = Literal["CoT", "Vanilla", "Swap_CoT"]
STRATEGIES: tuple[str, ...] = ("CoT", "Vanilla", "Swap_CoT")
"""The judging strategies LLMBar recorded."""

JUDGE_ORDER: tuple[str, ...] = ("GPT-4", "ChatGPT", "ChatGPT-0301", "PaLM2", "LLaMA2", "Falcon")
"""Output order of the known judges."""

FAMILIES: dict[str, str] = {
    "GPT-4": "OpenAI",
    "ChatGPT": "OpenAI",
    "ChatGPT-0301": "OpenAI",
    "PaLM2": "Google",
    "LLaMA2": "Meta",
    "Falcon": "TII",
}
"""Model family of each known judge: judges of one family share a latent cause."""

_ORIGINAL = "swap = False"
_SWAPPED = "swap = True"
_WINNERS = ("1", "2")
_ITEM_TEXTS = ("input", "output_1", "output_2")
"""The dataset item's texts a result entry repeats (compared when it does)."""


@dataclass(frozen=True)
class LLMBarSubset:
    """One subset directory and the judges that have a result file for the strategy."""

    name: str
    """Path relative to the converted directory, ``/``-separated."""
    path: Path
    judges: tuple[str, ...]


@dataclass(frozen=True)
class JudgeAnswer:
    """One judge's answer in one presentation order."""

    decision: str | None
    """``"1"`` / ``"2"`` in the original numbering, ``None`` for an abstention."""
    reasoning: str
    """The completion text, possibly empty."""


@dataclass(frozen=True)
class LLMBarItem:
    """One item with every judge's answer, before it becomes a panel or a vote case."""

    subset: str
    index: int
    strategy: str
    input: str
    output_1: str
    output_2: str
    gold: str
    answers: dict[str, JudgeAnswer]
    """Original-order answer per judge, in judge order."""
    swapped: dict[str, JudgeAnswer]
    """Swapped-order answer per judge (``Swap_CoT`` only, else empty)."""
    dataset_file: str
    """The ``dataset.json`` the item comes from (named when the item is skipped)."""

    @property
    def id(self) -> str:
        return f"{self.subset}/{self.index}"


def _judge_key(name: str) -> tuple[int, str]:
    known = JUDGE_ORDER.index(name) if name in JUDGE_ORDER else len(JUDGE_ORDER)
    return (known, name)


def _check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ConvertError(
            f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}"
        )


def find_subsets(root: str | Path, strategy: str = "CoT") -> list[LLMBarSubset]:
    """Every subset below ``root`` (``root`` included), with its judges for ``strategy``.

    Raises :class:`ConvertError` when ``root`` is not a directory, holds no subset, a
    subset has no judge with a ``<strategy>/result.json``, or a ``dataset.json`` or
    ``result.json`` found is not a regular file (a broken symbolic link, a named pipe,
    a directory under that name).
    """
    _check_strategy(strategy)
    base = Path(root)
    if not base.is_dir():
        raise ConvertError(f"not a directory: {root}")
    subsets: list[LLMBarSubset] = []
    seen: set[tuple[int, int]] = set()
    # Symbolic links to folders are followed (a folder of links to chosen subsets is a
    # layout too); a folder reached again (a link loop, two links to one folder) once.
    for current, dirs, files in os.walk(base, followlinks=True):
        folder = os.stat(current)
        if (folder.st_dev, folder.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((folder.st_dev, folder.st_ino))
        dirs.sort()
        if "dataset.json" not in files and "dataset.json" not in dirs:
            continue
        here = Path(current)
        # Below a subset only evaluators/ lives; do not look for subsets inside it.
        dirs[:] = [d for d in dirs if d not in ("evaluators", "dataset.json")]
        check_source_file(here / "dataset.json", "an LLMBar dataset")
        evaluators = here / "evaluators"
        judges = (
            sorted(
                (d.name for d in evaluators.iterdir() if _has_result(d / strategy / "result.json")),
                key=_judge_key,
            )
            if evaluators.is_dir()
            else []
        )
        for judge in judges:
            if (why := name_problem(judge)) is not None:
                raise ConvertError(f"{evaluators / judge}: the judge's name {why}")
        rel = here.relative_to(base).as_posix()
        name = base.resolve().name if rel == "." else rel
        if lone_surrogate_at(name) is not None and (why := name_problem(name)) is not None:
            raise ConvertError(f"the subset's name {why}")
        if not judges:
            raise ConvertError(
                f"{here}: subset {name!r} has no evaluators/<judge>/{strategy}/result.json"
            )
        subsets.append(LLMBarSubset(name=name, path=here, judges=tuple(judges)))
    if not subsets:
        raise ConvertError(
            f"{root}: no LLMBar subset found (expected <subset>/dataset.json and "
            f"<subset>/evaluators/<judge>/{strategy}/result.json)"
        )
    return subsets


def _has_result(path: Path) -> bool:
    """Whether a judge has a result file at ``path``: anything under that name counts,
    and one that cannot be read as a file (a broken symbolic link, a named pipe, a
    directory) is a :class:`ConvertError` naming it, not a judge passed over."""
    if not os.path.lexists(path):
        return False
    check_source_file(path, "an LLMBar result file")
    return True


def llmbar_source_files(root: str | Path, strategy: str = "CoT") -> list[Path]:
    """Every file converting ``root`` with ``strategy`` reads: each subset's
    ``dataset.json`` and each judge's ``<strategy>/result.json`` (layout checked as by
    :func:`find_subsets`). An output must be none of them."""
    files: list[Path] = []
    for subset in find_subsets(root, strategy):
        files.append(subset.path / "dataset.json")
        files.extend(
            subset.path / "evaluators" / judge / strategy / "result.json" for judge in subset.judges
        )
    return files


def _load_list(path: Path) -> list[Any]:
    data: list[Any] = load_json_source(path, list)
    return data


class _Malformed(Exception):
    """Internal: the item at hand cannot be converted (file and field attached)."""

    def __init__(self, file: Path, field: str, message: str) -> None:
        super().__init__(message)
        self.file = file
        self.field = field
        self.message = message


def _answer(entry: Any, *, file: Path, field: str) -> JudgeAnswer:
    if not isinstance(entry, dict):
        raise _Malformed(file, field, "expected an object with winner and completion")
    winner = entry.get("winner")
    if isinstance(winner, int) and not isinstance(winner, bool):
        winner = str(winner)
    if winner is not None and winner not in _WINNERS:
        raise _Malformed(
            file, f"{field}.winner", f"winner must be '1', '2' or null, got {shown_value(winner)}"
        )
    completion = entry.get("completion")
    if isinstance(completion, list):
        completion = completion[0] if completion else ""
    if completion is None:
        completion = ""
    if not isinstance(completion, str):
        raise _Malformed(file, f"{field}.completion", "completion text must be a string")
    return JudgeAnswer(decision=winner, reasoning=completion)


def _results_entry(results: list[Any], index: int, judge_file: Path, key: str) -> Any:
    if index >= len(results):
        raise _Malformed(
            judge_file,
            "<item>",
            "no result for this item (result.json is shorter than dataset.json)",
        )
    item = results[index]
    if not isinstance(item, dict):
        raise _Malformed(judge_file, "<item>", "expected an object")
    runs = item.get("results")
    if not isinstance(runs, list) or not runs or not isinstance(runs[0], dict):
        raise _Malformed(judge_file, "results", "expected a non-empty list of objects")
    if key not in runs[0]:
        raise _Malformed(judge_file, f"results.0.{key}", "missing")
    return runs[0][key]


def _check_aligned(result: JsonObject, raw: JsonObject, index: int, judge_file: Path) -> None:
    """Refuse a result entry that is not the dataset's item ``index``: the files are
    index-aligned, and a result entry repeats the item's ``input``, ``output_1`` and
    ``output_2``. One that differs (a result file in another order, with an item left
    out, or of another dataset) would put a verdict on an item its judge never saw."""
    for key in _ITEM_TEXTS:
        theirs = result.get(key)
        if isinstance(theirs, str) and theirs != raw.get(key):
            raise _Malformed(
                judge_file,
                key,
                f"this result is for another item: its {key} is not that of item {index} of "
                "dataset.json (is result.json in another order, cut, or of another dataset?)",
            )


def _gold(raw: Any, dataset: Path) -> str:
    label = raw.get("label")
    if isinstance(label, int) and not isinstance(label, bool):
        label = str(label)
    if label not in _WINNERS:
        raise _Malformed(dataset, "label", f"gold label must be 1 or 2, got {shown_value(label)}")
    return str(label)


def _text(raw: JsonObject, key: str, dataset: Path) -> str:
    value = raw.get(key)
    if not isinstance(value, str):
        raise _Malformed(dataset, key, "missing or not a string")
    return value


def _build_item(
    subset: LLMBarSubset,
    strategy: str,
    index: int,
    raw: Any,
    results: dict[str, list[Any]],
) -> LLMBarItem:
    dataset = subset.path / "dataset.json"
    if not isinstance(raw, dict):
        raise _Malformed(dataset, "<item>", "expected an object")
    gold = _gold(raw, dataset)
    instruction = _text(raw, "input", dataset)
    answers: dict[str, JudgeAnswer] = {}
    swapped: dict[str, JudgeAnswer] = {}
    for judge in subset.judges:
        judge_file = subset.path / "evaluators" / judge / strategy / "result.json"
        entry = _results_entry(results[judge], index, judge_file, _ORIGINAL)
        _check_aligned(results[judge][index], raw, index, judge_file)
        answers[judge] = _answer(entry, file=judge_file, field=f"results.0.{_ORIGINAL}")
        if strategy == "Swap_CoT":
            other = _results_entry(results[judge], index, judge_file, _SWAPPED)
            swapped[judge] = _answer(other, file=judge_file, field=f"results.0.{_SWAPPED}")
    return LLMBarItem(
        subset=subset.name,
        index=index,
        strategy=strategy,
        input=instruction,
        output_1=_text(raw, "output_1", dataset),
        output_2=_text(raw, "output_2", dataset),
        gold=gold,
        answers=answers,
        swapped=swapped,
        dataset_file=str(dataset),
    )


def iter_llmbar_items(
    root: str | Path,
    strategy: str = "CoT",
    *,
    on_skip: SkipHandler | None = None,
    per_subset: int | None = None,
) -> Iterator[LLMBarItem]:
    """Every item of every subset below ``root``, one subset in memory at a time.

    ``per_subset`` keeps only the first N items of each subset (a balanced sample).
    The layout is checked when this is called (:func:`find_subsets`), so a wrong
    directory raises :class:`ConvertError` here rather than at the first ``next``.
    """
    if per_subset is not None and per_subset < 1:
        raise ConvertError(f"per_subset must be at least 1, got {per_subset}")
    return _items(find_subsets(root, strategy), strategy, on_skip, per_subset)


def _items(
    subsets: list[LLMBarSubset],
    strategy: str,
    on_skip: SkipHandler | None,
    per_subset: int | None,
) -> Iterator[LLMBarItem]:
    for subset in subsets:
        dataset = _load_list(subset.path / "dataset.json")
        if not dataset:
            raise ConvertError(f"{subset.path / 'dataset.json'}: no item (an empty list)")
        results = {
            judge: _load_list(subset.path / "evaluators" / judge / strategy / "result.json")
            for judge in subset.judges
        }
        for index, raw in enumerate(dataset[:per_subset]):
            try:
                yield _build_item(subset, strategy, index, raw, results)
            except _Malformed as bad:
                report_skip(
                    on_skip,
                    Skipped(
                        file=str(bad.file), item=str(index), field=bad.field, message=bad.message
                    ),
                )
        if per_subset is None:
            _report_extra_results(subset, strategy, len(dataset), results, on_skip)


def _report_extra_results(
    subset: LLMBarSubset,
    strategy: str,
    items: int,
    results: dict[str, list[Any]],
    on_skip: SkipHandler | None,
) -> None:
    """A judge's results beyond the dataset's items are reported, not dropped in silence:
    the two files are index-aligned, so extra results mean a dataset.json cut short (or
    results of another dataset)."""
    for judge, judged in results.items():
        if len(judged) > items:
            report_skip(
                on_skip,
                Skipped(
                    file=str(subset.path / "evaluators" / judge / strategy / "result.json"),
                    item=f"{items}-{len(judged) - 1}",
                    field="<item>",
                    message=(
                        f"{len(judged) - items} results beyond the {items} items of "
                        "dataset.json (is dataset.json cut short?)"
                    ),
                ),
            )


def _meta(item: LLMBarItem) -> JsonObject:
    return {
        "source": "LLMBar",
        "subset": item.subset,
        "index": item.index,
        "strategy": item.strategy,
        "gold": item.gold,
        "input": item.input,
        "options": {"1": item.output_1, "2": item.output_2},
    }


def _output(judge: str, answer: JudgeAnswer, swapped: JudgeAnswer | None) -> AgentOutput:
    fields: JsonObject = {
        "agent": judge,
        "decision": answer.decision,
        "reasoning": answer.reasoning,
        "family": FAMILIES.get(judge),
    }
    if swapped is not None:
        fields["reask"] = {
            "decision": swapped.decision,
            "reasoning": swapped.reasoning if swapped.reasoning.strip() else None,
            "perturbation": "swap_order",
        }
    return AgentOutput.model_validate(fields)


def item_to_panel(item: LLMBarItem) -> Panel:
    """The panel of one item (raises :class:`InputError` when fewer than two judges have a trace)."""
    outputs: list[AgentOutput] = []
    without_trace: dict[str, str | None] = {}
    for judge, answer in item.answers.items():
        if not answer.reasoning.strip():
            without_trace[judge] = answer.decision
            continue
        try:
            outputs.append(_output(judge, answer, item.swapped.get(judge)))
        except ValidationError as exc:  # e.g. text that is not valid Unicode
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise InputError(f"judge {shown_value(judge)}: {where}: {first['msg']}") from exc
    meta = _meta(item)
    if without_trace:
        meta["judges_without_trace"] = without_trace
    try:
        return Panel(id=item.id, meta=meta, outputs=outputs)
    except ValidationError as exc:
        raise InputError(
            f"{len(outputs)} judge(s) with a reasoning trace: {exc.errors()[0]['msg']}"
        ) from exc


def _source(judge: str) -> str:
    family = FAMILIES.get(judge)
    return f"parametric:{family}" if family else f"parametric:{judge}"


def item_to_votes(item: LLMBarItem) -> VoteCase:
    """The vote case of one item (raises :class:`InputError` when fewer than two judges voted)."""
    votes = [
        Vote(
            agent=judge,
            answer=answer.decision,
            evidence_source=_source(judge),
            evidence_present=False,
            confidence=None,
            family=FAMILIES.get(judge),
        )
        for judge, answer in item.answers.items()
        if answer.decision is not None
    ]
    meta: JsonObject = {
        "source": "LLMBar",
        "subset": item.subset,
        "index": item.index,
        "strategy": item.strategy,
        "abstained": [judge for judge, answer in item.answers.items() if answer.decision is None],
    }
    if item.swapped:
        meta["swap_answers"] = {judge: answer.decision for judge, answer in item.swapped.items()}
    try:
        return VoteCase(id=item.id, votes=votes, gold=item.gold, meta=meta)
    except ValidationError as exc:
        raise InputError(f"{len(votes)} judge(s) voted: {exc.errors()[0]['msg']}") from exc


def iter_llmbar_panels(
    root: str | Path,
    strategy: str = "CoT",
    *,
    on_skip: SkipHandler | None = None,
    per_subset: int | None = None,
) -> Iterator[Panel]:
    """One :class:`Panel` per item of every subset below ``root``.

    >>> panels = iter_llmbar_panels("../shared/data/llmbar", "Swap_CoT")  # doctest: +SKIP
    >>> next(panels).outputs[0].reask.decision  # doctest: +SKIP
    '2'
    """
    return _panels(
        iter_llmbar_items(root, strategy, on_skip=on_skip, per_subset=per_subset), on_skip
    )


def _panels(items: Iterator[LLMBarItem], on_skip: SkipHandler | None) -> Iterator[Panel]:
    for item in items:
        try:
            panel = item_to_panel(item)
        except InputError as exc:
            report_skip(
                on_skip,
                Skipped(
                    file=item.dataset_file, item=str(item.index), field="outputs", message=str(exc)
                ),
            )
            continue
        over = over_limits(panel)
        if over is None:
            yield panel
        else:
            report_skip(on_skip, _overrun(item, over, [o.agent for o in panel.outputs]))


# Where a panel's field comes from: the dataset's fields, and a judge's result entry.
_DATASET_SOURCES = {
    "meta.input": "input",
    "meta.options.1": "output_1",
    "meta.options.2": "output_2",
}
_RESULT_SOURCES = {
    "reasoning": f"results.0.{_ORIGINAL}.completion",
    "reask.reasoning": f"results.0.{_SWAPPED}.completion",
}


def _overrun(item: LLMBarItem, over: Overrun, agents: list[str]) -> Skipped:
    """The skip of an item whose record is over a bound, naming the source file and field
    its text came from: a judge's ``result.json`` for an output's text, else the
    ``dataset.json``."""
    parts = over.field.split(".")
    if parts[0] in ("outputs", "votes") and len(parts) > 2 and parts[1].isdigit():
        judge = agents[int(parts[1])]
        file = Path(item.dataset_file).parent / "evaluators" / judge / item.strategy / "result.json"
        field = _RESULT_SOURCES.get(".".join(parts[2:]), f"results.0.{_ORIGINAL}")
        return Skipped(
            file=str(file),
            item=str(item.index),
            field=field,
            message=overrun_message(over, f"judge {shown_value(judge)}: "),
        )
    field = _DATASET_SOURCES.get(over.field, "<item>")
    return Skipped(
        file=item.dataset_file, item=str(item.index), field=field, message=overrun_message(over)
    )


def iter_llmbar_votes(
    root: str | Path,
    strategy: str = "CoT",
    *,
    on_skip: SkipHandler | None = None,
    per_subset: int | None = None,
) -> Iterator[VoteCase]:
    """One :class:`VoteCase` (the guard's input) per item of every subset below ``root``."""
    return _votes(
        iter_llmbar_items(root, strategy, on_skip=on_skip, per_subset=per_subset), on_skip
    )


def _votes(items: Iterator[LLMBarItem], on_skip: SkipHandler | None) -> Iterator[VoteCase]:
    for item in items:
        try:
            case = item_to_votes(item)
        except InputError as exc:
            report_skip(
                on_skip,
                Skipped(
                    file=item.dataset_file, item=str(item.index), field="votes", message=str(exc)
                ),
            )
            continue
        over = over_limits(case)
        if over is None:
            yield case
        else:
            report_skip(on_skip, _overrun(item, over, [v.agent for v in case.votes]))
