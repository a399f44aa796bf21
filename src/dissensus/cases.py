"""The case a panel answered, parsed once from its ``meta``: question, options, utilities.

Panels carry the case they judged in free-form ``meta`` (converters and users write it
in several shapes). Every reader — the re-ask prompt, acceptance features, CONCORD's
problem, the review page, the CLI's tables, the review requests of the integrations —
reads it through :meth:`CaseSpec.from_meta`, so a case has one question and one list
of options whoever asks.

Choices this module makes:

* **Question**: the first non-empty string among ``meta.question``, ``meta.input``,
  ``meta.prompt`` and ``meta.statement``.
* **Conversation** (:func:`conversation`): ``meta.messages``, as the chat door records
  the request it answered (``{role, content}``, ``content`` a string or a list of text
  parts ``{"type": "text", "text": ...}``, joined by newlines as the door reads them).
  An item that is not a mapping with a string ``role`` and a string, list or null
  ``content`` is left out; a list's parts without a string ``text`` are too. It is not
  the case's :attr:`CaseSpec.question` (which the re-ask prompt and the acceptance
  features read, so a chat panel is scored as it was calibrated); what a person is shown
  as the question is :func:`asked_question`: that question, else the text of the
  conversation's last ``user`` message.
* **Options**, in their original order, from the first of:

  - ``meta.options`` as a list: a mapping item gives ``id`` (its ``id``, else its
    1-based position — one rule for options without ids), ``text`` (its ``text``, else
    its id) and ``label`` (its ``label``); any other item is both id and text;
  - ``meta.options`` as a mapping ``id -> text``;
  - ``meta.output_1`` and ``meta.output_2`` (pairwise judging): ids ``1`` and ``2``.

  Ids and texts are strings (``1`` and ``"1"`` are one id); a repeated id keeps its
  first option.
* **Labels** are how the agents refer to an option: the item's ``label``, else
  ``meta.option_labels`` (a list in option order or a mapping ``id -> label``), else
  ``Output (a)``, ``Output (b)``, ... when the case is judged pairwise-style
  (``output_1``/``output_2``, ``meta.source`` ``LLMBar``, or options numbered ``1``..``n``
  while the agents' reasoning speaks of "Output (a)"), else the option id itself.
* **Utilities** (``meta.utilities``, agent -> option -> utility in [0, 1]): parsed with
  the reason they are unusable, if they are (:attr:`CaseSpec.utilities_problem`);
  a utility is a JSON number: booleans, strings (``"0.9"``) and numbers outside [0, 1]
  are refused, never converted or clipped.
* **Options on a reviewer's table** (:func:`review_options`): the case's options in the
  order ``meta`` declares them, then every other decision an agent gave, in natural
  order: runs of the digits ``0``-``9`` compare as numbers (``2`` before ``10``, ``item
  9`` before ``item 10``), the rest character by character (``no`` before ``yes``). A
  reviewer's number keys follow this order, so ``2`` is the panel's second option.

>>> spec = CaseSpec.from_meta({"input": "Which?", "output_1": "A", "output_2": "B"})
>>> spec.question, [(o.id, o.label) for o in spec.options]
('Which?', [('1', 'Output (a)'), ('2', 'Output (b)')])
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from dissensus.errors import InputError
from dissensus.types import Panel, PanelLike

__all__ = [
    "CaseMessage",
    "CaseOption",
    "CaseSpec",
    "as_panel",
    "asked_question",
    "conversation",
    "natural_key",
    "option_ids",
    "review_options",
    "shown_order",
]

QUESTION_KEYS = ("question", "input", "prompt", "statement")
"""``meta`` keys that hold the question, in order of preference."""


class CaseOption(BaseModel):
    """One option of the case."""

    model_config = ConfigDict(frozen=True)

    id: str
    """What agents answer with (their ``decision``)."""
    text: str
    """The option's content."""
    label: str
    """How the agents refer to it (e.g. ``Output (a)``)."""


class CaseSpec(BaseModel):
    """The case of a panel (see the module docstring for the rules)."""

    model_config = ConfigDict(frozen=True)

    question: str | None = None
    options: tuple[CaseOption, ...] = ()
    utilities: dict[str, dict[str, float]] | None = None
    """agent -> option -> utility, when ``meta.utilities`` is present and usable."""
    utilities_problem: str | None = None
    """Why ``meta.utilities`` is unusable (``None`` when it is usable or absent)."""

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any] | None, reasoning: Sequence[str] = ()) -> CaseSpec:
        """Parse a panel's ``meta`` (anything not a mapping is an empty case); the agents'
        ``reasoning`` only tells how they refer to the options."""
        if not isinstance(meta, Mapping):
            return cls()
        utilities, problem = _utilities(meta)
        return cls(
            question=_question(meta),
            options=_options(meta, reasoning),
            utilities=utilities,
            utilities_problem=problem,
        )

    @classmethod
    def from_panel(cls, panel: Any) -> CaseSpec:
        """The case of a panel (a :class:`~dissensus.types.Panel` or its JSON)."""
        if isinstance(panel, Mapping):
            outputs = panel.get("outputs") or []
            reasoning = [str(o.get("reasoning", "")) for o in outputs if isinstance(o, Mapping)]
            return cls.from_meta(panel.get("meta"), reasoning)
        return cls.from_meta(panel.meta, [o.reasoning for o in panel.outputs])

    def option_ids(self) -> list[str]:
        return [o.id for o in self.options]

    def pairs(self) -> list[tuple[str, str]]:
        """``(id, text)`` of every option, in order."""
        return [(o.id, o.text) for o in self.options]

    def option(self, option_id: str) -> CaseOption | None:
        return next((o for o in self.options if o.id == option_id), None)


def option_ids(meta: Mapping[str, Any] | None) -> list[str]:
    """``CaseSpec.from_meta(meta).option_ids()`` without building the case (no labels,
    question or utilities): the ids of the options, in order, each once."""
    if meta.__class__ is dict and "options" not in meta and "output_1" not in meta:
        return []  # no options (what _raw_options finds then), without its type checks
    if not isinstance(meta, Mapping):
        return []
    raw, _ = _raw_options(meta)
    return list(dict.fromkeys(oid for oid, _, _ in raw))


_DIGIT_RUN = re.compile(r"([0-9]+)")


def natural_key(text: str) -> tuple[tuple[tuple[int, int, str], ...], str]:
    """Sort key of ``text`` in natural order: its runs of ASCII digits compare as the
    numbers they write (by length without leading zeros, then digits: no conversion, so
    a run of any length), the text between them as text; ``text`` itself breaks ties
    (``02`` before ``2``), so the order is total."""
    parts = _DIGIT_RUN.split(text)  # text, digits, text, ...: digits at odd indices
    key = tuple(
        (0, len(part.lstrip("0")), part.lstrip("0")) if i % 2 else (1, 0, part)
        for i, part in enumerate(parts)
    )
    return key, text


def review_options(declared: Iterable[str], given: Iterable[str]) -> list[str]:
    """The options a reviewer is shown, each once: ``declared`` (the case's options,
    :func:`option_ids`) in their order, then the rest of ``given`` (the decisions the
    agents gave) in natural order (:func:`natural_key`)."""
    first = list(dict.fromkeys(declared))
    known = set(first)
    rest = {g for g in given if g not in known}
    if len(rest) < 2:
        return first + list(rest)  # nothing to order
    return first + sorted(rest, key=_natural_key)


_natural_key = functools.lru_cache(maxsize=1024)(natural_key)
""":func:`natural_key`, remembered for the few labels panels repeat (``1``, ``2``, ``A``)."""


def shown_order(meta: Any, options: Sequence[str]) -> list[str]:
    """The order a reviewer is shown a journalled review item's ``options`` in.

    The journal stores a panel's JSON with its objects' keys sorted, so a ``meta.options``
    *object* (what ``dissensus convert`` writes) has lost its declared order there, while
    the item's own ``options`` list keeps the order the item was written with. So: a
    ``meta.options`` list (JSON keeps a list's order) leads, the rest in natural order
    (:func:`review_options`); else the item's own list as written, when it is not in
    plain string order (an item written in the declared order); else, an item written in
    string order (by a version before the declared order, or one whose declared order
    was lost before it was written, on resume), natural order (``2`` before ``10``)."""
    raw = meta.get("options") if isinstance(meta, dict) else None
    if isinstance(raw, list):
        return review_options(option_ids(meta), options)
    listed = list(dict.fromkeys(options))
    if listed != sorted(listed):
        return listed
    return review_options([], listed)


class CaseMessage(BaseModel):
    """One message of the conversation a panel answered (``meta.messages``)."""

    model_config = ConfigDict(frozen=True)

    role: str
    """As recorded (``system``, ``user``, ``assistant``, ...)."""
    text: str
    """The content as one string (text parts joined by newlines)."""


def _message(raw: Any) -> CaseMessage | None:
    """An item of ``meta.messages`` as a :class:`CaseMessage` (``None`` when it is not one)."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("role"), str):
        return None
    content = raw.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        text = "\n".join(t for t in parts if isinstance(t, str))
    else:
        return None
    return CaseMessage(role=raw["role"], text=text)


def conversation(meta: Mapping[str, Any] | None) -> tuple[CaseMessage, ...]:
    """The conversation of ``meta.messages``, in order (see the module docstring); empty
    when there is none."""
    raw = meta.get("messages") if isinstance(meta, Mapping) else None
    if not isinstance(raw, list):
        return ()
    return tuple(m for m in map(_message, raw) if m is not None)


def asked_question(meta: Mapping[str, Any] | None) -> str | None:
    """The question a person is shown: the case's question (:attr:`CaseSpec.question`),
    else the text of the last ``user`` message of :func:`conversation` (``None`` when
    there is neither, or that text is blank)."""
    if not isinstance(meta, Mapping):
        return None
    question = _question(meta)
    if question is not None:
        return question
    raw = meta.get("messages")
    if not isinstance(raw, list):
        return None
    for item in reversed(raw):
        message = _message(item)
        if message is not None and message.role == "user":
            return message.text if message.text.strip() else None
    return None


def _question(meta: Mapping[str, Any]) -> str | None:
    for key in QUESTION_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _raw_options(meta: Mapping[str, Any]) -> tuple[list[tuple[str, str, str | None]], bool]:
    """``(id, text, label or None)`` and whether the case is pairwise judging."""
    raw = meta.get("options")
    if isinstance(raw, list):
        out: list[tuple[str, str, str | None]] = []
        for i, item in enumerate(raw):
            if isinstance(item, Mapping):
                oid = str(item["id"]) if item.get("id") is not None else str(i + 1)
                label = item.get("label")
                out.append((oid, str(item.get("text", oid)), None if label is None else str(label)))
            else:
                out.append((str(item), str(item), None))
        return out, False
    if isinstance(raw, Mapping):
        return [(str(k), str(v), None) for k, v in raw.items()], False
    if isinstance(meta.get("output_1"), str) and isinstance(meta.get("output_2"), str):
        return [("1", str(meta["output_1"]), None), ("2", str(meta["output_2"]), None)], True
    return [], False


_LETTERED = re.compile(r"\boutput\s*\(([a-z])\)", re.IGNORECASE)


def _options(meta: Mapping[str, Any], reasoning: Sequence[str]) -> tuple[CaseOption, ...]:
    raw, pairwise = _raw_options(meta)
    pairwise = pairwise or (str(meta.get("source", "")).lower() == "llmbar" and len(raw) == 2)
    numbered = [oid for oid, _, _ in raw] == [str(i + 1) for i in range(len(raw))]
    if not pairwise and numbered and 0 < len(raw) <= 26:
        pairwise = any(_LETTERED.search(text) for text in reasoning)
    given = meta.get("option_labels")
    seen: set[str] = set()
    out: list[CaseOption] = []
    for i, (oid, text, label) in enumerate(raw):
        if oid in seen:
            continue
        seen.add(oid)
        if label is None and isinstance(given, list) and i < len(given):
            label = str(given[i])
        elif label is None and isinstance(given, Mapping) and oid in given:
            label = str(given[oid])
        if label is None:
            label = f"Output ({chr(ord('a') + i)})" if pairwise and i < 26 else oid
        out.append(CaseOption(id=oid, text=text, label=label))
    return tuple(out)


def _utilities(meta: Mapping[str, Any]) -> tuple[dict[str, dict[str, float]] | None, str | None]:
    if "utilities" not in meta:
        return None, None
    raw = meta.get("utilities")
    if not isinstance(raw, Mapping):
        return None, "meta.utilities is not a mapping of agent -> option -> utility"
    out: dict[str, dict[str, float]] = {}
    for agent, table in raw.items():
        if not isinstance(table, Mapping):
            return None, f"meta.utilities.{agent} is not a mapping of option -> utility"
        row: dict[str, float] = {}
        for option, value in table.items():
            number = (
                float(value)
                if isinstance(value, int | float) and not isinstance(value, bool)
                else math.nan
            )
            if not 0.0 <= number <= 1.0:
                return (
                    None,
                    f"meta.utilities.{agent}.{option} is {value!r}, not a utility in [0, 1]",
                )
            row[str(option)] = number
        out[str(agent)] = row
    return out, None


def as_panel(panel: object) -> PanelLike:
    """The panel a caller gave: a :class:`Panel` or a read-only view of one as it is, a
    mapping validated into a :class:`Panel`; anything else is an
    :class:`~dissensus.errors.InputError` naming its type (never an ``AttributeError``
    from deep inside the reading)."""
    if isinstance(panel, Panel):
        return panel
    if isinstance(panel, Mapping):
        try:
            return Panel.model_validate(panel)
        except ValidationError as exc:
            raise InputError.invalid("panel", exc) from None
    if all(hasattr(panel, name) for name in ("id", "meta", "outputs")):
        return panel  # type: ignore[return-value]  # a view (PanelLike)
    raise InputError(f"a panel is a Panel or a mapping, not {type(panel).__name__}")
