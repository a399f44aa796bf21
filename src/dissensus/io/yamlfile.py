"""The one YAML loader of every configuration file: safe, bounded, strict about keys.

Problem, task, policy, rules, scripted-model and calibration files are all read through
:func:`load_yaml_file` (or :func:`load_yaml_text`). Choices this module makes:

* Only plain data (PyYAML's safe loader: no Python objects).
* Anchors and aliases are allowed, but the document they expand to may hold at most
  :data:`MAX_NODES` nodes: an alias bomb ("billion laughs") is refused before it is
  built, instead of growing memory without bound. A long text (over a million
  characters) has its nodes counted while it is parsed, event by event, before the
  document is built: a 50 MB file of four million short entries took four minutes and
  5 GB of memory to be refused after it was built whole; it is refused in seconds.
* A key written twice in one mapping is an error naming the key, its path (the
  field ``options.0.text``) and the line of its second copy (YAML
  forbids it; PyYAML would let the last one silently win, so a doubled ``floor`` could
  change a guarantee).
* Numbers must be finite: ``.nan`` or ``.inf`` anywhere is an error naming the field
  and the line it is written on ("must be a finite number ... (line 7)"), as is text
  that is not valid Unicode. The line is looked up by the field's keys themselves, so a
  key holding a ``.`` (``a.b: .nan``) is not read as two; a duplicate key inside an
  anchored mapping is named by the path where that mapping is written, not by an alias
  that repeats it.
* Files must be UTF-8 (a UTF-8 byte order mark is skipped). UTF-16 or any other
  encoding is one error line naming the file, never a traceback.
* **Files are bounded.** A configuration file must be a regular file of at most
  :data:`~dissensus.files.MAX_FILE_BYTES` (64 MiB: generous for policies, rules and
  scripts, and for the data-like calibration and acceptance files the JSON loader reads
  through :func:`read_text_file` too); :func:`dissensus.files.read_file_bytes` reads it
  (a device, a named pipe, a directory or a larger file is one error line naming the
  file, exit 2).
* An integer of more digits than Python converts (``sys.get_int_max_str_digits()``,
  4,300 by default) is an error naming its line, as the JSON loader refuses one.
* A value its explicit tag cannot read (``!!bool maybe``, ``!!timestamp soon``,
  ``!!int x``, ``!!set [1]``) is an error naming its line, the tag and the value: the
  constructors' own exceptions (a ``KeyError``, an ``AttributeError``, a ``TypeError``)
  were tracebacks, and ``!!int x`` was said to have more than 4,300 digits.
* :func:`yaml_line_of` finds the line a dotted field is written on, so an error a
  reader of the data raises (a policy's field out of range) can name it too.
* A character YAML does not allow in a document (a NUL byte, another control
  character) is an error naming its line, counted as YAML counts lines, and the
  character (``invalid YAML at line 2: control characters are not allowed
  (U+0000)``): YAML's reader refuses it before parsing, with no line of its own.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

from dissensus.errors import ConfigError
from dissensus.files import MAX_FILE_BYTES, read_file_bytes
from dissensus.types import field_path, field_segment, unrepresentable_at

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "load_yaml_file",
    "load_yaml_text",
    "read_file_bytes",
    "read_text_file",
    "with_field_line",
    "yaml_line_of",
]


MAX_NODES = 1_000_000
"""Most nodes a YAML document may expand to once aliases are followed."""


_BASE: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE):  # type: ignore[misc]
    """Safe loader (the C parser when built) refusing duplicate keys and alias bombs."""

    def construct_document(self, node: yaml.Node) -> Any:
        _check_size(node)
        try:
            return super().construct_document(node)
        except _UNCONVERTED as exc:  # a safeguard: construct_object names the line first
            raise _BadValue(f"invalid YAML: {_said(exc)}") from None

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except _UNCONVERTED as exc:
            # A tagged value its tag cannot read (``!!bool maybe``, ``!!timestamp soon``):
            # the constructors' own exceptions, not YAML errors, were tracebacks.
            line = node.start_mark.line + 1
            value = f" {_shown(node.value)}" if isinstance(node, yaml.ScalarNode) else ""
            # A ValueError says why (``month must be in 1..12``); the others are the
            # constructors' internals (``'NoneType' object has no attribute 'groupdict'``).
            why = _said(exc) if isinstance(exc, ValueError) else ""
            why = "" if why.startswith("could not convert") else f" ({why})" if why else ""
            raise _BadValue(
                f"invalid YAML at line {line}: {node.tag.rpartition(':')[2] or node.tag}"
                f"{value} cannot be read as one{why}"
            ) from None

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        if not isinstance(node, yaml.MappingNode):  # ``!!set [1]``: the base words it
            return super().construct_mapping(node, deep=deep)
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # unhashable keys fail in the base constructor, with its message
            if duplicate:
                raise _Duplicate(key, key_node.start_mark.line, key_node.start_mark.column)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        try:
            value: int = super().construct_yaml_int(node)
        except ValueError:
            line = node.start_mark.line + 1
            digits = str(node.value).replace("_", "").lstrip("+-")
            if digits.isdecimal() and len(digits) > sys.get_int_max_str_digits():
                raise _TooLarge(
                    f"an integer of more than {sys.get_int_max_str_digits()} digits at line {line}"
                ) from None
            # ``!!int x``: no integer at all (it was said to be one of too many digits).
            raise _BadValue(
                f"invalid YAML at line {line}: {_shown(node.value)} is not an integer"
            ) from None
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


class _Duplicate(Exception):
    """A key written twice in one mapping: the key and where its second copy starts."""

    def __init__(self, key: Any, line: int, column: int) -> None:
        super().__init__(key, line, column)
        self.key, self.line, self.column = key, line, column


def _path_of_key(text: str, line: int, column: int) -> str | None:
    """The dotted path (``options.0.text``) of the mapping key written at ``line`` and
    ``column`` (0-based marks) of the YAML ``text``; ``None`` when it cannot be told.
    Walks the composed nodes in document order, each node once (aliases not expanded):
    a node an alias repeats is named where it is first written (an anchor comes before
    its aliases), never by a later alias."""
    try:
        root: Any = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[str, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for k, _ in node.value:
                name = str(k.value) if isinstance(k, yaml.ScalarNode) else "?"
                if k.start_mark.line == line and k.start_mark.column == column:
                    return field_path((*path, name))
            # pushed reversed, so the first written is popped (walked) first
            stack.extend(
                (v, (*path, str(k.value) if isinstance(k, yaml.ScalarNode) else "?"))
                for k, v in reversed(node.value)
            )
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((v, (*path, str(i))) for i, v in reversed(list(enumerate(node.value))))
    return None


class _TooLarge(Exception):
    pass


class _BadValue(Exception):
    """A value its tag's constructor cannot read, with its line."""


_UNCONVERTED = (ValueError, TypeError, KeyError, AttributeError, IndexError, OverflowError)
"""What PyYAML's constructors raise on a value they cannot read (their own bugs' kinds:
``!!bool maybe`` is a ``KeyError``, ``!!timestamp soon`` an ``AttributeError``)."""


def _shown(value: object) -> str:
    """A scalar's text as a message quotes it: its ``repr``, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:80]}... ({len(text)} characters)"


def _said(exc: BaseException) -> str:
    """An exception's message on one line (its type when it says nothing)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _check_size(root: yaml.Node) -> None:
    """Refuse a document whose alias-expanded size exceeds :data:`MAX_NODES`."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk; a node shared through aliases is sized once.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            total = 1
            for child in _children(node):
                total += sizes.get(id(child), 1)
                if total > MAX_NODES:
                    raise _TooLarge(
                        f"the document expands to more than {MAX_NODES:,} nodes (alias bomb?)"
                    )
            sizes[key] = total
            continue
        if key in on_path:
            raise _TooLarge("an alias refers to itself (a recursive document)")
        if key in sizes:
            continue
        on_path.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in on_path:
                raise _TooLarge("an alias refers to itself (a recursive document)")
            if id(child) not in sizes:
                stack.append((child, False))


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


_COUNT_FIRST = 1_000_000
"""Texts longer than this many characters have their nodes counted as they are parsed
(:func:`_count_nodes`) before the document is built: a shorter one cannot hold many more
than :data:`MAX_NODES` nodes, so building it first costs little."""

_NODE_EVENTS = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent)


def _count_nodes(text: str) -> None:
    """Refuse ``text`` once its parse has met more than :data:`MAX_NODES` nodes (aliases
    not followed: :func:`_check_size` counts them on the built document), reading events
    one at a time, so a large document of plain nodes is refused without first being
    built whole in memory."""
    count = 0
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, _NODE_EVENTS):
            count += 1
            if count > MAX_NODES:
                raise _TooLarge(f"the document has more than {MAX_NODES:,} nodes")


def read_text_file(path: str | Path, *, what: str = "file") -> str:
    """The text of a UTF-8 file; any failure is one :class:`ConfigError` naming the file."""
    name = str(path)
    data = read_file_bytes(path, what=what)
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ConfigError(f"{what} is not UTF-8 text (it is UTF-16); save it as UTF-8", file=name)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{what} is not UTF-8 text (byte {exc.start}: {exc.reason})", file=name
        ) from None


def load_yaml_text(text: str, *, file: str | None = None) -> Any:
    """Parse YAML ``text`` (see the module's choices); errors name ``file`` and the line."""
    try:
        if len(text) > _COUNT_FIRST:
            _count_nodes(text)
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader subclass
    except _Duplicate as exc:
        raise ConfigError(
            f"duplicate key {exc.key!r}",
            file=file,
            field=_path_of_key(text, exc.line, exc.column),
            line=exc.line + 1,
        ) from None
    except (_TooLarge, _BadValue) as exc:
        raise ConfigError(str(exc), file=file) from None
    except RecursionError:
        raise ConfigError("the document is nested too deeply", file=file) from None
    except ValueError as exc:  # a value the constructors cannot convert (a safeguard)
        raise ConfigError(f"invalid YAML: {' '.join(str(exc).split())}", file=file) from None
    except yaml.reader.ReaderError as exc:  # a character YAML does not allow (a NUL)
        raise ConfigError(_refused_character(text, exc), file=file) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None)
        raise ConfigError(
            f"invalid YAML{at}" + (f": {problem}" if problem else ""), file=file
        ) from None
    found = unrepresentable_at(data)
    if found is not None:
        parts, message = found
        if not parts:
            raise ConfigError(message, file=file)
        line = yaml_line_of(text, tuple(str(p) for p in parts))
        raise ConfigError(message, file=file, field=field_path(parts), line=line)
    return data


def yaml_line_of(text: str, field: str | tuple[str, ...]) -> int | None:
    """The line (1-based) a dotted ``field`` (``reading.theta_a``, ``panel.members.0.model``)
    is written on in the YAML ``text``: its key's line, or its nearest written parent's
    when the field itself is not written (a missing key); ``None`` when none is, or the
    text is no YAML mapping. Reads the document's nodes only (aliases are not expanded).
    A tuple names the field's keys and indexes themselves, so a key holding a ``.``
    (``("a.b",)``) is one key, not split in two. A key cut as errors show a long one
    (``xxx…``) names the written key it was cut from."""
    try:
        node: Any = yaml.compose(text, Loader=_Loader)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    line: int | None = None
    for part in field.split(".") if isinstance(field, str) else field:
        if isinstance(node, yaml.MappingNode):
            found = next(
                (
                    (k, v)
                    for k, v in node.value
                    if isinstance(k, yaml.ScalarNode) and _names(part, k.value)
                ),
                None,
            )
            if found is None:
                break
            line = found[0].start_mark.line + 1
            node = found[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _names(part: str, key: str) -> bool:
    """Whether a field path's ``part`` names the written ``key``: the key itself, or the
    key cut as an error shows a long one (:func:`dissensus.types.field_segment`: its first
    characters and ``…``)."""
    if part == key:
        return True
    return part.endswith("\u2026") and field_segment(key) == part


_LINE_BREAK = re.compile("\r\n|[\n\r\x85\u2028\u2029]")
"""A line break as YAML counts them (``\r\n`` is one): the lines its marks number."""


def _refused_character(text: str, exc: yaml.reader.ReaderError) -> str:
    """The message of a character the YAML reader refused, naming its line. The reader
    stops at the first character it does not allow, so that character's first place in
    ``text`` is where it stopped (its ``position`` counts characters in PyYAML's reader
    and UTF-8 bytes in libyaml's: the character is found instead)."""
    character = exc.character
    if isinstance(character, bytes):
        character = character.decode("utf-8", "replace")
    code = ord(character) if isinstance(character, str) and len(character) == 1 else character
    if not isinstance(code, int):
        return f"invalid YAML: {exc.reason}"
    at = text.find(chr(code))
    where = f" at line {len(_LINE_BREAK.findall(text, 0, at)) + 1}" if at >= 0 else ""
    return f"invalid YAML{where}: {exc.reason} (U+{code:04X})"


def load_yaml_file(path: str | Path, *, what: str = "file") -> Any:
    """Read and parse a YAML configuration file (UTF-8, bounded, no duplicate keys)."""
    return load_yaml_text(read_text_file(path, what=what), file=str(path))


def with_field_line(
    exc: ConfigError,
    file: str,
    text: str | None,
    *,
    what: str,
    where: str | None = None,
) -> ConfigError:
    """``exc`` naming the line of the YAML file ``file`` its field is written on
    (:func:`yaml_line_of` of ``where``, the field as the file writes it, by default the
    error's own; ``text``: the file's text, read again when not given, ``what`` naming
    it then), or ``exc`` itself: one about another file or without a field, one naming a
    line already, or a subclass (which callers tell apart by its type)."""
    if type(exc) is not ConfigError or exc.file != file or not exc.field or exc.line:
        return exc
    if text is None:
        try:
            text = read_text_file(file, what=what)
        except ConfigError:
            return exc
    line = yaml_line_of(text, where or exc.field)
    if line is None:
        return exc
    return ConfigError(exc.message, file=exc.file, field=exc.field, line=line)
