"""The HTTP/1.1 protocol of ``dissensus serve``: uvicorn's, with time limits on request heads
and on answers the client does not read, and JSON answers to requests it cannot parse.

uvicorn bounds a request's body (the service's :class:`~dissensus.serve.limits.RequestTimeout`
does) and an idle keep-alive connection (``timeout_keep_alive``), but not the head: a
client that opens a connection and sends nothing, or sends its request line and headers a
byte at a time and never ends them, holds the connection (and its socket) for as long as it
likes, and a few hundred such clients exhaust the server's file descriptors (the
"slowloris" attack). :func:`head_timeout_protocol` makes uvicorn's ``httptools`` protocol
that closes such a connection.

Choices this module makes:

* **The limit is the request timeout** (``--timeout``, at least :data:`HEAD_MIN_S`): the
  head must be complete that long after the connection opened, or after the first byte of
  a further request on a kept-alive connection. Between requests the keep-alive timeout
  applies, as before.
* **The answer is a 408** (``Connection: close``, a JSON body in the service's error
  shape naming ``<head>``), then the connection is closed; a client that sent nothing at
  all gets the same.
* **A response still being produced is never cut off:** if the previous request on the
  connection is still answering when the limit passes, the check is made again later.
* **An answer the client does not read is bounded too:** when the client reads nothing
  of it while the server's buffer for the connection stays over its high-water mark
  for the same limit (writing paused the whole time), the connection is aborted (a
  reset, not a close, which would wait for the buffered answer to be read). A client
  that never reads its answers could otherwise hold its socket, the server's buffers
  and, pipelining, the requests behind them for as long as it liked. A slow reader that
  keeps reading is never cut off: each resumption of writing restarts the limit.
* **An answer sent before its request's body has all arrived ends the connection** (a
  ``413`` for a ``Content-Length`` over the limit, a ``401``, ``403`` or ``415`` made
  before the body is read, a claim answered while the body a client sent with it is on
  its way, ...): the answer says so (``Connection: close``, so that a client does not
  send its next request on a connection about to end, and lose it), the end of the
  server's side is sent after the answer, what the client still sends is dropped for
  :data:`LINGER_S`, then the connection is closed. uvicorn would read and drop the rest of the body for as long as it came, each
  byte restarting its keep-alive timer and no request timer running any more (the
  request was answered), so a client announcing 100 GB and trickling a byte a second
  held its connection for good: the head and body limits were both behind it.
* **At most** :data:`MAX_PIPELINED` **(32) requests wait behind the one being answered**
  on a connection (HTTP/1.1 pipelining). The parser reads every request a packet holds,
  and uvicorn queued each (its scope, headers and task state: about 1 KB for a 42-byte
  ``GET``) until the ones before it were answered: a few hundred connections, each
  sending 256 KiB of ``GET /healthz`` and reading nothing, took the server to 2.6 GB and
  kept ``/healthz`` unanswered for more than 30 s while it worked through a million
  queued requests. The requests past the bound are dropped unread, with everything the
  client sends after them; the queued ones are answered, then the connection ends as an
  answer sent before its body does (above). Browsers and the SDKs never pipeline.
* **A head over** :data:`MAX_HEAD_BYTES` **(64 KiB)** is answered 431 naming ``<head>``,
  then the connection is closed: the bytes are counted before the parser reads them,
  whose cost grows with the square of a header's length (a 100 MB header value took
  11 s of CPU and answered 200). On a kept-alive connection a further request's head is
  counted from the read after the one it began in (that read, at most 256 KiB, is not).
* **A request that is not HTTP/1.1 the parser can read** (a malformed request line or
  header, ``Content-Length`` together with ``Transfer-Encoding``, a request line past the
  parser's limits) is answered 400 with a JSON body in the service's error shape naming
  ``<request>`` (uvicorn's own answer is plain text), then the connection is closed.
  Nothing of the request is echoed.
* **Both refusals are OpenAI's error body on the OpenAI-compatible paths**
  (:func:`~dissensus.serve.limits.openai_path`), as every other refusal there is:
  ``{"error": {"message", "type", "param", "code"}}`` with ``param`` ``<head>`` /
  ``<request>`` and ``code`` ``request_timeout`` / ``invalid_request``
  (:func:`~dissensus.serve.limits.error_document`), once the request's target has
  arrived whole: a target still arriving (``GET /v1/chat/compl``), or none, names no
  path yet, so the refusal is the service's. The parser hands the target over when the
  space after it is read, and, when a packet ends inside the target, the part that
  arrived at the end of the packet: a part that ends its packet is taken as unfinished.
* **Open connections are bounded**, in all (``--max-connections``, default
  :data:`MAX_CONNECTIONS`) and per client address (``--max-connections-per-address``,
  default :data:`MAX_CONNECTIONS_PER_ADDRESS`; an IPv6 address counts by its /64, as
  :func:`~dissensus.serve.throttle.address_key` counts it). The head limit closes a
  silent connection after ``--timeout``, but a client opening a few hundred a second
  held every file descriptor the process may have meanwhile, and each connection costs
  the server its buffers. A connection past either bound is answered at once, before
  its request is read, ``503`` naming ``<connection>`` with ``Retry-After: 1`` (the
  service's error body: no path has arrived), then ends as a refusal while the client
  still sends does (it lingers :data:`LINGER_S`, then closes). A refused connection
  counts towards neither bound from the moment it is refused: refusals lingering in
  the bounds' places once let one address that kept opening connections hold every
  place, every other client then refused. At most :data:`MAX_LINGERING_REFUSALS` linger
  at once; past them a refusal is closed as soon as its answer is written, so the
  sockets a flood holds stay bounded whatever its rate. The address is the
  connection's peer: behind a reverse proxy every client shares the proxy's, so raise
  the per-address bound there. ``dissensus serve`` raises the process's soft limit on
  open files towards the hard one when the bound needs it, and lowers the bound (with a
  warning) when the hard limit is lower (:func:`connection_bound`).
* **Every one of these refusals carries** ``Cache-Control: no-store`` **and**
  ``X-Content-Type-Options: nosniff`` (:data:`~dissensus.serve.no_store.API_HEADERS`),
  as every ``/v1`` answer does: they are written here, below the application and its
  :class:`~dissensus.serve.no_store.ApiHeaders`, and the path they answer is often not
  known (a target that never arrived whole), so they carry both on every path.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.parse
from collections import Counter
from typing import TYPE_CHECKING, Any, ClassVar, cast

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from dissensus.serve.limits import error_document
from dissensus.serve.no_store import API_HEADERS
from dissensus.serve.throttle import PEER_KEY, address_key

if TYPE_CHECKING:
    from uvicorn._types import ASGISendEvent, HTTPResponseStartEvent

__all__ = [
    "FILES_KEPT",
    "HEAD_MIN_S",
    "MAX_CONNECTIONS",
    "MAX_CONNECTIONS_PER_ADDRESS",
    "MAX_HEAD_BYTES",
    "MAX_LINGERING_REFUSALS",
    "MAX_PIPELINED",
    "connection_bound",
    "head_timeout_protocol",
]

log = logging.getLogger("dissensus.serve")

MAX_CONNECTIONS = 1024
"""Open connections the server holds by default; a further one is refused 503."""

MAX_CONNECTIONS_PER_ADDRESS = 128
"""Open connections one client address may hold by default; a further one is refused 503."""

FILES_KEPT = 128
"""Open files kept out of the connections' reach (the journal, logs, the model clients,
the refusals lingering)."""

MAX_LINGERING_REFUSALS = 64
"""Refused connections that may linger (dropping what their client still sends before
closing) at once; more are closed as soon as their answer is written."""

HEAD_MIN_S = 1.0
"""The shortest time a client gets to send a request head."""

MAX_HEAD_BYTES = 64 * 1024
"""The most bytes a request head (request line and headers) may take; more is 431."""

MAX_PIPELINED = 32
"""Requests a connection may send ahead of its answers (pipelined) beyond the one being
answered; the connection ends after answering them."""

LINGER_S = 2.0
"""How long a connection refused 431 drops what its client still sends before closing."""


class _HeadTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's protocol, closing a connection whose request head is late (see the module)."""

    head_timeout_s = 60.0
    max_connections = MAX_CONNECTIONS
    max_per_address = MAX_CONNECTIONS_PER_ADDRESS
    open_by_address: ClassVar[Counter[str]] = Counter()
    """Open connections per client address (each protocol class made by
    :func:`head_timeout_protocol` has its own)."""
    lingering: ClassVar[list[int]] = [0]
    """Refused connections lingering now (one cell, each protocol class its own)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._address: str | None = None
        """The client address this connection counts under (``None``: not counted)."""
        self._lingering = False
        """Whether this connection is a refusal lingering (counted in :attr:`lingering`)."""
        self._head_timer: asyncio.TimerHandle | None = None
        self._packet = b""
        """The bytes the parser is reading (of the last ``data_received``)."""
        self._target_whole = False
        """Whether the current request's target (uvicorn's ``url``) arrived whole."""
        self._head_seen = 0
        """Bytes of the head now arriving, counted before the parser reads them."""
        self._tail = b""
        """The last bytes of the head so far (a packet may end inside its blank line)."""
        self._discarding = False
        """Whether what the client still sends is dropped (after a 431, until closing)."""
        self._stall_timer: asyncio.TimerHandle | None = None
        """Armed while writing is paused on a client that does not read its answer."""
        self._over = False
        """Whether the client pipelined past :data:`MAX_PIPELINED`: the requests after
        that are dropped and the connection ends once the queued ones are answered."""
        self._told_close: RequestResponseCycle | None = None
        """The request whose answer said ``Connection: close`` (:meth:`_tell_close`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._address = address_key(self.client[0] if self.client else None)
        self.open_by_address[self._address] += 1
        if len(self.connections) > self.max_connections:
            self._refuse_connection(
                f"the server holds its most connections ({self.max_connections})"
            )
        elif self.open_by_address[self._address] > self.max_per_address:
            self._refuse_connection(
                f"this address holds the most connections one may ({self.max_per_address})"
            )
        else:
            self._arm()

    def _refuse_connection(self, why: str) -> None:
        """Answer a connection past a bound before reading anything of it, and count it
        towards neither bound from now on (see the module)."""
        self._discarding = True
        self.connections.discard(self)
        self._uncount()
        linger = self.lingering[0] < MAX_LINGERING_REFUSALS
        if linger:
            self.lingering[0] += 1
            self._lingering = True
        self._refuse(
            "503 Service Unavailable",
            f"{why}: try again shortly",
            "<connection>",
            linger=linger,
            headers={"Retry-After": "1"},
        )

    def _uncount(self) -> None:
        """Take this connection out of its address's count (once)."""
        if self._address is not None:
            left = self.open_by_address[self._address] - 1
            if left > 0:
                self.open_by_address[self._address] = left
            else:
                del self.open_by_address[self._address]
            self._address = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unstall()
        self._uncount()
        if self._lingering:
            self._lingering = False
            self.lingering[0] -= 1
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        # The transport's buffer is over its high-water mark: the client is not reading
        # as fast as the answer is written. Bounded (see the module docstring).
        super().pause_writing()
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.head_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        self._unstall()
        super().resume_writing()

    def _unstall(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _stalled(self) -> None:
        """The client has read nothing of its answer for the whole limit: abort (a close
        would wait, for ever, for the buffered answer to be read)."""
        self._stall_timer = None
        if not self.transport.is_closing() or self.transport.get_write_buffer_size():
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        self._packet = data
        if self._discarding:
            return
        if self._head_timer is not None and not self._head_fits(data):
            # The parser reads the head up to the bound (so a refusal on an OpenAI path
            # is OpenAI's, once the target is in), no further.
            if (room := MAX_HEAD_BYTES - self._head_seen) > 0:
                super().data_received(data[:room])
            if self.transport.is_closing():  # refused by the parser meanwhile
                return
            self._disarm()
            self._refuse(
                "431 Request Header Fields Too Large",
                f"request head over {MAX_HEAD_BYTES} bytes",
                "<head>",
                linger=True,
            )
            return
        super().data_received(data)

    def _head_fits(self, data: bytes) -> bool:
        """Count ``data`` into the head arriving (up to its blank line, when it holds
        it); whether the head is still within :data:`MAX_HEAD_BYTES`. Counted before the
        parser reads it: the parser builds a header's value by concatenation, so its
        cost grows with the square of the value's length (100 MB took 11 s of CPU)."""
        end = (self._tail + data).find(b"\r\n\r\n")
        seen = self._head_seen + (len(data) if end < 0 else max(end - len(self._tail), 0))
        if seen > MAX_HEAD_BYTES:
            return False
        self._head_seen = seen
        self._tail = (self._tail + data)[-3:]
        return True

    def on_message_begin(self) -> None:
        if self._over:  # a dropped request (past MAX_PIPELINED): nothing of it is kept
            return
        super().on_message_begin()
        # The connection's own peer, which no header can change (uvicorn's proxy headers
        # rewrite ``client`` from X-Forwarded-For): what the login throttle counts.
        self.scope[PEER_KEY] = self.client[0] if self.client else None  # type: ignore[literal-required]
        self._target_whole = False
        self._arm()

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self._over:
            super().on_header(name, value)

    def on_url(self, url: bytes) -> None:
        if self._over:
            return
        super().on_url(url)
        # The parser calls this when the target ends (at the space after it), and with
        # what arrived so far when a packet ends inside it: such a part ends the packet.
        self._target_whole = not (url and self._packet.endswith(url))

    def on_headers_complete(self) -> None:
        self._disarm()
        self._head_seen, self._tail = 0, b""
        if not self._over and len(self.pipeline) >= MAX_PIPELINED:
            # Too many requests ahead of their answers: this one and every later one
            # (of this packet, and all the client sends after it) are dropped.
            self._over = True
            self._discarding = True
        if self._over:
            return
        super().on_headers_complete()
        if self.cycle is not None:
            self._tell_close(self.cycle)

    def _tell_close(self, cycle: RequestResponseCycle) -> None:
        """Make ``cycle``'s answer say ``Connection: close`` when it starts before its
        request's body has all arrived: the connection ends after it (see the module).
        uvicorn would close at once on that header, with the client's bytes unread, which
        can reset the connection before the answer is read; the connection lingers
        instead (:meth:`on_response_complete`)."""
        send = cycle.send

        async def told(message: ASGISendEvent) -> None:
            if message["type"] != "http.response.start" or not cycle.more_body:
                await send(message)
                return
            headers = list(message.get("headers", []))
            if not any(name.lower() == b"connection" for name, _ in headers):
                headers.append((b"connection", b"close"))
            keep_alive = cycle.keep_alive
            await send(cast("HTTPResponseStartEvent", {**message, "headers": headers}))
            self._told_close = cycle
            cycle.keep_alive = keep_alive  # the close is :meth:`_linger`'s

        cycle.send = told  # type: ignore[method-assign]

    def on_body(self, body: bytes) -> None:
        if not self._over:  # a dropped request's body is not the last queued one's
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._over:
            super().on_message_complete()

    def _arm(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._late)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _late(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self._arm()  # the previous request is still answering: look again later
            return
        seconds = f"{self.head_timeout_s:g}"
        self._refuse(
            "408 Request Timeout", f"request head not received within {seconds} s", "<head>"
        )

    def on_response_complete(self) -> None:
        cycle = self.cycle
        last = not self.pipeline  # no queued request left: ``cycle`` is the one answered
        # Its body still arriving, or it was when the answer started (which said so).
        unread = last and cycle is not None and (cycle.more_body or cycle is self._told_close)
        self._told_close = None
        super().on_response_complete()
        if (unread or (self._over and last)) and not self.transport.is_closing():
            self._linger()

    def _linger(self) -> None:
        """End the server's side, drop what the client still sends for
        :data:`LINGER_S`, then close: closing with unread bytes would reset the
        connection, and the client could lose the answer just written."""
        if self.timeout_keep_alive_task is not None:
            self.timeout_keep_alive_task.cancel()
            self.timeout_keep_alive_task = None
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self._discarding = True
        self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request its parser refused, as JSON (see the module)."""
        self._refuse("400 Bad Request", "malformed HTTP request", "<request>")

    def _path(self) -> str:
        """The decoded path of the current request's target (as the router sees it), or
        ``""`` when the target did not arrive whole or is not one."""
        url = getattr(self, "url", b"")
        if not self._target_whole or not url:
            return ""
        try:
            raw = httptools.parse_url(url).path
            path = raw.decode("ascii") if raw else ""
        except (httptools.HttpParserInvalidURLError, UnicodeDecodeError):
            return ""
        return urllib.parse.unquote(path) if "%" in path else path

    def _refuse(
        self,
        status: str,
        error: str,
        field: str,
        *,
        linger: bool = False,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Answer ``status`` with the JSON error body of the request's path (OpenAI's on
        an OpenAI-compatible one), then close the connection. With ``linger`` (a client
        still sending), the answer is followed by the end of the server's side and what
        the client sends is dropped for :data:`LINGER_S` before closing: closing with
        unread bytes would reset the connection, and the client could lose the answer."""
        document = error_document(int(status.split()[0]), error, field, path=self._path())
        body = json.dumps(document).encode()
        sent = [(n.decode(), v.decode()) for n, v in API_HEADERS] + list((headers or {}).items())
        extra = "".join(f"{name}: {value}\r\n" for name, value in sent)
        head = (
            f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        if linger:
            self._linger()
            return
        self.transport.close()


def head_timeout_protocol(
    seconds: float,
    *,
    max_connections: int = MAX_CONNECTIONS,
    max_per_address: int = MAX_CONNECTIONS_PER_ADDRESS,
) -> type[HttpToolsProtocol]:
    """uvicorn's ``httptools`` protocol with request heads limited to ``seconds`` (at
    least :data:`HEAD_MIN_S`) and open connections bounded in all and per address: pass
    it as ``uvicorn.Config(http=...)``."""
    limit = max(HEAD_MIN_S, float(seconds))
    return type(
        "HeadTimeoutProtocol",
        (_HeadTimeoutProtocol,),
        {
            "head_timeout_s": limit,
            "max_connections": max_connections,
            "max_per_address": max_per_address,
            "open_by_address": Counter(),
            "lingering": [0],
        },
    )


def connection_bound(wanted: int) -> int:
    """The most connections the process can hold, up to ``wanted``: the soft limit on
    open files is raised towards the hard one when ``wanted`` and :data:`FILES_KEPT`
    need more, and the bound is lowered (with one warning line) when even the hard
    limit is too low. Where there are no such limits (not POSIX), ``wanted``."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return wanted
    need = wanted + FILES_KEPT
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need:
        raised = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY or soft >= need:
        return wanted
    bound = max(1, soft - FILES_KEPT)
    log.warning(
        "warning: the process may open %d files: at most %d connections, not %d "
        "(raise 'ulimit -n' for more)",
        soft,
        bound,
        wanted,
    )
    return bound
