"""The stdio transport: message lines read up to a bound (:func:`_bound_stdin_lines`),
those the server refuses answered on the server's write stream (:data:`_ANSWERS`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import anyio
import anyio.from_thread
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCError

from dissensus.integrations.mcp.messages import _refusal
from dissensus.io.limits import MAX_LINE_CHARS


def _bound_stdin_lines(limit: int = MAX_LINE_CHARS) -> None:
    """Make the SDK's stdio transport read a message line of at most ``limit`` characters.

    The transport reads standard input line by line with no bound, so a client that
    sends bytes without a newline (``< /dev/zero``) grows one string until the host runs
    out of memory. Its text wrapper (``mcp.server.stdio._UnownedTextWrapper``) is swapped
    for one whose ``readline`` reads at most ``limit + 1`` characters: a longer line ends
    the session as the end of its input would (one line on stderr says why), since
    framing the client broke cannot be trusted again, and a line that never ends could
    not even be skipped. A message line the server refuses (:func:`_refused`: answered,
    logged) is skipped, the SDK never seeing it. An SDK without that wrapper is left as
    it is."""
    from mcp.server import stdio

    base = getattr(stdio, "_UnownedTextWrapper", None)
    if not isinstance(base, type) or getattr(base, "bounded", False):
        return

    class _BoundedLines(base):  # type: ignore[misc, valid-type]
        bounded = True
        over = False

        def readline(self, size: int | None = -1, /) -> str:
            while not self.over:
                cap = limit + 1 if size is None or size < 0 or size > limit else size
                line: str = super().readline(cap)
                if len(line) > limit and not line.endswith("\n"):
                    self.over = True
                    sys.stderr.write(
                        f"error: a message line over {limit:,} characters: the session ends\n"
                    )
                    sys.stderr.flush()
                elif not _refused(line):
                    return line
            return ""

    stdio._UnownedTextWrapper = _BoundedLines  # type: ignore[misc]


class _Answers:
    """Where the reader sends the answers of what it refuses: the server's write stream,
    whose writer frames them as the SDK's own answers, while the server serves stdio
    (:meth:`.server._Server.run_stdio_async`). The reader runs in a worker thread of
    the server's event loop (the transport reads through ``anyio.to_thread``), which
    waits for its answer to be taken before it reads on."""

    def __init__(self) -> None:
        self._send: Callable[[SessionMessage], Coroutine[Any, Any, None]] | None = None

    @contextlib.contextmanager
    def serving(
        self, send: Callable[[SessionMessage], Coroutine[Any, Any, None]]
    ) -> Iterator[None]:
        self._send = send
        try:
            yield
        finally:
            self._send = None

    def send(self, answer: JSONRPCError) -> bool:
        """Send ``answer``; false when no server is serving, its stream has closed, or
        this is not a worker thread of its event loop."""
        send = self._send
        if send is None:
            return False
        try:
            anyio.from_thread.run(send, SessionMessage(answer))
        except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError):
            return False
        return True


_ANSWERS = _Answers()
"""The stdio server's (one per process: the SDK's transport claims the standard streams)."""


def _refused(line: str) -> bool:
    """True when the message ``line`` is refused (:func:`_refusal`): its answer is sent,
    if it waits for one, and one line on stderr says what was refused and why."""
    refusal = _refusal(line)
    if refusal is None:
        return False
    answer = refusal.answer()
    answered = answer is not None and _ANSWERS.send(answer)
    sys.stderr.write(refusal.log_line(answered))
    sys.stderr.flush()
    return True
