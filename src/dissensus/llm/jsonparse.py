"""Tolerant extraction of one JSON value from a model's answer.

Models wrap JSON in code fences, put prose around it, or leave trailing commas. The
extraction tries, in order, and returns the first candidate that parses:

1. the whole text;
2. the body of every fenced code block (```json ... ``` or ``` ... ```);
3. every balanced ``{...}`` / ``[...]`` span (string-aware), first opening bracket first.

Each candidate is tried as is, then with trailing commas before ``}`` / ``]`` removed
(outside strings). Choices: only objects and arrays are extracted from surrounding text
(a bare number inside prose is not "the answer"); when ``want_object`` is true, arrays
are skipped. Pure functions, no I/O.

An answer the server ended early (``cut_short``: cut at the completion cap, or stopped by
a content filter) may end inside the value its model was writing, so only what closed
before that value opened is tried: the whole text, then every code fence that closes and
every outermost ``{...}`` / ``[...]`` value that closes, all before the first outermost
value that does not close. An answer that is a whole object followed by prose cut at the
cap (``{"verdict": "A"}\n\nExplanation: ...``), or a closed fence followed by prose, is
read; a value or fence inside an outermost value that never closes is a piece of that
value, never the answer (``{"draft": {"verdict": "B"}, "verdict": "A", "why": "...``
cut there is no verdict ``B``).

An answer is model output, so its size and shape are not to be trusted: a value nested
deeper than the JSON parser goes is no answer (not a ``RecursionError``), a span is at
most :data:`MAX_DEPTH` brackets deep, and the span scan reads at most
:data:`SCAN_STEPS_PER_CHAR` characters per character of the answer (it read every
character after every opening bracket: 100,000 ``[`` took hours), and at most
:data:`SCAN_STEPS_MAX` in all (4 MiB of ``[`` took a minute within the linear budget),
after which the spans not yet found are not tried.

A key written twice in one object, anywhere in the value, is never read (JSON parsers
differ on which value wins: ``{"scores": {"C1": 1, "C1": 9}}`` was read as 9): the first
candidate that parses and holds one raises :class:`DuplicateKeyError` naming the key's
path (:func:`dissensus.io.jsontext.check_unique_keys`, the check of the JSONL readers),
and no later candidate is tried, since the spans inside it (``{"C1": 1, "C1": 9}``, or
one object among the repeated ones) are not the answer either. The model client
re-asks such an answer as one that does not validate (``docs/llm.md``).
``unique_keys=False`` reads a repeated key as :func:`json.loads` does (the last value):
only the ZeroEval converter's reading of recorded outputs asks for it, so that its panels
(and the figures computed from them) stay as they were.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from dissensus.io.jsontext import JsonTextError, check_unique_keys

__all__ = ["DuplicateKeyError", "JSONExtractError", "extract_json", "strip_trailing_commas"]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)
_CLOSE = {"{": "}", "[": "]"}


class JSONExtractError(ValueError):
    """No JSON value could be extracted from the text."""


class DuplicateKeyError(JSONExtractError):
    """The answer's JSON holds a key twice in one object; ``field`` is the key's path
    (``scores.C1``)."""

    def __init__(self, field: str) -> None:
        super().__init__(f"the answer's JSON holds a key twice in one object: {field!r}")
        self.field = field


def strip_trailing_commas(text: str) -> str:
    """Remove commas directly (modulo whitespace) before ``}`` or ``]``, outside strings."""
    if "," not in text:  # nothing to remove: skip the character loop
        return text
    out: list[str] = []
    in_string = False
    escaped = False
    pending: list[str] = []  # a comma and the whitespace after it, held back
    for ch in text:
        if in_string:
            out.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if pending:
            if ch in " \t\r\n":
                pending.append(ch)
                continue
            if ch in "}]":
                out.extend(pending[1:])  # drop the comma, keep the whitespace
            else:
                out.extend(pending)
            pending = []
        if ch == ",":
            pending = [ch]
            continue
        out.append(ch)
        if ch == '"':
            in_string = True
    out.extend(pending)
    return "".join(out)


MAX_DEPTH = 256
"""The deepest nesting of brackets a span may hold (a model's answer nests a few levels;
``json`` itself gives up near a thousand)."""
SCAN_STEPS_PER_CHAR = 64
"""The span scan's budget: at most this many characters read per character of the
answer (plus :data:`SCAN_STEPS_BASE`), so an answer of many opening brackets is scanned
in time linear in its length, not in its square."""
SCAN_STEPS_BASE = 100_000
SCAN_STEPS_MAX = 2_500_000
"""The span scan's budget whatever the answer's length: a scan reads a few million
characters a second, so an answer of 4 MiB of opening brackets (as much as the OpenAI
backend reads) took a minute of CPU at :data:`SCAN_STEPS_PER_CHAR`, after the attempt's
deadline and with the event loop serving nothing else. It is above the linear budget of
any answer up to 32,768 characters (one text field of a panel), which is unchanged."""


def _value_end(text: str, start: int, limit: int) -> tuple[int | None, int]:
    """Where the bracket value opening at ``start`` ends (the index after its closing
    bracket), string-aware, and how many characters were read to find it; ``None`` when
    it does not close within ``limit`` characters read: the text ends first, a bracket
    closes the wrong opener, or it nests deeper than :data:`MAX_DEPTH`. The one scanner
    of both readings (:func:`_balanced_spans`, :func:`_outer_values`)."""
    stack: list[str] = []
    in_string = False
    escaped = False
    stop = min(len(text), start + limit)
    for end in range(start, stop):
        ch = text[end]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in _CLOSE:
            if len(stack) >= MAX_DEPTH:
                return None, end + 1 - start
            stack.append(_CLOSE[ch])
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None, end + 1 - start
            if not stack:
                return end + 1, end + 1 - start
    return None, stop - start


def _balanced_spans(text: str) -> Iterator[str]:
    """Every balanced bracket span, in order of its opening bracket (string-aware), at
    most :data:`MAX_DEPTH` deep, within the scan's budget (:data:`SCAN_STEPS_PER_CHAR`)."""
    budget = min(SCAN_STEPS_PER_CHAR * len(text) + SCAN_STEPS_BASE, SCAN_STEPS_MAX)
    for start, opener in enumerate(text):
        if opener not in _CLOSE:
            continue
        if budget <= 0:
            return
        end, read = _value_end(text, start, budget)
        budget -= read
        if end is not None:
            yield text[start:end]


def _candidates(text: str) -> Iterator[str]:
    yield text.strip()
    for fence in _FENCE.finditer(text):
        yield fence.group(2).strip()
    yield from _balanced_spans(text)


def _outer_values(text: str) -> tuple[list[tuple[int, int]], int]:
    """The outermost bracket values of ``text`` that close, as ``(start, end)`` in order,
    and where the first that does not close opens (``len(text)`` when every one closes).

    One pass, string-aware inside a value: everything after a value that never closes
    (or closes with the wrong bracket, or nests deeper than :data:`MAX_DEPTH`) lies inside
    it, so no value is looked for there.
    """
    spans: list[tuple[int, int]] = []
    i = 0
    n = len(text)
    while i < n:
        if text[i] not in _CLOSE:
            i += 1
            continue
        end, _ = _value_end(text, i, n)
        if end is None:
            return spans, i
        spans.append((i, end))
        i = end
    return spans, n


def _cut_candidates(text: str) -> Iterator[str]:
    """The candidates of an answer cut short: the whole text, then the code fences that
    close and the outermost values that close, all before the first outermost value that
    does not (whose inner values and fences are pieces of it, not the answer)."""
    yield text.strip()
    spans, cut = _outer_values(text)
    for fence in _FENCE.finditer(text):
        if fence.end() > cut:
            break
        yield fence.group(2).strip()
    for start, end in spans:
        yield text[start:end]


def _parse(text: str, unique_keys: bool) -> tuple[bool, Any]:
    """``text`` parsed (``(False, None)`` when it is not JSON); with ``unique_keys``, a
    key written twice in one object raises :class:`DuplicateKeyError`."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # nested deeper than the parser goes: not an answer
        return False, None
    if not unique_keys:
        return True, value
    try:
        check_unique_keys(value, text)
    except JsonTextError as exc:
        raise DuplicateKeyError(exc.field) from None
    except RecursionError:
        return False, None
    return True, value


def _loads(candidate: str, unique_keys: bool) -> tuple[bool, Any]:
    ok, value = _parse(candidate, unique_keys)
    if ok:
        return ok, value
    stripped = strip_trailing_commas(candidate)
    if stripped == candidate:  # no trailing comma: parsed already
        return False, None
    return _parse(stripped, unique_keys)


def extract_json(
    text: str, *, want_object: bool = True, unique_keys: bool = True, cut_short: bool = False
) -> Any:
    """The first JSON value in ``text`` (an object when ``want_object``); with
    ``cut_short`` (an answer the server ended early), only the whole text, a code fence
    that closes or an outermost value that closes, never a value or fence inside an
    outermost value that does not close (a piece of an incomplete value).

    Raises :class:`JSONExtractError` when there is none, and (``unique_keys``)
    :class:`DuplicateKeyError` when the first candidate that parses holds a key twice in
    one object.

    >>> extract_json('Sure! ```json\\n{"a": [1, 2,],}\\n``` hope it helps')
    {'a': [1, 2]}
    """
    seen: set[str] = set()
    for candidate in _cut_candidates(text) if cut_short else _candidates(text):
        if not candidate or candidate in seen:
            continue
        seen.add(candidate)
        ok, value = _loads(candidate, unique_keys)
        if not ok:
            continue
        if want_object and not isinstance(value, dict):
            continue
        return value
    kind = "object" if want_object else "value"
    snippet = text.strip()[:80]
    raise JSONExtractError(f"no JSON {kind} found in the answer (starts {snippet!r})")
