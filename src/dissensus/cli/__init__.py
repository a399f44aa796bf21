"""The ``dissensus`` command line. Each command group lives in its own module.

Exit codes: 0 ok, 1 failure, 2 usage error (bad flag, missing file, invalid
configuration), 3 some input records rejected (the rest processed and written).
"""

from __future__ import annotations

import sys

from dissensus.cli import commands as _commands  # noqa: F401  (registers every command)
from dissensus.cli.app import app
from dissensus.errors import DissensusError

__all__ = ["app", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; user errors print one line, never a traceback."""
    try:
        app(args=argv, prog_name="dissensus")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    except DissensusError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return exc.exit_code
    except BrokenPipeError:
        return 0
    return 0


def _entry() -> None:
    raise SystemExit(main())
