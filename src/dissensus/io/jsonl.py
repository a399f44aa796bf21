"""Streaming JSONL input with per-line rejects.

Every command that reads records line by line goes through :func:`read_models`:
it yields either a validated model or a :class:`Reject` naming the file, the line
number (1-based) and the field that failed, so that good records are processed and
bad ones reported, and memory never grows with the number of lines.

Choices: blank lines are skipped silently (they are not records); a line that is
valid JSON but not an object is rejected with field ``<root>``; files are read with
``surrogateescape`` so that a line that is not valid UTF-8 is rejected on its own
(field ``<encoding>``) and the lines around it are still read. A UTF-8 byte order mark
at the start of the first line is skipped; one that begins a later line (files joined
with ``cat``, each saved with a mark) rejects that line saying so, not with the parser's
advice to "decode using utf-8-sig". A file (or standard input) that is no UTF-8
text at all -- UTF-16 or UTF-32, gzip, bzip2, xz or zstd output, a zip archive, told by
its first bytes (:func:`not_text`) -- is one error naming it and what it is (exit 2,
before anything is read), not a reject per line none of which says why. A line nested deeper than
:data:`MAX_DEPTH` arrays/objects is rejected (field ``<depth>``) before any model sees
it, so no reader can overflow the stack. Non-finite numbers (``NaN``, ``Infinity``,
``1e999``) and lone surrogate escapes (``"\\ud800"``) are rejected naming the path of
the value as the field, whatever the model: JSON cannot carry the first, UTF-8 cannot
encode the second; integers of more than 4,300 digits are rejected with field
``<json>``; a key written twice in one object is rejected naming its path
(``outputs.0.decision``, ``duplicate key``), whichever tier would have parsed the line:
readers differ on which value wins. These checks are :mod:`dissensus.io.jsontext`'s,
which JSON files are read with too. A panel or vote case over the bounds of
:mod:`dissensus.io.limits` (agents per panel, characters per text field) is rejected
naming the field, whichever tier parsed it.

Fast path: a line for :class:`~dissensus.types.Panel` or
:class:`~dissensus.types.VoteCase` is first parsed and validated in one step by
pydantic (``model_validate_json``: the JSON is parsed in Rust, no intermediate dicts),
about half the CPU of the reference path (``json.loads``, the checks above, then
``model_validate``) on five-agent panels. It is taken only when the line holds no
undecodable bytes, no lone surrogate escape and no more than :data:`MAX_DEPTH` opening
brackets, and only for those models, because they refuse non-finite numbers wherever
a number can sit (confidences, value profiles, ``meta`` and extra fields are checked),
so the fast path accepts exactly the lines the reference path accepts, with the same
values (property-tested against the reference). Whenever it fails, for whatever
reason, the line goes through the reference path, which produces the reject: file,
line, field and message are always the reference's.

A panel line first meets a native-only tier (:mod:`dissensus.io.wire`): the same models
built by a schema without Python validators, about half the CPU of
``Panel.model_validate_json`` on five-agent panels. It only accepts; anything it does
not accept goes on to ``model_validate_json`` and then to the reference path. The depth
check counts brackets only when the accepted panel holds objects or arrays in ``meta``
or extra fields (its own fields nest at most 5 deep), and the surrogate-escape check
only runs on lines holding a backslash. A line a fast tier accepts is parsed a second
time only when it may hold a key twice: the keys of the models it built
(:func:`model_keys`: their set fields, and the keys of their dicts) are compared with
the colons of the text, then with its quotes followed by a colon
(:func:`~dissensus.io.jsontext.may_repeat_key`); only a line with more of both (a key
twice, or a string holding ``\\":`` and another colon) is parsed again with the
check, and goes to the reference path when a key repeats. On 1.9 kB five-agent panel
lines the counts cost about 3 µs (a quarter of the native tier's parse), 6 µs when the
texts hold colons; the second parse, when it runs, about as much as the native tier.

Choices this module makes on output: :func:`write_jsonl_line` (every JSONL line a
command writes: ``decide``'s records, ``runs export``, ``--rejects`` files, ``runs
list``) writes DEL, the C1 controls and the bidi and invisible characters of
:data:`~dissensus.quoting.INVISIBLE` as ``\\u`` escapes
(:func:`~dissensus.quoting.json_shown`): JSON's own escaping stops at U+001F, and an
agent's U+009B (a terminal's CSI) or U+202E must not reach the terminal or the editor
of whoever reads the output. The line is still valid JSON with the same value; it is
searched first and copied only when it holds one (an ASCII line costs two scans in C).
The journal's text, which is hashed, is :mod:`dissensus.store.canonical`'s, untouched.

A :class:`Reject` keeps the line (or, for a line over the bound, its start) as valid
text: bytes that are not UTF-8, which the reader holds as lone surrogates, are U+FFFD
in it, so every reject can be written to ``--rejects`` and the journal (the start of an
overlong line holding such bytes was a traceback there).

A line holding more JSON values than any record within the bounds of
:mod:`dissensus.io.limits` may (:func:`crowded`: counted on its text, in C) skips the
fast tiers and goes straight to the reference path, which rejects it: a 6 MB line of
``[]`` in ``meta`` was parsed by two tiers that then gave it up, and walked three times
(depth, keys, values), about 9 s of CPU to refuse; it is now parsed once and walked
twice (the JSON value for its depth and keys, the record for its sizes), about 1 s.

``dissensus route``, which only reads panels, puts one more tier in front:
:func:`dissensus.io.views.read_panel_views` decodes a line with msgspec into a
read-only view, and hands every line it does not accept to :func:`parse_line`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, TypeVar

from pydantic import BaseModel, ValidationError, field_validator

from dissensus.io.jsontext import (
    DEPTH_FIELD,
    JSON_FIELD,
    MAX_DEPTH,
    JsonTextError,
    check_json_value,
    check_unique_keys,
    count_keys,
    json_depth,
    json_shape,
    opening_brackets,
    parse_json,
    repeats_key,
    text_values,
)
from dissensus.io.limits import MAX_LINE_CHARS, MAX_PANEL_VALUES, check_record
from dissensus.io.wire import validate_panel_json
from dissensus.quoting import json_shown, message_line
from dissensus.types import Panel, VoteCase, field_path, lone_surrogate_at

__all__ = [
    "HEAD_BYTES",
    "MAX_DEPTH",
    "Reject",
    "RejectSink",
    "blank_line",
    "bounded",
    "bounded_lines",
    "check_text_file",
    "crowded",
    "json_depth",
    "model_keys",
    "not_text",
    "open_text",
    "overlong",
    "parse_line",
    "parse_line_text",
    "read_models",
    "read_numbered_models",
    "write_jsonl_line",
]

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A surrogate escape (maybe lone): such lines take the reference path."""

_VALIDATE_JSON: frozenset[type[BaseModel]] = frozenset({Panel, VoteCase})
"""Models whose own validation refuses every non-finite number (see the fast path)."""

_BOUNDED = (Panel, VoteCase)
"""Models (and their subclasses) whose records are held to :mod:`dissensus.io.limits`."""

M = TypeVar("M", bound=BaseModel)
R = TypeVar("R")


class Reject(BaseModel):
    """A record that could not be accepted, with where and why."""

    file: str
    line: int
    field: str
    message: str
    raw: str = ""
    """The line (or its start), as valid text: bytes that are not UTF-8 (which the
    reader keeps as lone surrogates) are U+FFFD, so a reject can always be written."""

    @field_validator("raw")
    @classmethod
    def _text(cls, value: str) -> str:
        if lone_surrogate_at(value) is None:
            return value
        try:
            data = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:  # a surrogate no undecodable byte stands for
            data = value.encode("utf-8", "replace")
        return data.decode("utf-8", "replace")

    def describe(self) -> str:
        return f"{self.file}:{self.line}: field {self.field!r}: {self.message}"


@contextmanager
def open_text(path: str | Path) -> Iterator[IO[str]]:
    """Open ``path`` for reading, ``-`` meaning standard input, both with universal
    newlines (``\\n``, ``\\r\\n`` and a lone ``\\r`` end a line: a file's lines and
    the same bytes piped in are the same lines). Either is an
    :class:`~dissensus.errors.InputError` naming it when its first bytes say it is no
    UTF-8 text at all (:func:`not_text`: UTF-16, gzip, ...)."""
    if str(path) == "-":
        stdin = sys.stdin
        why = not_text(_head(stdin))
        if why is not None:
            from dissensus.errors import InputError

            raise InputError(f"standard input: {why}")
        if hasattr(stdin, "reconfigure"):
            stdin.reconfigure(encoding="utf-8", errors="surrogateescape", newline=None)
        yield stdin
        return
    with open(path, encoding="utf-8", errors="surrogateescape") as handle:
        why = not_text(_head(handle))
        if why is not None:
            from dissensus.errors import InputError

            raise InputError(f"{path}: {why}")
        yield handle


_UTF16 = "it is UTF-16; save it as UTF-8"
_UTF32 = "it is UTF-32; save it as UTF-8"
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (
        b"\x1f\x8b\x08",
        "it is gzip-compressed; decompress it first (gzip -dc FILE | dissensus ... -)",
    ),
    (b"\xfd7zXZ\x00", "it is xz-compressed; decompress it first (xz -dc)"),
    (b"\x28\xb5\x2f\xfd", "it is zstd-compressed; decompress it first (zstd -dc)"),
    (b"PK\x03\x04", "it is a zip archive; extract the file first"),
)
"""The first bytes of compressed files and archives, and what they are."""

HEAD_BYTES = 6
"""Bytes of a file's beginning :func:`not_text` looks at."""


def not_text(head: bytes) -> str | None:
    """Why a file beginning with ``head`` (its first :data:`HEAD_BYTES` bytes, or all of
    a shorter file) is not UTF-8 JSONL, or None.

    UTF-32 and UTF-16 are told by their byte order mark followed by a character of
    ASCII (a NUL byte in its code unit: a JSONL record begins with ``{``, white space
    before it), or by ``{`` and a NUL byte without one; compressed files and archives
    by their magic numbers. A file that is none of these is read line by line, a line
    that is not UTF-8 rejected on its own (a first line that begins with the bytes of a
    byte order mark but holds no NUL after them is such a line). Read line by line, a
    UTF-16 or gzip file was a reject per line, none of them saying why.
    """
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return f"not UTF-8 text ({_UTF32})"
    if head.startswith(b"\xff\xfe") and (len(head) == 2 or head[3:4] == b"\x00"):
        return f"not UTF-8 text ({_UTF16})"
    if head.startswith(b"\xfe\xff") and (len(head) == 2 or head[2:3] == b"\x00"):
        return f"not UTF-8 text ({_UTF16})"
    if head.startswith((b"{\x00", b"\x00{")):
        return f"not UTF-8 text ({_UTF16})"
    if head.startswith(b"BZh") and head[3:4].isdigit() and head[4:6] in (b"1A", b"\x17r"):
        return "not UTF-8 text (it is bzip2-compressed; decompress it first (bzip2 -dc))"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return f"not UTF-8 text ({what})"
    return None


def check_text_file(path: str | Path) -> None:
    """Raise :class:`~dissensus.errors.InputError` naming ``path`` when the file begins as
    no UTF-8 text does (:func:`not_text`); an unreadable file is left to its reader."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return
    why = not_text(head)
    if why is not None:
        from dissensus.errors import InputError

        raise InputError(f"{path}: {why}")


def _head(handle: IO[str]) -> bytes:
    """The first bytes a text stream not yet read holds, none of them consumed: peeked
    (a pipe, a file), or read and sought back (a seekable buffer); ``b""`` when neither
    can be."""
    buffer = getattr(handle, "buffer", None)
    try:
        peek = getattr(buffer, "peek", None)
        if callable(peek):
            return bytes(peek(HEAD_BYTES)[:HEAD_BYTES])
        if buffer is not None and buffer.seekable():
            where = buffer.tell()
            head = bytes(buffer.read(HEAD_BYTES))
            buffer.seek(where)
            return head
    except (OSError, ValueError):  # closed, or not a stream: the reader finds out
        pass
    return b""


def _field_of(error: ValidationError) -> tuple[str, str]:
    first = error.errors()[0]
    loc = field_path(first["loc"]) or "<root>"
    msg = first["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return loc, msg


def line_text(text: str, line: int) -> str:
    """The JSON text of line ``line``: its line end removed, and a UTF-8 byte order mark
    at the start of the first line."""
    raw = text.rstrip("\r\n")
    if line == 1 and raw.startswith("\ufeff"):
        raw = raw[1:]
    return raw


def blank_line(text: str, line: int) -> bool:
    """Whether line ``line`` holds nothing to read: only white space (a UTF-8 byte order
    mark before it, on the first line, included: a file holding only a BOM is empty)."""
    if line == 1 and text.startswith("\ufeff"):
        text = text[1:]
    return not text or text.isspace()  # as ``not text.strip()``, without copying the line


def fast_tier_safe(raw: str) -> bool:
    """Whether a fast tier may parse ``raw``: no undecodable byte, no surrogate escape."""
    return not lone_surrogate_at(raw) is not None and (
        # A backslash first (one memchr): most lines hold no escape at all.
        "\\" not in raw or "\\u" not in raw or _SURROGATE_ESCAPE.search(raw) is None
    )


def parse_line(model: type[M], text: str, *, file: str, line: int) -> M | Reject:
    """Parse one JSONL line into ``model`` or a :class:`Reject`; a panel or vote case over
    the bounds of :mod:`dissensus.io.limits` is a reject naming the field."""
    raw = line_text(text, line)
    if len(raw) > MAX_LINE_CHARS:
        return overlong(raw, file=file, line=line)
    return parse_line_text(model, raw, file=file, line=line, crowd=crowded(raw))


def parse_line_text(model: type[M], raw: str, *, file: str, line: int, crowd: bool) -> M | Reject:
    """:func:`parse_line` of a line's text ``raw`` (:func:`line_text`, at most
    :data:`~dissensus.io.limits.MAX_LINE_CHARS` long) whose :func:`crowded` the caller
    has already answered (``crowd``), so a long line is not counted twice."""
    if crowd:
        parsed = _parse_reference(model, raw, file=file, line=line)
    else:
        parsed = _parse_tiers(model, raw, file=file, line=line)
    # A command's own reading of a panel or a vote case (``vote`` reads a subclass that
    # strips answers) is bounded as the model itself is.
    if issubclass(model, _BOUNDED) and not isinstance(parsed, Reject):
        return bounded(parsed, raw, file=file, line=line)
    return parsed


CROWDED_VALUES = MAX_PANEL_VALUES
"""A line holding more JSON values than this (counted on its text) skips the fast tiers."""


def crowded(raw: str) -> bool:
    """Whether the line ``raw`` holds more than :data:`CROWDED_VALUES` JSON values
    (:func:`~dissensus.io.jsontext.text_values`): far more than any record within the
    bounds of :mod:`dissensus.io.limits` needs, so it goes straight to the reference path,
    which words its reject, instead of being parsed and walked by the fast tiers first.
    Every value takes a character, so a shorter line is not counted; nor is one whose
    commas and opening brackets, strings included, are too few: taking the strings out
    (as :func:`~dissensus.io.jsontext.text_values` does, copying the line) only removes
    commas and brackets, so ``1 + commas + opening brackets`` is never below its count,
    and a long line of text (a panel's long reasoning) is looked at in three passes in C
    without a copy."""
    return (
        len(raw) > CROWDED_VALUES
        and 1 + raw.count(",") + opening_brackets(raw) > CROWDED_VALUES
        and text_values(raw) > CROWDED_VALUES
    )


def overlong(raw: str, *, file: str, line: int) -> Reject:
    """The reject of a line longer than :data:`~dissensus.io.limits.MAX_LINE_CHARS`
    (never parsed: see :mod:`dissensus.io.limits`)."""
    return Reject(
        file=file,
        line=line,
        field="<line>",
        message=f"over {MAX_LINE_CHARS} characters; at most {MAX_LINE_CHARS} per line",
        raw=raw[:200],
    )


def bounded_lines(handle: IO[str]) -> Iterator[str]:
    """The lines of ``handle``, as iterating it gives them, except that a line longer than
    :data:`~dissensus.io.limits.MAX_LINE_CHARS` is read no further than one character
    past the bound (the rest is skipped, the line still counts as one): a file of one
    endless line never fills the memory. :func:`parse_line` rejects what it yields then."""
    readline = handle.readline
    limit = MAX_LINE_CHARS + 1
    while text := readline(limit):
        if len(text) == limit and not text.endswith(("\n", "\r")):
            while (rest := readline(limit)) and not rest.endswith(("\n", "\r")):
                pass
        yield text


def bounded(record: R, raw: str, *, file: str, line: int) -> R | Reject:
    """``record`` (parsed from ``raw``), or a :class:`Reject` when it is over a bound."""
    over = check_record(record, len(raw))
    if over is None:
        return record
    return Reject(file=file, line=line, field=over.field, message=over.message, raw=raw[:200])


def _parse_tiers(model: type[M], raw: str, *, file: str, line: int) -> M | Reject:
    if model in _VALIDATE_JSON and fast_tier_safe(raw):
        record = _parse_fast(model, raw)
        if record is not None and not repeats_key(raw, model_keys(record)):
            return record
    return _parse_reference(model, raw, file=file, line=line)


def _parse_fast(model: type[M], raw: str) -> M | None:
    """``raw`` as ``model`` by the first fast tier that accepts it, or None (the reference
    path decides, and words the reject)."""
    if model is Panel:
        panel = validate_panel_json(raw)
        if panel is not None and (_shallow(panel) or opening_brackets(raw) <= MAX_DEPTH):
            return panel  # type: ignore[return-value]
    if opening_brackets(raw) <= MAX_DEPTH:
        try:
            return model.model_validate_json(raw)
        except (ValidationError, ValueError, RecursionError):
            pass
    return None


def model_keys(record: BaseModel) -> int:
    """Keys of the JSON objects ``record`` was validated from, as parsed (distinct in
    each object), or fewer: what :func:`~dissensus.io.jsontext.repeats_key` compares
    with the keys written.

    A model's set fields are the keys of its object (extra fields included; the models
    have no aliases), a dict's keys are its object's. The nested models of a
    :class:`Panel` and a :class:`VoteCase` are counted; a field holding objects that is
    not (one added to a model later, another model's) only makes the count fall short:
    the line is then parsed again to look for a repeated key, never accepted unchecked.
    """
    count = len(record.__pydantic_fields_set__) + _extra_keys(record)
    if isinstance(record, Panel):
        count += count_keys(record.meta)
        for out in record.outputs:
            count += len(out.__pydantic_fields_set__) + _extra_keys(out)
            if out.values:
                count += len(out.values)
            if out.evidence:
                for item in out.evidence:
                    count += len(item.__pydantic_fields_set__)
            if out.reask is not None:
                count += len(out.reask.__pydantic_fields_set__)
    elif isinstance(record, VoteCase):
        count += count_keys(record.meta)
        for vote in record.votes:
            count += len(vote.__pydantic_fields_set__)
    return count


def _extra_keys(model: BaseModel) -> int:
    """Keys of the objects in ``model``'s extra fields (their names are set fields)."""
    extra = model.__pydantic_extra__
    return count_keys(extra) - len(extra) if extra else 0


def _shallow(panel: Panel) -> bool:
    """True when ``panel`` is nested at most 5 deep (no container in ``meta`` or extras).

    A panel's own fields nest at most 5 deep (``outputs[i].evidence[j]``); only
    ``meta`` and extra fields can nest deeper, so when they hold no object or array the
    line is within :data:`MAX_DEPTH` without counting its brackets.
    """
    if panel.__pydantic_extra__:
        return False
    for value in panel.meta.values():
        if value.__class__ is dict or value.__class__ is list:
            return False
    for output in panel.outputs:  # noqa: SIM110 (a loop: no generator per line)
        if output.__pydantic_extra__:
            return False
    return True


_LATE_BOM = (
    "invalid JSON: the line begins with a byte order mark (U+FEFF), skipped only before "
    "the first line (files joined with cat? remove the mark)"
)


def _parse_reference(model: type[M], raw: str, *, file: str, line: int) -> M | Reject:
    """The reference path of :func:`parse_line` (``raw``: line end and BOM removed)."""
    if lone_surrogate_at(raw) is not None:  # raw made valid text by the Reject
        return Reject(
            file=file, line=line, field="<encoding>", message="line is not valid UTF-8", raw=raw
        )
    if raw.startswith("\ufeff"):  # the parser's own words: "decode using utf-8-sig"
        return Reject(file=file, line=line, field=JSON_FIELD, message=_LATE_BOM, raw=raw)
    try:
        data = parse_json(raw)
        if not isinstance(data, dict):
            return Reject(
                file=file, line=line, field="<root>", message="expected a JSON object", raw=raw
            )
        shape = json_shape(data)  # one walk for the depth and the keys
        check_json_value(data, raw, shape=shape)
        check_unique_keys(data, raw, keys=shape.keys)
    except JsonTextError as exc:
        # Text too deep, or holding a too long integer, can be huge: only its start is kept.
        short = exc.field == DEPTH_FIELD or (exc.field == JSON_FIELD and exc.line is None)
        keep = raw[:200] if short else raw
        return Reject(file=file, line=line, field=exc.field, message=exc.message, raw=keep)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        loc, msg = _field_of(exc)
        return Reject(file=file, line=line, field=loc, message=msg, raw=raw)


def read_models(model: type[M], lines: Iterable[str], *, file: str = "-") -> Iterator[M | Reject]:
    """Yield a model or a :class:`Reject` for every non-blank line, lazily (a file's lines
    read no further than :data:`~dissensus.io.limits.MAX_LINE_CHARS` each:
    :func:`bounded_lines`)."""
    for _, _, item in read_numbered_models(model, lines, file=file):
        yield item


def read_numbered_models(
    model: type[M], lines: Iterable[str], *, file: str = "-"
) -> Iterator[tuple[int, str, M | Reject]]:
    """:func:`read_models` with each item's line number and text (line end removed): what
    a caller rejecting a valid record for a reason of its own names (blank lines are
    skipped, so counting the items would fall behind the lines)."""
    if hasattr(lines, "readline"):
        lines = bounded_lines(lines)  # type: ignore[arg-type]
    for number, text in enumerate(lines, start=1):
        if blank_line(text, number):
            continue
        yield number, text, parse_line(model, text, file=file, line=number)


def write_jsonl_line(handle: IO[str], record: BaseModel | dict[str, object]) -> None:
    """Write one JSON record followed by a newline, every character a terminal acts on
    or a reader cannot see escaped (:func:`~dissensus.quoting.json_shown`). A failed
    write to standard output (a full disk) is an
    :class:`~dissensus.io.atomic.OutputWriteError` naming it; a file's handle from
    :func:`~dissensus.io.atomic.atomic_output` names its file itself."""
    text = (
        record.model_dump_json()
        if isinstance(record, BaseModel)
        else json.dumps(record, ensure_ascii=False, default=str)
    )
    try:
        handle.write(json_shown(text) + "\n")
    except BrokenPipeError:
        raise
    except OSError as exc:
        from dissensus.io.atomic import is_stdout, stdout_failed

        if is_stdout(handle):
            raise stdout_failed(exc) from None
        raise


class RejectSink:
    """Collects rejects: reports each on stderr and optionally writes it to a file."""

    def __init__(self, path: str | Path | None = None, *, stderr: IO[str] | None = None) -> None:
        self.count = 0
        self._stderr = stderr if stderr is not None else sys.stderr
        from dissensus.io.atomic import open_output

        # A failed write names the file (OutputWriteError, exit 1), never an OSError.
        self._handle: IO[str] | None = open_output(str(path), what="rejects file") if path else None

    def add(self, reject: Reject) -> None:
        self.count += 1
        # The file's name and the message are shown as one line, escaped: a name with a
        # newline or an escape sequence must neither split the line nor reach the terminal.
        self._stderr.write(f"rejected {message_line(reject.describe())}\n")
        if self._handle is not None:
            write_jsonl_line(self._handle, reject)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> RejectSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
