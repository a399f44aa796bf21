"""The ``dissensus`` command line. Each command group lives in its own module.

Exit codes: 0 ok, 1 failure, 2 usage error (bad flag, missing file, invalid
configuration), 3 some input records rejected (the rest processed and written),
130 interrupted (SIGINT, SIGTERM or SIGHUP; ``decide`` and ``runs resume`` name the resume
command). ``docs/cli.md`` lists the codes each command uses.

Every error is one line on standard error, usage errors too (``error: ...`` followed by
the command's ``--help`` to read). Output cut short by a closed pipe (``| head -1``)
ends the command silently with exit 0 (a command's ``--help`` too).

Choices this module makes:

* **Start-up stays cheap.** Registering the commands imports only the CLI framework and
  the CLI's own helpers; each command imports the library parts it needs when it runs,
  so ``dissensus --help`` or ``dissensus bound`` load no model client, pipeline, numpy
  or signing code. The few library constants a command's help shows (the default
  similarity backend, CONCORD's rule names, the model variable) are spelt out in the
  command module, and a test keeps each equal to the library's.
* The command tree is built once per process (:func:`main` may run many times in one
  process, as the test suite and embedding programs do).
* **A system error is one line.** An :class:`OSError` no command put in its own words
  (a full disk under standard output, an I/O error) ends the command with one line
  naming the file and the error (``error: cannot write standard output: No space left
  on device (ENOSPC)``), exit 1, never a traceback; an output file that cannot be
  written says so itself (:class:`~dissensus.io.atomic.OutputWriteError`, exit 1). A
  closed pipe stays a quiet exit 0.
* **Arguments that are not UTF-8** (bytes a shell passes through as lone surrogates) are
  fine as file names; where one is used as text (a run id, a note, a reviewer) the
  command stops with one line naming it (exit 2) before anything is written.
* **SIGTERM is an interrupt.** While a command runs, SIGTERM (what ``kill``, systemd
  and container runtimes send) is turned into a SIGINT, so whatever handles Ctrl-C at
  that moment handles it (:class:`KeyboardInterrupt`, an event loop's cancellation of
  its main task, a command's own handler) and every command stops as it does on Ctrl-C
  (exit 130, or the command's own documented stop) instead of dying without a word.
  Where SIGINT is ignored (a background job of a script), SIGTERM raises
  :class:`KeyboardInterrupt` itself, so it still stops the command. Only where SIGTERM still has
  its default action (an embedding program's own handler is kept) and on the main
  thread; a server installs its own handlers on start (graceful shutdown). A signal the
  ``dissensus`` command held (blocked) while it handed over to the command line
  (:mod:`dissensus.__main__`) is let through once these handlers are in place.
* **SIGHUP is SIGTERM** (a closed terminal, an SSH session that drops): the command
  stops as on Ctrl-C, one line and exit 130 (not the shell's 129 of a process the
  signal killed), its temporary output files removed and ``decide``'s run resumable.
  Under ``nohup`` (SIGHUP ignored) it stays ignored.
* **``runs resume ID`` names its resume command from its first moment.** An interrupt
  before the command's own handling (while the command line is built, while its options
  are parsed) is said here, and for ``runs resume`` the words are the command's own
  (``interrupted: resume with dissensus runs resume ID --journal J``, the journal as
  given, else ``$DISSENSUS_JOURNAL`` or the default), read from the arguments as the
  command's options take them (:func:`_resumed_run`); any other command says
  ``interrupted``.
"""

from __future__ import annotations

import errno
import functools
import io
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from dissensus.cli import commands as _commands  # noqa: F401  (registers every command)
from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    INTERRUPT_SAID,
    STOP_SIGNALS,
    check_progress_setting,
    escape_unencodable,
    ignore_zero_columns,
    mark_command_start,
    quoted,
    shown,
    shown_message,
    silence_stdout,
)
from dissensus.errors import DissensusError, InputError

__all__ = ["app", "main"]


def _usage_line(exc: Exception, argv: list[str]) -> str:
    """One line for a click usage error: the message and where to read the usage (the
    error's command, else the deepest command ``argv`` names: an option's missing or
    unwanted value is refused by the parser before the command's context exists)."""
    message = " ".join(exc.format_message().split()) if hasattr(exc, "format_message") else str(exc)
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else _named_command(argv)
    return f"error: {shown_message(message)} (see: {shown(path)} --help)\n"


def _named_command(argv: list[str]) -> str:
    """``dissensus`` and the subcommands ``argv`` names before its first other word."""
    words = ["dissensus"]
    command: Any = _command()
    for word in argv:
        subcommands = getattr(command, "commands", None)  # a group's
        if not isinstance(subcommands, dict) or word not in subcommands:
            break
        command = subcommands[word]
        words.append(word)
    return " ".join(words)


@functools.cache
def _command() -> Any:
    """The click command tree of :data:`app` (what ``app(...)`` builds on every call),
    its switches shown in ``--help`` without a value (:func:`_switches_take_no_value`)."""
    from typer.main import get_command

    command = get_command(app)
    _switches_take_no_value(command)
    _progress_checked(command)
    return command


def _progress_checked(command: Any) -> None:
    """Every command that runs first refuses a ``$DISSENSUS_PROGRESS`` no command could
    read (:func:`~dissensus.cli.common.check_progress_setting`), once its options are
    parsed: ``--help`` (an eager option, which ends before the command runs) still
    answers, as a group shown without a subcommand and ``dissensus version`` do (what
    says how to set the variable, or which version reads it, is never refused by it)."""
    subs = getattr(command, "commands", None)
    if subs is not None:
        for sub in subs.values():
            _progress_checked(sub)
        return
    if command.name == "version":
        return
    invoke = command.invoke

    def checked(ctx: Any) -> Any:
        check_progress_setting()  # a value no command could read: said before it runs
        return invoke(ctx)

    command.invoke = checked


def _switches_take_no_value(command: Any) -> None:
    """Show every switch of ``command`` and its subcommands (``--json``, ``--help``, ...)
    without a value in ``--help``: the help listed ``--json <bool>``, and ``--json
    true`` is a usage error. An empty metavar is what the help prints for them."""
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    make_help = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = make_help(ctx)
        if option is not None and option.metavar is None:
            option.metavar = ""
        return option

    command.get_help_option = get_help_option
    for sub in (getattr(command, "commands", None) or {}).values():
        _switches_take_no_value(sub)


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM (or SIGHUP): a SIGINT, so whatever handles Ctrl-C now handles it (an event loop's
    signal handler, a command's own, the default :class:`KeyboardInterrupt`). Where
    SIGINT is ignored (a background job of a script) SIGTERM still stops the command."""
    _SIGNALLED.append(signum)
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.raise_signal(signal.SIGINT)


_SIGNALLED: list[int] = []
"""SIGTERM or SIGHUP received during this command (:func:`_terminate`)."""


def _interrupted_within(exc: BaseException) -> bool:
    """Whether ``exc`` is the work of an interrupt: a :class:`KeyboardInterrupt` in its
    chain (a library that turned one raised inside it into its own error, as an import
    or a schema being built does), or a SIGTERM or SIGHUP received meanwhile."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return bool(_SIGNALLED)


@contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`KeyboardInterrupt` inside (see the module
    docstring); each only where its action is the default."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    taken = [
        signum
        for signum in STOP_SIGNALS
        if signum != signal.SIGINT and signal.getsignal(signum) is signal.SIG_DFL
    ]
    for signum in taken:
        signal.signal(signum, _terminate)
    try:
        yield
    finally:
        for signum in taken:
            signal.signal(signum, signal.SIG_DFL)


class _InputClosed(OSError, InputError):
    """Standard input read while closed: an input that cannot be read (exit 2), and an
    ``OSError`` where a reader words its own "cannot read" line."""

    def __str__(self) -> str:
        return str(self.strerror)


class _ClosedStream(io.TextIOBase):
    """Standard input or output the process was started without (``<&-``, ``>&-``):
    Python leaves ``sys.stdin`` / ``sys.stdout`` ``None``, and every use was an
    AttributeError traceback. Reading it is an input that cannot be read (one line, exit
    2); writing it is one ``OSError`` (EBADF) naming it (one line, exit 1, as a full
    disk); flushing nothing is no error."""

    def __init__(self, what: str, error: type[OSError] = OSError) -> None:
        super().__init__()
        self.what = what
        self.error = error

    def _closed(self) -> OSError:
        return self.error(errno.EBADF, f"{self.what} is closed")

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        raise self._closed()

    def readline(self, size: int | None = -1) -> str:  # type: ignore[override]
        raise self._closed()

    def write(self, text: str) -> int:
        raise self._closed()

    def fileno(self) -> int:
        raise self._closed()

    def isatty(self) -> bool:
        return False

    def flush(self) -> None:
        return None


def _closed_streams() -> None:
    """Stand-ins for the standard streams the process was started without."""
    if sys.stdin is None:
        sys.stdin = _ClosedStream("standard input", _InputClosed)
    if sys.stdout is None:
        sys.stdout = _ClosedStream("standard output")
    if sys.stderr is None:  # nowhere to say anything: said into nothing
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115


def main(argv: list[str] | None = None, *, held: frozenset[int] = frozenset()) -> int:
    """Run the CLI and return its exit code; user errors print one line, never a traceback.

    ``held``: signals blocked by the caller until the CLI's handlers are in place (see
    :mod:`dissensus.__main__`); they are unblocked then.
    """
    mark_command_start()  # progress clocks count from here
    ignore_zero_columns()
    escape_unencodable()
    INTERRUPT_SAID.clear()
    _SIGNALLED.clear()
    _closed_streams()
    code = _main(argv, held)
    if code == EXIT_INTERRUPTED and not INTERRUPT_SAID:
        # The CLI framework turns a KeyboardInterrupt it catches (a signal while a command
        # checks its options, before the command's own handling) into exit 130, silently.
        _said_interrupted(argv)
    return code


def _said_interrupted(argv: list[str] | None) -> None:
    """Say that the command was interrupted: ``runs resume ID`` names its resume command
    (as it does once it runs), every other command says ``interrupted``."""
    sys.stderr.write(interrupted_line(sys.argv[1:] if argv is None else argv) + "\n")
    sys.stderr.flush()
    INTERRUPT_SAID.append(True)


def interrupted_line(argv: list[str]) -> str:
    """What an interrupt of the command ``argv`` says before the command's own handling:
    ``runs resume ID`` its resume command (:func:`~dissensus.cli.runs.resume_interrupted_line`),
    any other command (or arguments it cannot read) ``interrupted``."""
    try:
        resumed = _resumed_run(argv)
        if resumed is not None:
            from dissensus.cli.runs import resume_interrupted_line

            return resume_interrupted_line(*resumed)
    except Exception:  # arguments it cannot read: the plain line, never a traceback
        pass
    return "interrupted"


def _resumed_run(
    argv: list[str],
) -> tuple[str, str | None, str | None, bool, str | None] | None:
    """The run id, the ``--journal``, the ``--output`` (``None``: not given), whether
    ``--json`` is given and the ``--rejects``, of ``argv`` when it is ``runs resume ID
    ...``, read as the command's options take them (an option's value is never taken for
    the id; the last of an option given twice wins); ``None`` for any other command."""
    if argv[:2] != ["runs", "resume"]:
        return None
    command = _command().commands["runs"].commands["resume"]
    options = [param for param in command.params if param.param_type_name == "option"]
    takes_value = {  # (the CLI framework's own click, whichever it is: by duck typing)
        name
        for param in options
        if not param.is_flag and not param.count
        for name in (*param.opts, *param.secondary_opts)
    }
    named = {name: param.name for param in options for name in param.opts}
    run_id: str | None = None
    given: dict[str, str] = {}
    json_out = False
    words = iter(argv[2:])
    for word in words:
        if word == "--":  # what follows is arguments only
            run_id = run_id if run_id is not None else next(words, None)
            break
        if word.startswith("-") and word != "-":
            name, equals, value = word.partition("=")
            if not word.startswith("--"):  # a short option: its value joined (-oF) or next
                name, equals, value = word[:2], "", word[2:]
                equals = "=" if value else ""
            if name in takes_value:
                given[named.get(name, name)] = value if equals else next(words, "")
            elif named.get(word) == "json_out":
                json_out = True
            continue
        if run_id is None:
            run_id = word
    if not run_id:
        return None
    return run_id, given.get("journal"), given.get("output"), json_out, given.get("rejects")


@contextmanager
def _plain_warnings() -> Iterator[None]:
    """A :class:`FutureWarning` (a deprecated setting of the user's files) or an
    :class:`~dissensus.store.review_index.IndexRebuilt` is one ``warning:`` line on
    stderr, not Python's two lines naming our source."""
    before = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        from dissensus.store.review_index import IndexRebuilt

        if issubclass(category, FutureWarning | IndexRebuilt):
            sys.stderr.write(f"warning: {shown(' '.join(str(message).split()))}\n")
            return
        before(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = before


def _main(argv: list[str] | None, held: frozenset[int] = frozenset()) -> int:
    try:
        with _sigterm_interrupts(), _plain_warnings():
            if held:  # one that arrived meanwhile is handled here, as during the command
                signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
            code = _command().main(args=argv, prog_name="dissensus", standalone_mode=False)
    except SystemExit as exc:
        if type(sys.stdout).__name__ == "PacifyFlushWrapper":
            # The CLI framework saw a closed pipe on stdout (``| head -1``): not a failure.
            sys.stdout = getattr(sys.stdout, "wrapped", sys.__stdout__)
            silence_stdout()
            return EXIT_OK
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
            # The console that prints a command's help saw a closed pipe (``--help |
            # head``): it ends with exit 1 of its own; a closed pipe is not a failure.
            silence_stdout()
            return EXIT_OK
        return _code(exc.code)
    except DissensusError as exc:
        if getattr(exc, "stdout", False):  # standard output failed: drop what it holds
            silence_stdout()
        sys.stderr.write(f"error: {shown_message(exc)}\n")
        return exc.exit_code
    except BrokenPipeError:
        silence_stdout()
        return EXIT_OK
    except OSError as exc:
        # The last resort for a system error no command turned into its own words (a
        # full disk under standard output, an I/O error): one line, exit 1.
        sys.stderr.write(f"error: {_os_error(exc)}\n")
        return EXIT_FAILURE
    except UnicodeEncodeError as exc:
        if "surrogates" not in exc.reason:
            raise
        # An argument holding bytes that are not UTF-8 (the shell passes them through as
        # lone surrogates): fine as a file name, not as text to journal or look up.
        sys.stderr.write(f"error: {_not_utf8(sys.argv[1:] if argv is None else argv)}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        if not INTERRUPT_SAID:  # a signal after the command said it stopped: said already
            _said_interrupted(argv)
        return EXIT_INTERRUPTED
    except Exception as exc:
        # Click's usage errors (the CLI framework's, not ours): one line, exit 2.
        if type(exc).__name__ == "Abort":
            if not INTERRUPT_SAID:
                _said_interrupted(argv)
            return EXIT_INTERRUPTED
        exit_code = getattr(exc, "exit_code", None)
        if hasattr(exc, "format_message") and isinstance(exit_code, int):
            if str(exc.format_message()).strip():  # empty: the help was printed (no arguments)
                sys.stderr.write(_usage_line(exc, sys.argv[1:] if argv is None else argv))
            return exit_code
        if _interrupted_within(exc):  # an interrupt a library wrapped in its own error
            if not INTERRUPT_SAID:
                _said_interrupted(argv)
            return EXIT_INTERRUPTED
        raise
    return _code(code)


def _stdout_broken() -> bool:
    """Whether standard output cannot take what it holds (a full disk, an I/O error);
    if so, it is pointed at /dev/null so the interpreter's own flush is quiet."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        silence_stdout()
        return True
    return False


def _os_error(exc: OSError) -> str:
    """One line for an :class:`OSError`: the file (standard output when it is the one
    that failed), the reason and its errno name (``ENOSPC``)."""
    reason = _reason(exc)
    if exc.filename is not None:
        return f"{shown(exc.filename)}: {reason}"
    if _stdout_broken() or _writing_stdout(exc):
        silence_stdout()
        return f"cannot write standard output: {reason}"
    return reason


def _writing_stdout(exc: BaseException) -> bool:
    """Whether ``exc`` was raised by a console writing standard output (a command's
    help into a full disk: what it could not write is gone, so a flush succeeds)."""
    tb = exc.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if type(owner).__name__ == "Console" and getattr(owner, "file", None) is sys.stdout:
            return True
        tb = tb.tb_next
    return False


def _reason(exc: OSError) -> str:
    """An :class:`OSError`'s reason and its errno name: ``No space left on device (ENOSPC)``."""
    code = errno.errorcode.get(exc.errno or 0)
    reason = shown_message(exc.strerror or exc)
    return reason + (f" ({code})" if code else "")


def _not_utf8(argv: list[str]) -> str:
    """The one-line error for arguments with bytes that are not UTF-8, naming the first."""
    for arg in argv:
        if any("\udc80" <= ch <= "\udcff" for ch in arg):
            return f"argument {quoted(arg)} is not valid UTF-8: give text as UTF-8"
    return "an argument is not valid UTF-8: give text as UTF-8"


def _code(code: object) -> int:
    if code is None:
        return EXIT_OK
    return code if isinstance(code, int) else 1


def _entry(*, held: frozenset[int] = frozenset()) -> None:
    code = main(held=held)
    # The command is over: a signal now (while the interpreter shuts down) must not turn
    # its exit code into death by that signal.
    if threading.current_thread() is threading.main_thread():
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        code = EXIT_OK if code in (EXIT_OK, None) else code
    except OSError as exc:  # what stdout still held does not fit (a full disk)
        silence_stdout()
        sys.stderr.write(f"error: cannot write standard output: {_reason(exc)}\n")
        code = EXIT_FAILURE
    raise SystemExit(code)
