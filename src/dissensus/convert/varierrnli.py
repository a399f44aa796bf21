"""VariErrNLI annotations -> dissensus panels of human annotators (``docs/convert.md``).

VariErrNLI (as released for the LeWiDi 2025 shared task) is a JSON object keyed by item
id; each item holds an NLI pair (``text.context``, ``text.statement``), ``annotations``
(annotator -> comma-separated labels), ``annotators`` (one entry per annotation, in the
order of ``other_info.explanations``), ``soft_label`` and ``split``. Each annotator is
one agent: a human panel with reasoning traces and decisions.

Choices where the source is silent:

* Explanations are matched to labels by occurrence: the k-th time an annotator appears
  in ``annotators`` is the explanation of that annotator's k-th label. The counts must
  agree, otherwise the item is malformed.
* An annotator who gave several labels has ``decision`` = the *first* label listed (the
  order the source gives); all labels are kept in the extra output field ``labels`` and
  the explanations, one per label in label order, are joined with a blank line into
  ``reasoning`` (each is also kept in the extra field ``explanations``).
* Agents are ordered by annotator id as they first appear in ``annotations``.
* An annotator whose explanations are all empty (or blank) is kept, label and all, with
  an empty ``reasoning`` (blank explanations are left out of the joined reasoning, and
  kept as given in ``explanations``): their label is the data, and a panel accepts an
  agent without reasoning (the reading names it in ``missing_reasoning``). The item is
  not skipped for it.
* Panel id = the item key; ``meta`` = ``{source, split, context, statement, soft_label}``
  (``soft_label`` as in the source: label -> {"0": p, "1": p}), plus ``label_counts``
  (label -> number of annotators who gave it, every label of a multi-label annotator
  counted, a label one annotator repeats counted once) and the generic ``options`` (label -> what it asserts, :data:`NLI_OPTIONS`,
  the three NLI labels in their standard reading).
* An item with fewer than two annotators is not a panel; it is skipped and reported
  through ``on_skip`` like a malformed item (see :mod:`dissensus.convert.skips`). So is
  an item with a label other than the three NLI labels, a ``soft_label`` that is not
  label -> ``{"0": p, "1": p}`` for each of the three labels, with probabilities in
  [0, 1] (it may be absent; an empty one or one without a label is malformed), a
  ``split`` that is not a string, and an item whose panel a reader would refuse (a field
  over :data:`~dissensus.io.limits.MAX_FIELD_CHARS` characters, a key among them:
  :func:`~dissensus.convert.skips.over_limits`), named by its source field.
* A file that cannot be read, is not a JSON object or holds no item is a
  :class:`ConvertError` (exit code 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dissensus.convert.skips import (
    ConvertError,
    SkipHandler,
    Skipped,
    cut,
    load_json_source,
    name_problem,
    over_limits,
    overrun_message,
    report_skip,
    shown_value,
)
from dissensus.errors import InputError
from dissensus.io.limits import Overrun
from dissensus.types import AgentOutput, JsonObject, Panel

__all__ = ["NLI_OPTIONS", "item_to_panel", "iter_varierrnli_panels", "load_varierrnli"]

NLI_OPTIONS: dict[str, str] = {
    "entailment": "the statement follows from the context",
    "neutral": "the context neither implies nor contradicts the statement",
    "contradiction": "the statement contradicts the context",
}
"""The panel's ``meta.options``: NLI label -> what choosing it asserts."""


class _Malformed(InputError):
    """Internal: the item is not a panel (the failing field attached)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def load_varierrnli(path: str | Path) -> JsonObject:
    """The file's items, keyed by item id (raises :class:`ConvertError` if unreadable or
    empty)."""
    data: JsonObject = load_json_source(path, dict)
    if not data:
        raise ConvertError(f"{path}: no item (an empty object; expected items keyed by id)")
    return data


def _strings(value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _Malformed(field, "expected a list of strings")
    return value


def _split_labels(annotations: Any) -> dict[str, list[str]]:
    if not isinstance(annotations, dict) or not annotations:
        raise _Malformed("annotations", "expected a non-empty object annotator -> labels")
    labels: dict[str, list[str]] = {}
    for annotator, raw in annotations.items():
        field = f"annotations.{cut(annotator)}"
        if (why := name_problem(annotator)) is not None:
            raise _Malformed(field, f"the annotator {why}")
        if not isinstance(raw, str):
            raise _Malformed(field, "expected comma-separated labels")
        parts = [p.strip() for p in raw.split(",") if p.strip()]
        if not parts:
            raise _Malformed(field, "no label")
        for part in parts:
            if part not in NLI_OPTIONS:
                raise _Malformed(
                    field, f"label {shown_value(part)} is not one of {', '.join(NLI_OPTIONS)}"
                )
        labels[annotator] = parts
    return labels


def _soft_label(item: JsonObject) -> Any:
    """The item's ``soft_label`` (``None`` when absent), checked to be label ->
    ``{"0": p, "1": p}`` for each of the three NLI labels, with every ``p`` a number in
    [0, 1]."""
    soft = item.get("soft_label")
    if soft is None:
        return None
    shape = 'label -> {"0": p, "1": p}'
    if not isinstance(soft, dict):
        raise _Malformed("soft_label", f"expected an object {shape}, got {shown_value(soft)}")
    for label, dist in soft.items():
        if label not in NLI_OPTIONS:
            raise _Malformed(
                "soft_label", f"{shown_value(label)} is not one of {', '.join(NLI_OPTIONS)}"
            )
        if not isinstance(dist, dict):
            raise _Malformed(
                f"soft_label.{label}",
                f'expected an object {{"0": p, "1": p}}, got {shown_value(dist)}',
            )
        for key, p in dist.items():
            if key not in ("0", "1"):
                raise _Malformed(f"soft_label.{label}", f'{shown_value(key)} is not "0" or "1"')
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
                raise _Malformed(
                    f"soft_label.{label}.{key}",
                    f"expected a probability in [0, 1], got {shown_value(p)}",
                )
        absent = [key for key in ("0", "1") if key not in dist]
        if absent:
            named = " and ".join(f'"{key}"' for key in absent)
            raise _Malformed(f"soft_label.{label}", f'no {named}: expected {{"0": p, "1": p}}')
    # A soft label is a distribution for every label: one that leaves a label out (or is
    # empty) says nothing about it, and would read as if that label had no weight.
    missing = [label for label in NLI_OPTIONS if label not in soft]
    if missing:
        raise _Malformed(
            "soft_label", f"no {', '.join(missing)}: expected every one of {', '.join(NLI_OPTIONS)}"
        )
    return soft


def _explanations_by_annotator(
    item: JsonObject, labels: dict[str, list[str]]
) -> dict[str, list[str]]:
    order = item.get("annotators")
    if not isinstance(order, str):
        raise _Malformed("annotators", "expected a comma-separated string")
    sequence = [a.strip() for a in order.split(",") if a.strip()]
    info = item.get("other_info")
    if not isinstance(info, dict):
        raise _Malformed("other_info", "expected an object with explanations")
    explanations = _strings(info.get("explanations"), "other_info.explanations")
    if len(sequence) != len(explanations):
        raise _Malformed(
            "other_info.explanations",
            f"{len(explanations)} explanations for {len(sequence)} annotations in 'annotators'",
        )
    counts = Counter(sequence)
    for annotator, given in labels.items():
        if counts.get(annotator, 0) != len(given):
            raise _Malformed(
                "annotators",
                f"{shown_value(annotator)} appears {counts.get(annotator, 0)} time(s) but "
                f"gave {len(given)} label(s)",
            )
    unknown = sorted(set(sequence) - set(labels))
    if unknown:
        named = ", ".join(shown_value(u) for u in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise _Malformed("annotators", f"annotator(s) without annotations: {named}{more}")
    grouped: dict[str, list[str]] = {a: [] for a in labels}
    for annotator, text in zip(sequence, explanations, strict=True):
        grouped[annotator].append(text)
    return grouped


def _text(item: JsonObject, key: str) -> str:
    text = item.get("text")
    if not isinstance(text, dict) or not isinstance(text.get(key), str):
        raise _Malformed(f"text.{key}", "missing or not a string")
    return str(text[key])


def item_to_panel(key: str, item: Any) -> Panel:
    """The panel of one item; raises :class:`InputError` (with the field) if it is not one."""
    if not isinstance(item, dict):
        raise _Malformed("<item>", "expected an object")
    labels = _split_labels(item.get("annotations"))
    explained = _explanations_by_annotator(item, labels)
    outputs: list[AgentOutput] = []
    for annotator, given in labels.items():
        # An annotator whose explanations are all blank keeps their label (the vote is the
        # data) with an empty reasoning: the reading names them in missing_reasoning.
        texts = explained[annotator]
        try:
            agent = AgentOutput.model_validate(
                {
                    "agent": annotator,
                    "decision": given[0],
                    "reasoning": "\n\n".join(t for t in texts if t.strip()),
                    "labels": given,
                    "explanations": texts,
                }
            )
        except ValidationError as exc:  # a skip naming the annotator, never a traceback
            raise _Malformed(f"annotations.{cut(annotator)}", exc.errors()[0]["msg"]) from exc
        outputs.append(agent)
    if len(outputs) < 2:
        raise _Malformed("annotations", f"{len(outputs)} annotator(s): a panel needs at least two")
    # Annotators per label: one who wrote a label twice ("neutral,neutral") counts once.
    counts: Counter[str] = Counter(
        label for given in labels.values() for label in dict.fromkeys(given)
    )
    split = item.get("split")
    if split is not None and not isinstance(split, str):
        raise _Malformed("split", f"expected a string, got {shown_value(split)}")
    meta = {
        "source": "VariErrNLI",
        "split": split,
        "context": _text(item, "context"),
        "statement": _text(item, "statement"),
        "soft_label": _soft_label(item),
        "label_counts": dict(sorted(counts.items())),
        "options": dict(NLI_OPTIONS),
    }
    try:
        panel = Panel(id=key, meta=meta, outputs=outputs)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise _Malformed(".".join(str(p) for p in first["loc"]) or "<item>", first["msg"]) from exc
    over = over_limits(panel)
    if over is not None:
        raise _Malformed(_source_field(panel, over), _overrun_message(panel, over))
    return panel


# Where a panel field's text comes from in the item.
_META_SOURCES = {"meta.context": "text.context", "meta.statement": "text.statement"}


def _source_field(panel: Panel, over: Overrun) -> str:
    """The item's field a panel's field over a bound was made from."""
    parts = over.field.split(".")
    if over.field == "id":
        return "<key>"
    if parts[0] == "outputs" and len(parts) > 2:
        if parts[2] in ("reasoning", "explanations"):
            return "other_info.explanations"
        return "annotations"
    return _META_SOURCES.get(".".join(parts[:2]), "<item>" if over.count else over.field)


def _overrun_message(panel: Panel, over: Overrun) -> str:
    """The skip message of a panel over a bound: the annotator named when it is theirs."""
    parts = over.field.split(".")
    whose = "the item's key: " if over.field == "id" else ""
    if parts[0] == "outputs" and len(parts) > 1 and parts[1].isdigit():
        whose = f"annotator {shown_value(panel.outputs[int(parts[1])].agent)}: "
    return overrun_message(over, whose)


def iter_varierrnli_panels(
    path: str | Path, *, on_skip: SkipHandler | None = None
) -> Iterator[Panel]:
    """One :class:`Panel` per item of a VariErrNLI file, in file order.

    The file is read when this is called, so an unreadable file raises
    :class:`ConvertError` here rather than at the first ``next``.

    >>> panels = list(iter_varierrnli_panels("VariErrNLI_dev.json"))  # doctest: +SKIP
    >>> panels[0].meta["split"]  # doctest: +SKIP
    'dev'
    """
    return _panels(load_varierrnli(path), str(path), on_skip)


def _panels(data: JsonObject, file: str, on_skip: SkipHandler | None) -> Iterator[Panel]:
    for key, item in data.items():
        try:
            yield item_to_panel(str(key), item)
        except _Malformed as bad:
            report_skip(
                on_skip, Skipped(file=file, item=str(key), field=bad.field, message=bad.message)
            )
