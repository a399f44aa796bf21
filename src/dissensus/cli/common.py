"""Helpers shared by the CLI command modules: consoles, exit codes, progress, paths, output.

Choices this module makes:

* **Data is plain text.** Both consoles are built with Rich markup, emoji codes and
  highlighting off, so ``[b]``, ``[/INST]``, ``:smile:`` or ``[link=x]`` in an agent's
  text print as written. :func:`shown` also escapes control characters (ANSI escape
  sequences, carriage returns, bidirectional overrides) as ``\\x1b``-style escapes, so
  a trace can neither recolour the terminal nor hide or reorder text; right-to-left
  letters print unchanged.
* **A value is one line; a text shown as a block keeps its lines.** :func:`shown`, used
  for every table cell and every field of a one-line message (ids, answers, agents,
  reasons, paths), escapes newlines and tabs too (``\\n``, ``\\t``; a carriage
  return is ``\\x0d``, as every control character), so a value holding a newline can
  neither fake a table row nor add a line to a message. :func:`shown_block` keeps
  newlines and tabs (and escapes every other control character): it is used only for a
  whole text printed on its own lines, after everything else (``deliberate``'s answer).
  A text that follows a label on one line (CONCORD's ``Selected ID (...): TEXT``, a
  review's excerpts) is a field: one line.
* **JSON for people and files shows nothing raw.** :func:`print_json` (every
  ``--json`` document), the JSONL lines (:func:`~dissensus.io.jsonl.write_jsonl_line`)
  and the files and documents the commands write as JSON escape DEL, the C1 controls
  and the bidi and invisible characters as ``\\u`` (:func:`json_shown`), as the
  tables escape them: JSON's own escaping stops at U+001F. The value is the same.
* **One progress switch.** A bar is drawn on standard error when it is a terminal or
  ``$DISSENSUS_PROGRESS`` is on (:func:`progress_enabled`): ``1``, ``true``, ``yes`` or
  ``on`` draw progress on any standard error, ``0``, ``false``, ``no`` or ``off`` on
  none (a terminal included), unset or empty leaves it to the terminal (any case, spaces
  around ignored). Any other value stops every command before it runs with one line
  naming the variable and the values it takes (exit 2, :func:`check_progress_setting`):
  ``yes`` was read as "off" without a word. ``--help`` and ``dissensus version`` still
  answer (they say how to set it, and which version reads it). :class:`Bar` is the one bar
  every command uses. On a standard error that is no terminal it is plain lines, one
  every :data:`LINE_EVERY_S` seconds said by a timer thread whether or not anything
  advanced (the main thread may be inside a model load or an embedding for a minute),
  and one at the end. Its clock counts from the command's start
  (:func:`mark_command_start`, which the CLI's entry point calls), not from when the
  bar appears after the command's first reads. While a bar is drawn and standard
  output is a terminal too, what is written to standard output goes above the bar
  (rich's redirect, which replaces ``sys.stdout`` with its proxy meanwhile); when
  standard output is a file or a pipe it is written there as it is, never to the
  terminal the bar is on. So no command tells a terminal from a file by comparing a
  handle with ``sys.stdout``: what goes where is the options' to say (``--json``,
  ``--output``).
* **A progress line never lands inside a record.** Standard output and standard error
  often share one pipe or one log (``2>&1``, a CI job), and a write of more than a
  pipe's atomic size (4 KB) to a pipe is not atomic: the timer thread's line could
  land in the middle of a record the main thread was writing. So each progress line is
  said holding :data:`OUTPUT_LOCK`, and a command holds it across each whole record
  it writes and flushes while a bar is up (``decide`` and ``runs resume`` around each
  record and each rejected line, :func:`whole_records` for ``route``, ``guard vote``
  and ``convert``). The lock is held for the writes only, never while a case is
  decided or a model loads, so the timer still says a line every
  :data:`LINE_EVERY_S` seconds while the main thread is busy (a line that falls due
  during a record waits for the record's end). The timer only setting a flag for the
  main thread to print between records would not: nothing would be said while one case
  or one embedding is slow, what the timer is there for.
* **Paths are checked before anything is read or written** (:func:`check_outputs`,
  which every command runs on all its output paths): an output that is a directory, in
  a missing directory or not writable, or that cannot be created where the folder's
  permissions say it can (``/proc``: the write's first step is tried and undone,
  :func:`~dissensus.io.atomic.probe_output`), or that is the same file as anything the command
  reads (its input, policy, acceptance, calibration or rules file, the journal, standard
  input redirected from a file) or as another of its outputs, is a usage error (exit 2),
  one line naming both options. The same file is the same resolved path (symbolic links
  followed) or, where both exist, the same file on disk (a hard link). The files SQLite
  keeps beside a journal ``J`` (``J-wal``, ``J-shm``, ``J-journal``) count as the
  journal: writing one would lose the output (SQLite deletes or truncates it) or break
  the journal (a foreign ``J-journal`` is a hot rollback journal, and every later
  command fails "attempt to write a readonly database"). An output that
  exists and is not a regular file (``/dev/stdout``, a named pipe) is written in place,
  so it replaces nothing and is never refused as the same file as an input. Outputs are
  written to a temporary file beside the target and renamed over it at the end
  (:func:`atomic_output`), so a failed run never leaves half a file; a device or a
  named pipe (``/dev/null``, ``/dev/stdout``) is written in place, never renamed over.
  A run stopped by its deadline is not a failure of its output: the records it finished,
  in input order, are what ``--json`` prints too, so ``decide`` and ``runs resume`` keep
  that file (``keep_on``), and the resumed run writes the whole of it.
* **An empty option value is no value.** An option given ``""`` or blanks, as an unset
  shell variable gives (``--rules "$RULES"``, ``--calibration "$CAL"``, ``--model
  "$MODEL"``), is a usage error naming the option (:func:`not_empty`), never taken for
  the option left out: that would run with the default rules, no calibration, the
  bundled scripted model or the current directory, and exit 0.
* **``COLUMNS=0`` is no width.** A shell or CI runner that cannot tell its terminal's
  width may export ``COLUMNS=0`` (``tput cols`` on no terminal); Rich takes it as a
  console zero columns wide and prints nothing at all: no table, no run id, no ``--help``,
  with exit 0. :func:`ignore_zero_columns` (the CLI's entry point calls it) reads a zero
  width as unset, so output is as wide as the terminal, or 80 columns on a pipe.
* **A table keeps its ids whole.** The id column a user types in the next command
  (``runs list``'s run, ``review list``'s review id, ``route``'s and ``vote``'s panel
  id, ``acceptance status``'s file) is never wrapped, cut or squeezed out, however
  narrow ``$COLUMNS`` is (:func:`print_table`): at 10 to 20 columns it was dropped
  whole, a little wider wrapped over lines. The other columns share what is left.
* **A stream that cannot hold a character escapes it.** Standard output in a locale
  that is not UTF-8 (``PYTHONIOENCODING=ascii``, a Latin-1 terminal, a Windows code
  page) cannot encode ``θ`` or an id's ``é``, and the write failed with a traceback.
  :func:`escape_unencodable` (the CLI's entry point calls it) writes such a character as
  the ``\\uXXXX`` escape JSON uses (a character past U+FFFF as its surrogate pair), on
  standard output and standard error: a table reads ``\\u03b8_s``, and a JSON record
  (where such a character is always inside a string) stays valid JSON that decodes to
  the same value.
* **Numbers are bounded.** Float options take :func:`number_in` as their callback:
  ``nan``, ``inf`` and ``1e309`` are refused with "must be a finite number" before any
  range is checked. Durations in seconds (deadlines, timeouts, claim and undo windows)
  are at most :data:`MAX_SECONDS` (ten years): a longer one means "no limit", and
  a claim's expiry must stay a representable date. Batch sizes are at most
  :data:`MAX_BATCH` panels (one batch is held in memory), Ray workers at most
  :data:`MAX_WORKERS`.
* **A closed standard output is not a failure.** The human-mode console
  (:data:`out_console`) turns a broken pipe into :class:`BrokenPipeError`, which the
  CLI's entry point ends with exit 0, as it does for ``--json`` output.
* **A standard output that cannot be written is named.** Every write to standard output
  (the console, :func:`print_json`, JSON lines through
  :func:`~dissensus.io.atomic.stdout_handle`) turns a failure but a closed pipe (a full
  disk: ``> /dev/full``) into :class:`~dissensus.io.atomic.OutputWriteError` naming
  standard output, buffered or not (``python -u``), so the one error line says which
  output failed; once it is said, :func:`silence_stdout` drops what standard output
  still holds, so the interpreter's last flush adds no second line.
* A journal path that names an existing file which is not a dissensus journal (another
  application's SQLite database, or not SQLite at all) is refused before it is opened
  (:func:`check_journal_file`), so no tables are ever added to someone else's database;
  so is one that exists and is not a regular file (``/dev/null``, ``/dev/full``, a
  named pipe), before SQLite opens it and makes its ``-journal`` file beside it.
* **An input that is refused whole writes nothing.** A command that reads a JSONL input
  and writes rejects (``route``, ``calibrate-thresholds``, ``guard calibrate``, ``guard
  vote``, ``dci judge``, ``calibrate-acceptance``) opens the input
  (:func:`open_input`: its first bytes looked at, :func:`~dissensus.io.jsonl.not_text`)
  before the ``--rejects`` file, and ``decide -`` reads standard input before it opens
  the journal: standard input and a named pipe cannot be looked at before they are
  opened, and a gzip or UTF-16 input refused after the rejects file was opened left it
  empty (a previous run's rejects lost), and one refused after the journal was opened
  left a journal of no run behind. A regular file was already looked at by
  :func:`check_input_path`.
"""

from __future__ import annotations

import codecs
import errno
import io
import json
import math
import os
import signal
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, TypeVar, cast

import typer
from pydantic import BaseModel
from rich.cells import cell_len
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
)
from rich.table import Table
from rich.text import Text

from dissensus.canonical import indented_json
from dissensus.errors import InputError
from dissensus.files import file_kind, same_file
from dissensus.io.atomic import (
    atomic_output,
    probe_output,
    stdout_failed,
    stdout_handle,
    write_stdout,
)
from dissensus.quoting import INVISIBLE, json_shown, message_line, one_line, quoted, with_lines

if TYPE_CHECKING:
    from dissensus.io.jsonl import RejectSink

__all__ = [
    "EXIT_FAILURE",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "INTERRUPT_SAID",
    "MAX_BATCH",
    "MAX_SECONDS",
    "MAX_WORKERS",
    "OUTPUT_LOCK",
    "PROGRESS_ENV",
    "STOP_SIGNALS",
    "Bar",
    "atomic_output",
    "check_input_path",
    "check_journal_file",
    "check_output_path",
    "check_outputs",
    "check_progress_setting",
    "check_run_input",
    "command_started",
    "count_lines",
    "err_console",
    "exit_for",
    "has_control",
    "json_shown",
    "load_json_file",
    "mark_command_start",
    "not_empty",
    "number_in",
    "open_input",
    "out_console",
    "output_handle",
    "print_json",
    "print_table",
    "progress",
    "progress_enabled",
    "quoted",
    "reject_sink",
    "shown",
    "shown_block",
    "shown_message",
    "shown_number",
    "silence_stdout",
    "stdout_handle",
    "whole_records",
    "whole_write",
    "write_stdout",
]

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_REJECTED = 3
EXIT_INTERRUPTED = 130

INTERRUPT_SAID: list[bool] = []
"""Holds ``True`` once a command has said in its own words that it was interrupted (its
resume line), so that :func:`dissensus.cli.main` does not add a bare "interrupted"."""

STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)
"""The signals that interrupt a command (exit 130): Ctrl-C, ``kill`` and a closed terminal."""

MAX_SECONDS = 315_576_000.0
"""Longest duration option, in seconds (ten years of 365.25 days)."""
MAX_BATCH = 1_000_000
"""Largest ``--batch-size``: panels held in memory at once."""
MAX_WORKERS = 4096
"""Largest ``--workers``: Ray workers one run starts or asks for."""

T = TypeVar("T")


class _OutConsole(Console):
    """Standard output's console: a closed pipe (``| head``) is a :class:`BrokenPipeError`
    the CLI ends with exit 0, as for any other write to a closed stdout. (Rich's own
    reaction is ``SystemExit(1)``, which would read as a failure and say nothing.) Any
    other failed write (a full disk) is an :class:`~dissensus.io.atomic.OutputWriteError`
    naming standard output, and what the console held is dropped."""

    def on_broken_pipe(self) -> None:
        self.quiet = True  # nothing more is written, not even on the way out
        raise BrokenPipeError("standard output was closed")

    def _check_buffer(self) -> None:
        try:
            super()._check_buffer()
        except BrokenPipeError:
            raise
        except OSError as exc:
            del self._buffer[:]
            raise stdout_failed(exc) from None


err_console = Console(stderr=True, markup=False, emoji=False, highlight=False, soft_wrap=True)
out_console: Console = _OutConsole(markup=False, emoji=False, highlight=False, soft_wrap=True)


def ignore_zero_columns() -> None:
    """Read ``COLUMNS=0`` (``00``, ...) as unset, for the consoles and the help alike.

    Rich would take it as a console zero columns wide and print nothing. Removed from
    the environment, so the help's console (built per call) does not see it either; a
    console built while it was set gets its width back from the terminal."""
    columns = os.environ.get("COLUMNS")
    if columns is None or not columns.isdigit() or int(columns) != 0:
        return
    del os.environ["COLUMNS"]
    for console in (out_console, err_console):
        if console._width is not None and console._width <= 0:
            console._width = None


ESCAPE_ERRORS = "dissensus.escape"
"""The codec error handler :func:`escape_unencodable` sets: ``\\uXXXX`` escapes."""


def _json_escapes(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    escapes = []
    for char in exc.object[exc.start : exc.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            escapes.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            escapes.append(f"\\u{code:04x}")
    return "".join(escapes), exc.end


codecs.register_error(ESCAPE_ERRORS, _json_escapes)


def escape_unencodable() -> None:
    """Standard output and standard error in an encoding other than UTF-8 write a
    character they cannot hold as its JSON ``\\uXXXX`` escape instead of failing."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if not isinstance(stream, io.TextIOWrapper) or not encoding:
            continue
        try:
            name = codecs.lookup(encoding).name
        except LookupError:
            continue
        if name not in ("utf-8", "utf-16", "utf-32") and stream.errors in (
            "strict",
            "backslashreplace",
        ):
            with suppress(ValueError, OSError):  # a closed stream: nothing is written to it
                stream.reconfigure(errors=ESCAPE_ERRORS)


def has_control(text: str) -> bool:
    """Whether ``text`` holds a character :func:`shown` would escape, or a tab or newline."""
    return INVISIBLE.search(text) is not None


def shown(text: object) -> str:
    """``text`` as one line a reader must see: control characters escaped (newline and
    tab as ``\\n`` and ``\\t``), nothing interpreted. For table cells and message fields."""
    return one_line(text)


def shown_message(text: object) -> str:
    """A message of ours (an error's words, its values quoted already) as one line:
    control characters escaped, backslashes left as the quoting wrote them
    (:func:`~dissensus.quoting.message_line`)."""
    return message_line(" ".join(str(text).split()))


def shown_block(text: object) -> str:
    """``text`` as a block: control characters escaped but newlines and tabs, which it
    keeps. Only for a whole text printed on its own lines, never a cell or a field."""
    return with_lines(text)


def number_in(
    low: float | None = None, high: float | None = None, *, above: bool = False
) -> Callable[[float | None], float | None]:
    """Typer callback for a float option: finite (``nan``, ``inf`` refused), within [low,
    high] (``above``: more than ``low``, not ``low`` itself)."""

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number (got {value})")
        if above and low is not None and value <= low:
            raise typer.BadParameter(
                f"must be more than {shown_number(low)} (got {shown_number(value)})"
            )
        if low is not None and value < low:
            raise typer.BadParameter(
                f"must be at least {shown_number(low)} (got {shown_number(value)})"
            )
        if high is not None and value > high:
            raise typer.BadParameter(
                f"must be at most {shown_number(high)} (got {shown_number(value)})"
            )
        return value

    return check


def shown_number(value: float) -> str:
    """``value`` with every digit that tells it apart from its neighbours: an integral
    value whole, with thousands separators (``315,576,001``), any other its shortest
    round-tripping form (``0.0005``, ``1e+300``), never ``:g``'s six digits, which
    showed a limit and the value beyond it as the same ``3.15576e+08``."""
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return f"{value:,.0f}"
    return repr(float(value))


def check_input_path(path: str) -> str:
    """Fail with a usage error (exit 2) when ``path`` is neither ``-`` nor a readable file
    or named pipe: an empty path (an unset shell variable), a directory, and a device or a
    socket (``/dev/zero`` is an endless line: a reader would read it until interrupted)
    are refused before anything is read. (One parameter: it is a typer callback too.)"""
    return _check_input(path, file_only=False)


def check_file_input(path: str, label: str, what: str) -> str:
    """:func:`check_input_path` for an input read only from a file (a task, a problem, a
    certificate, a rule file: read whole, the paths it names read beside it): ``-``
    (standard input) is refused naming ``label`` and ``what``, not taken for a file named
    ``-`` and reported missing, and a device or a named pipe as what it is
    (``cannot read certificate: not a regular file (a character device)``)."""
    if path == "-":
        raise InputError(
            f"{label}: standard input ('-') is not read here: give the {what} as a file"
        )
    if not path.strip():  # an unset shell variable
        raise InputError(f"{label}: an empty path: name the {what}")
    try:
        mode = Path(path).stat().st_mode
    except (OSError, ValueError):
        mode = None  # missing, or a name the system refuses: check_input_path says which
    if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        # a named pipe is refused too (read whole, never streamed): the general message
        # offered a named pipe or '-', neither of which this file can be
        raise InputError(f"{path}: cannot read {what}: not a regular file ({file_kind(mode)})")
    return check_input_path(path)


def check_run_input(path: str) -> str:
    """:func:`check_input_path` for a run's input, which must be a regular file: a run
    reads its input again on resume (a named pipe cannot be read twice)."""
    return _check_input(path, file_only=True)


def _check_input(path: str, *, file_only: bool) -> str:
    if path == "-":
        return path
    if not path.strip():
        raise InputError("the input is an empty path: name a file, or - for standard input")
    p = Path(path)
    if not p.exists():
        raise InputError(f"file not found: {path}{_link_problem(p)}")
    if p.is_dir():
        raise InputError(f"expected a file, got a directory: {path}")
    mode = p.stat().st_mode
    if file_only and not stat.S_ISREG(mode):
        raise InputError(
            f"{path}: not a regular file ({file_kind(mode)}); "
            "a run's input is a file, or - to read standard input"
        )
    if not (stat.S_ISREG(mode) or stat.S_ISFIFO(mode)):
        raise InputError(
            f"{path}: not a regular file ({file_kind(mode)}); an input is a file, a named "
            "pipe, or - for standard input"
        )
    if not os.access(p, os.R_OK):
        raise InputError(f"cannot read {path}: permission denied")
    if stat.S_ISREG(mode):  # a named pipe's first bytes are its reader's
        from dissensus.io.jsonl import check_text_file

        check_text_file(path)
    return path


def _link_problem(path: Path) -> str:
    """Why a symbolic link ``path`` that leads to no file leads nowhere (`` (...)``), or
    ``""`` for a path that is no link: "file not found" alone named a file ``ls`` shows."""
    if not path.is_symlink():
        return ""
    if _loops(path):
        return " (a loop of symbolic links)"
    try:
        target = os.readlink(path)
    except OSError:
        return " (a broken symbolic link)"
    return f" (a broken symbolic link to {target})"


def _loops(path: Path) -> bool:
    """Whether ``path`` leads through more symbolic links than the system follows (a
    loop): no file can be read or made there."""
    try:
        os.stat(path)
    except OSError as exc:
        return exc.errno == errno.ELOOP
    return False


Reads = Iterable[str | None] | Mapping[str, str | None]
"""What a command reads: paths, or ``label -> path`` (the label names the argument or
option: ``PANELS``, ``--policy``, ``--journal``)."""


def _labelled(inputs: Reads) -> list[tuple[str | None, str]]:
    items = inputs.items() if isinstance(inputs, Mapping) else ((None, p) for p in inputs)
    return [(label, path) for label, path in items if path is not None and path != ":memory:"]


def _stdin_stat() -> os.stat_result | None:
    """The file standard input is redirected from, if it is a regular file."""
    try:
        info = os.fstat(sys.stdin.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor (replaced, closed)
        return None
    return info if stat.S_ISREG(info.st_mode) else None


def _would_replace(out: Path, other: str) -> bool:
    """Whether writing ``out`` would replace ``other`` (a path, ``-`` or a URL; a path as
    :func:`dissensus.files.same_file` tells, ``False`` when it cannot)."""
    if "://" in other:  # a journal URL (postgresql://...)
        return False
    if other != "-":
        return bool(same_file(out, other))
    read = _stdin_stat()
    try:
        if read is None or not out.exists():
            return False
        mine = os.stat(out)
    except OSError:  # the output cannot be looked at
        return False
    return (mine.st_dev, mine.st_ino) == (read.st_dev, read.st_ino)


@contextmanager
def open_input(path: str) -> Iterator[IO[str]]:
    """The JSONL input ``path`` (``-``: standard input) opened as
    :func:`~dissensus.io.jsonl.open_text` opens it, refused (:class:`InputError`) when it
    is no UTF-8 text or cannot be opened. Entered before any output is opened, so that a
    refused input (a gzip file piped in) truncates and creates nothing."""
    from contextlib import ExitStack

    from dissensus.io.jsonl import open_text

    with ExitStack() as stack:
        try:
            handle = stack.enter_context(open_text(path))
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
        yield handle


def reject_sink(path: str | None) -> RejectSink:
    """The rejects file ``path`` opened for writing (``None``: rejects go to standard error only),
    or :class:`InputError` naming it when it cannot be."""
    from dissensus.io.jsonl import RejectSink

    try:
        return RejectSink(path)
    except OSError as exc:
        raise InputError(f"cannot write the rejects file {path}: {exc.strerror or exc}") from None


def check_output_path(
    path: str | None, *, option: str, inputs: Reads = (), what: str | None = None
) -> None:
    """Usage error (exit 2) unless ``path`` can be written and names none of ``inputs``."""
    _check_output(path, option, what, _labelled(inputs))


def check_outputs(outputs: Mapping[str, str | None], *, reads: Reads = ()) -> None:
    """:func:`check_output_path` for every ``option -> path`` of ``outputs``: each can be
    written, names no file of ``reads``, and no two outputs are the same file.

    Run it before anything is read or written, on all the command's outputs.
    """
    pairs = _labelled(reads)
    for option, path in outputs.items():
        _check_output(path, option, None, pairs)
        if path is not None and path != "-":
            pairs.append((option, path))


def not_empty(value: str | None, option: str, what: str) -> None:
    """Refuse an option given an empty or blank value, as an unset shell variable gives
    (``--rules "$RULES"``): a usage error naming the option, never the option's absence
    (the default rules, no calibration, the bundled scripted model, the current
    directory) taken silently in its place."""
    if value is not None and not value.strip():
        raise typer.BadParameter(
            f"{option} is empty (an unset shell variable?): name {what}, or leave {option} out"
        )


def no_dash(path: str | None, option: str, instead: str) -> None:
    """Refuse ``-`` for an output that standard output cannot carry (it carries the
    command's report, or the rejects are on standard error already): a usage error
    naming ``instead``, never a file called ``-`` written unseen."""
    if path == "-":
        raise typer.BadParameter(f"{option} -: {instead} (./- names a file called -)")


def _check_output(
    path: str | None, option: str, what: str | None, inputs: list[tuple[str | None, str]]
) -> None:
    if option == "--rejects":
        no_dash(path, option, "each reject is reported on standard error already; name a file")
    if path is None or path == "-":
        return
    what = what or ("rejects file" if option == "--rejects" else "output file")
    if not path.strip():  # ``--out "$UNSET"``: not the current directory
        raise InputError(f"cannot write the {what} ({option}): it is an empty path")
    p = Path(path)
    where = f"cannot write the {what} {path} ({option})"
    if p.is_dir():
        raise InputError(f"{where}: is a directory")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"{where}: directory {parent} does not exist")
    if p.exists() and not p.is_file():  # a device or a named pipe: written in place
        if not os.access(p, os.W_OK):
            raise InputError(f"{where}: not writable")
        return
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise InputError(f"{where}: not writable")
    for label, other in inputs:
        if _would_replace(p, other):
            named = "standard input" if other == "-" else other
            if label is not None and label != other:
                named = f"{named} ({label})"
            raise InputError(f"{where}: it is the same file as {named}; refusing to overwrite it")
    sidecar = _sidecar_of(p, inputs)
    if sidecar is not None:
        raise InputError(
            f"{where}: it is a file SQLite keeps beside the journal {sidecar}; refusing to write it"
        )
    # The permission bits can say yes where creating the file fails (``/proc``, ``/sys``):
    # the write's first step is tried, leaving nothing behind (``probe_output``).
    try:
        probe_output(path, in_place=option == "--rejects")
    except OSError as exc:
        code = errno.errorcode.get(exc.errno or 0)
        reason = exc.strerror or str(exc)
        raise InputError(f"{where}: {reason}" + (f" ({code})" if code else "")) from None


SQLITE_SIDECARS = ("-wal", "-shm", "-journal")
"""The files SQLite keeps beside a database ``X``: ``X-wal``, ``X-shm``, ``X-journal``."""


def _sidecar_of(out: Path, inputs: list[tuple[str | None, str]]) -> str | None:
    """The journal among ``inputs`` whose SQLite sidecar file ``out`` is, if any.

    A journal is the input labelled ``--journal``, or any input that is an SQLite file."""
    for suffix in SQLITE_SIDECARS:
        if not out.name.endswith(suffix) or out.name == suffix:
            continue
        base = out.with_name(out.name[: -len(suffix)])
        for label, other in inputs:
            if other == "-" or "://" in other:
                continue
            # The same file first: only then is the input looked into (a pipe read to
            # see whether it is SQLite would lose what was read, or wait for a writer).
            if _would_replace(base, other) and (label == "--journal" or _is_sqlite(other)):
                return other
    return None


def _is_sqlite(path: str) -> bool:
    """Whether ``path`` is a regular file that starts as an SQLite database does (a pipe
    or a device is never read here)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


_SQLITE_MAGIC = b"SQLite format 3\x00"
_JOURNAL_TABLES = {"runs", "events"}


def check_journal_file(path: str, *, must_exist: bool = False) -> None:
    """Usage error (exit 2) when ``path`` cannot serve as a journal.

    A missing file is fine unless ``must_exist`` (a new journal is created) or the path is
    a loop of symbolic links (named so, as a broken link is when it must exist); an existing
    one must be an SQLite database holding the journal's tables (or no table), or empty
    when it is to be created (not when ``must_exist``: reading it would make it one). A
    journal that would end with the command (``:memory:``, an empty path) is refused.
    A hot rollback journal beside the file (a writer killed mid-transaction) is rolled
    back, as opening the store would, when the file and its folder are writable.
    """
    from dissensus.store.targets import is_postgres_url

    if path.strip() in ("", ":memory:"):
        # SQLite's throw-away databases end with the command: a run nobody can resume
        # and review items nobody can resolve.
        raise InputError(
            f"journal {path!r} would end with this command: give a file or a postgresql:// URL"
        )
    if is_postgres_url(path):
        return
    p = Path(path)
    if not p.exists():
        # Named as an input is: a loop of links (which no command can open or make) and
        # a link whose file is gone say so. A new journal is made through a broken link,
        # where the link leads, as any file opened for writing is.
        if must_exist or _loops(p):
            raise InputError(f"journal not found: {path}{_link_problem(p)}")
        parent = p.parent if str(p.parent) else Path(".")
        if not parent.is_dir():
            raise InputError(f"journal {path}: directory {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise InputError(f"journal {path}: directory {parent} is not writable")
        return
    if p.is_dir():
        raise InputError(f"journal {path}: is a directory")
    mode = p.stat().st_mode
    if not stat.S_ISREG(mode):  # SQLite would make X-journal beside a device, and fail
        raise InputError(f"journal {path}: not a regular file ({file_kind(mode)})")
    if not os.access(p, os.R_OK):
        raise InputError(f"journal {path}: permission denied")
    if not must_exist and not os.access(p, os.W_OK):
        raise InputError(f"journal {path}: read-only")
    if p.stat().st_size == 0:
        if must_exist:  # SQLite would make the empty file a journal, even to read it
            raise InputError(
                f"journal {path}: an empty file, not a journal (no run was written to it)"
            )
        return
    with open(p, "rb") as handle:
        if handle.read(len(_SQLITE_MAGIC)) != _SQLITE_MAGIC:
            raise InputError(f"journal {path}: not a dissensus journal (not an SQLite database)")
    from dissensus.store.sqlite import immutable_uri, read_as_it_stands

    uri = f"{p.resolve().as_uri()}?mode=ro"
    hot = _hot_journal(p)
    if read_as_it_stands(str(p)):  # read as it is (dissensus.store.sqlite)
        uri = immutable_uri(str(p))
    elif hot and os.access(p, os.W_OK) and os.access(p.parent, os.W_OK):
        # A writer stopped mid-transaction (killed while it made the file a journal):
        # its rollback journal must be played back, which a read-only connection cannot
        # do; the store would do it on opening, and so does this check.
        uri = f"{p.resolve().as_uri()}?mode=rw"
    try:
        db = sqlite3.connect(uri, uri=True)
        try:
            names = {
                row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            }
        finally:
            db.close()
    except sqlite3.Error as exc:
        if hot:
            raise InputError(
                f"journal {path}: cannot read it: {exc}; {path}-journal holds a write a "
                "stopped process left unfinished, which only a connection with write access "
                "to the file and its folder can roll back"
            ) from None
        raise InputError(f"journal {path}: cannot read it: {exc}") from None
    if names and not names >= _JOURNAL_TABLES:
        raise InputError(
            f"journal {path}: an SQLite database of another application "
            f"(tables {', '.join(sorted(names)[:5])}); refusing to write into it"
        )


def _hot_journal(path: Path) -> bool:
    """Whether an unfinished rollback journal (``X-journal``, not empty) lies beside ``path``."""
    try:
        return path.with_name(path.name + "-journal").stat().st_size > 0
    except OSError:
        return False


def count_lines(path: str) -> int | None:
    """Non-blank lines of ``path`` (None for standard input), read as bytes: never a decode error."""
    if path == "-":
        return None
    count = 0
    with open(path, "rb") as handle:
        for number, line in enumerate(handle, start=1):
            if line.removeprefix(b"\xef\xbb\xbf" if number == 1 else b"").strip():
                count += 1
    return count


def exit_for(rejected: int) -> int:
    """Exit code for a run that rejected ``rejected`` records."""
    return EXIT_REJECTED if rejected else EXIT_OK


@contextmanager
def output_handle(
    path: str | None, *, keep_on: tuple[type[BaseException], ...] = ()
) -> Iterator[IO[str]]:
    """Standard output, or ``path`` written atomically (temporary file, renamed at the end,
    or when the block ends with one of ``keep_on``: :func:`atomic_output`)."""
    if path is None or path == "-":
        yield sys.stdout
        return
    with atomic_output(path, keep_on=keep_on) as handle:
        yield handle


def print_table(table: Table, *, whole: Sequence[int] = (0,)) -> None:
    """Print ``table`` on standard output with its columns ``whole`` (the ids a user types
    in the next command) never wrapped, cut or squeezed out, whatever ``$COLUMNS`` says:
    each is as wide as its widest cell and the other columns share what is left (down to
    nothing); a console narrower than those columns prints the table that wide, for the
    terminal to wrap, rather than cut an id."""
    need = 0
    for index in whole:
        column = table.columns[index]
        widest = max((cell_len(str(cell)) for cell in column.cells), default=0)
        column.no_wrap = True
        column.min_width = max(column.min_width or 0, widest)
        need += widest + 3  # its padding and the rule after it
    if need < out_console.width:
        out_console.print(table)
        return
    given = out_console._width  # what the console was told (None: the terminal's)
    out_console.width = need + 1  # a narrower print(width=...) is clamped to the console's
    try:
        out_console.print(table)
    finally:
        out_console._width = given


def print_json(obj: BaseModel | dict[str, object] | list[object]) -> None:
    """Print one JSON document to standard output, every character a terminal acts on
    or a reader cannot see escaped (:func:`~dissensus.quoting.json_shown`); a failed
    write: one error line naming standard output,
    :class:`~dissensus.io.atomic.OutputWriteError`."""
    if isinstance(obj, BaseModel):
        text = obj.model_dump_json(indent=2)
    else:
        text = json.dumps(obj, indent=2, ensure_ascii=False, default=str)
    write_stdout(json_shown(text) + "\n", flush=True)


def print_json_listing(obj: dict[str, object], key: str, items: Iterable[object]) -> None:
    """:func:`print_json` of ``obj`` with ``key`` added last, holding the list of
    ``items``, written as the items come (one at a time, never the list): the same
    text, character for character (an item of an indented list is its own indented
    text with every line moved in by two levels; the escapes of :func:`json_shown` are
    made character by character, so per part as on the whole)."""

    head = _indented(obj)  # its closing line dropped, the list comes before it
    head = "{" if head == "{}" else head[: -len("\n}")] + ","
    parts = [json_shown(f"{head}\n  {_indented(key)}: [")]
    size = 0
    empty = True
    for item in items:
        text = _indented(item).replace("\n", "\n    ")
        parts.append(json_shown(f"\n    {text}" if empty else f",\n    {text}"))
        size += len(parts[-1])
        empty = False
        if size > LISTING_WRITE:  # a write per part of the list, not per item
            write_stdout("".join(parts))
            parts, size = [], 0
    parts.append("]\n}\n" if empty else "\n  ]\n}\n")
    write_stdout("".join(parts), flush=True)


LISTING_WRITE = 1 << 16
"""Characters :func:`print_json_listing` gathers before it writes them."""


def _indented(value: object) -> str:
    """``json.dumps(value, indent=2, ensure_ascii=False, default=str)``: orjson's
    indented text when it is provably the same (orjson took the value, no number in it
    is in a form where orjson's writing differs from ``repr``, and it reads back equal to
    the value: :func:`dissensus.canonical.canonical`'s test), else the standard
    library's, which writes an indented text in Python, several times slower."""
    fast = indented_json(value)
    if fast is not None:
        return fast
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def silence_stdout() -> None:
    """Point standard output at /dev/null, so what it still holds (after a closed pipe or
    a write that failed and was reported) goes nowhere and the interpreter's last flush
    is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def load_json_file(path: str | Path, *, what: str = "file") -> object:
    """Parse a JSON file strictly (:func:`dissensus.io.jsontext.load_json_file`: no
    duplicate key, non-finite number or too long integer); every failure is one
    :class:`~dissensus.errors.ConfigError` line naming the file and the field."""
    from dissensus.io.jsontext import load_json_file as load_strict

    return load_strict(path, what=what)


PROGRESS_ENV = "DISSENSUS_PROGRESS"
"""The variable that turns progress on or off (:func:`progress_setting`)."""


def progress_setting() -> bool | None:
    """``$DISSENSUS_PROGRESS`` read (:func:`~dissensus.switches.env_switch`): ``True``
    (on whatever standard error is), ``False`` (off, a terminal too), ``None`` (unset or
    empty: a terminal's); a :class:`~dissensus.errors.ConfigError` naming the values it
    takes for any other."""
    from dissensus.switches import env_switch

    return env_switch(PROGRESS_ENV, unset="progress on a terminal")


def check_progress_setting() -> None:
    """Refuse (exit 2) a ``$DISSENSUS_PROGRESS`` :func:`progress_setting` cannot read;
    every command calls it once its options are parsed, before it runs (``--help`` and
    ``dissensus version`` do not)."""
    progress_setting()


def progress_enabled(enabled: bool = True) -> bool:
    """Whether progress bars are drawn: ``$DISSENSUS_PROGRESS`` on, or unset and standard
    error a terminal (:func:`progress_setting`)."""
    if not enabled:
        return False
    setting = progress_setting()
    return err_console.is_terminal if setting is None else setting


LINE_EVERY_S = 5.0
"""Seconds between two progress lines when standard error is not a terminal."""

TICK_MIN_S = 0.05
"""Shortest wait of the timer that says progress lines (whatever the interval)."""

_COMMAND_STARTED = [time.monotonic()]

OUTPUT_LOCK = threading.RLock()
"""Held across each progress line said and each whole record (written and flushed) a
command writes while a bar is up, so that neither lands inside the other when standard
output and standard error share a pipe (see the module's choices). Re-entrant: a
record's writer may advance the bar, which may say a line."""


def whole_write() -> threading.RLock:
    """:data:`OUTPUT_LOCK`, to hold (``with whole_write():``) across a record's write and
    flush, and any line said with it."""
    return OUTPUT_LOCK


def _plain_lines() -> bool:
    """Whether progress is plain lines said by a timer thread (:class:`_Lines`)."""
    return progress_enabled() and not err_console.is_terminal


def _destination(handle: object) -> tuple[int, int] | None:
    """The file ``handle`` writes to (device, inode), ``None`` when it cannot be told."""
    try:
        info = os.fstat(handle.fileno())  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both
        return None
    return info.st_dev, info.st_ino


class _WholeRecords:
    """A text handle whose every ``write`` (one whole record) is written and flushed
    holding :data:`OUTPUT_LOCK`: a progress line comes before it or after it."""

    def __init__(self, inner: IO[str]) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        with OUTPUT_LOCK:
            written = self._inner.write(text)
            self._inner.flush()
        return written

    def flush(self) -> None:
        with OUTPUT_LOCK:
            self._inner.flush()


def whole_records(handle: IO[str]) -> IO[str]:
    """``handle``, for a command that writes one record per ``write`` while a bar is up:
    when progress is plain lines and ``handle`` may write where standard error does (the
    same pipe or file, or it cannot be told), each write is flushed whole holding
    :data:`OUTPUT_LOCK` (:class:`_WholeRecords`), so no progress line lands inside a
    record; otherwise ``handle`` itself, buffered as it is."""
    if not _plain_lines():
        return handle
    mine, theirs = _destination(handle), _destination(sys.stderr)
    if mine is not None and theirs is not None and mine != theirs:
        return handle
    return cast("IO[str]", _WholeRecords(handle))


def mark_command_start(at: float | None = None) -> None:
    """Note when the command started (:func:`time.monotonic`; default: now): a progress
    bar's clock counts from there, not from when the bar appears."""
    _COMMAND_STARTED[0] = time.monotonic() if at is None else at


def command_started() -> float:
    """When the command started (:func:`mark_command_start`; else when the CLI loaded)."""
    return _COMMAND_STARTED[0]


def _clock(seconds: float) -> str:
    whole = max(int(seconds), 0)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


class _Lines:
    """Progress as plain lines on a standard error that is not a terminal (a log, a CI
    job, a pipe: ``$DISSENSUS_PROGRESS=1``), where a bar cannot be redrawn: one line
    every ``every`` seconds (:data:`LINE_EVERY_S`), whether or not anything advanced
    (:meth:`tick`, called by a timer thread of the :class:`Bar`), and one at the end,
    ``description: done/total (pct) elapsed``; the elapsed time counts from the
    command's start (:func:`command_started`). A bar with nothing counted and no total
    (a phase, such as reading a journal) says ``description: elapsed``."""

    def __init__(
        self,
        description: str,
        total: float | None,
        *,
        every: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
        write: Callable[[str], object] | None = None,
    ) -> None:
        self.description, self.total, self.done = description, total, 0.0
        self.every = LINE_EVERY_S if every is None else every
        self._clock = clock
        self._start = command_started() if started is None else started
        self._last = clock()
        self._write = write
        self._lock = threading.Lock()

    def advance(self, n: float) -> None:
        with self._lock:
            self.done += n
        self.tick()

    def update(self, description: str | None, completed: float | None, total: float | None) -> None:
        with self._lock:
            self.description = description if description is not None else self.description
            self.done = completed if completed is not None else self.done
            self.total = total if total is not None else self.total
        self.tick()

    def due_in(self) -> float:
        """Seconds until the next line is due (0 when it is)."""
        return max(self._last + self.every - self._clock(), 0.0)

    def tick(self) -> bool:
        """Say a line if one is due (``every`` seconds since the last); whether it did."""
        if self._clock() - self._last < self.every:
            return False
        # The output lock first, always: a record's writer holding it may advance the bar.
        with OUTPUT_LOCK, self._lock:
            if self._clock() - self._last < self.every:
                return False
            self._say()
            return True

    def say(self) -> None:
        with OUTPUT_LOCK, self._lock:
            self._say()

    def _say(self) -> None:
        self._last = self._clock()
        elapsed = _clock(self._last - self._start)
        if self.total is None and not self.done:
            line = f"{self.description}: {elapsed}\n"
        else:
            share = f" ({self.done / self.total:.0%})" if self.total else ""
            of = f"/{self.total:,.0f}" if self.total is not None else ""
            line = f"{self.description}: {self.done:,.0f}{of}{share} {elapsed}\n"
        if self._write is not None:
            self._write(line)
            return
        sys.stderr.write(line)
        sys.stderr.flush()


class _Ticker:
    """A daemon thread that says a :class:`_Lines` line whenever one is due, so lines
    keep coming every few seconds while the main thread is busy (an embedding model
    loading or computing, a long read of the journal) and nothing advances."""

    def __init__(self, lines: _Lines) -> None:
        self._lines = lines
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dissensus-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(max(self._lines.due_in(), TICK_MIN_S)):
            with suppress(OSError, ValueError):  # standard error gone: the command says so
                self._lines.tick()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)


class _SinceCommand(ProgressColumn):
    """The time since the command started (a bar's own clock starts with the bar)."""

    def render(self, task: Task) -> Text:
        return Text(_clock(time.monotonic() - command_started()), style="progress.elapsed")


def _stdout_is_terminal() -> bool:
    """Whether standard output is a terminal (a closed or missing one is not)."""
    try:
        return bool(sys.stdout.isatty())
    except (AttributeError, ValueError, OSError):
        return False


class Bar:
    """One progress bar on standard error (a no-op when bars are off; plain lines when
    standard error is not a terminal but ``$DISSENSUS_PROGRESS=1`` asks for progress).
    Its clock counts from the command's start. ``announce``: with plain lines, say the
    first line at once (a phase that is silent otherwise: resume reading its journal)."""

    def __init__(
        self,
        description: str,
        *,
        total: int | None = None,
        enabled: bool = True,
        announce: bool = False,
    ) -> None:
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._lines: _Lines | None = None
        self._ticker: _Ticker | None = None
        self._announce = announce
        if progress_enabled(enabled) and not err_console.is_terminal:
            self._lines = _Lines(description, total)
        elif progress_enabled(enabled):
            columns = [
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                _SinceCommand(),
            ]
            # Standard output goes above the bar only when it is on a terminal too: the
            # redirect would send a file's or a pipe's records to standard error.
            self._progress = Progress(
                *columns,
                console=err_console,
                transient=True,
                redirect_stdout=_stdout_is_terminal(),
            )
            self._task = self._progress.add_task(description, total=total)

    def advance(self, n: float = 1) -> None:
        if self._lines is not None:
            self._lines.advance(n)
        elif self._progress is not None and self._task is not None:
            self._progress.advance(self._task, n)

    def update(
        self,
        *,
        description: str | None = None,
        completed: float | None = None,
        total: float | None = None,
    ) -> None:
        if self._lines is not None:
            self._lines.update(description, completed, total)
        elif self._progress is not None and self._task is not None:
            self._progress.update(
                self._task, description=description, completed=completed, total=total
            )

    def __enter__(self) -> Bar:
        if self._progress is not None:
            self._progress.start()
        if self._lines is not None:
            if self._announce:
                self._lines.say()
            self._ticker = _Ticker(self._lines)
            self._ticker.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._ticker is not None:
            self._ticker.stop()
        if self._lines is not None and kind is None:
            self._lines.say()
        if self._progress is not None:
            self._progress.stop()


def progress(
    items: Iterable[T], *, description: str, total: int | None = None, enabled: bool = True
) -> Iterator[T]:
    """Iterate ``items`` with a progress bar on stderr (see :func:`progress_enabled`)."""
    if not progress_enabled(enabled):
        yield from items
        return
    with Bar(description, total=total) as bar:
        for item in items:
            yield item
            bar.advance()
