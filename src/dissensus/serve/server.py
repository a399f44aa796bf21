"""Running the service on uvicorn with a shutdown that ends runs and event streams cleanly.

uvicorn's graceful shutdown stops accepting connections, waits up to
``timeout_graceful_shutdown`` seconds for open connections to finish, then cancels them
and only then runs the application's shutdown. An event stream (``GET
/v1/runs/{id}/events``) of a run still deciding would hold its connection for the whole
wait and then be cut off mid-stream. :class:`Server` therefore starts, together with
uvicorn's shutdown, :meth:`~dissensus.serve.runs.Runner.drain`: runs get
:data:`RUN_GRACE_FRACTION` of the graceful time to finish, the rest are cancelled
(``incomplete``, resumable) and their streams end with that final event, so the server
exits before uvicorn's own timeout fires.

Chat requests (``POST /v1/chat/completions``) are drained the same way, by
:meth:`~dissensus.panels.PanelChat.adrain` on the same grace: a request whose members
answer within it is answered as usual; one still waiting on its members then is ended
(its members cancelled, nothing journalled) with OpenAI's error body, ``503``
``shutting_down``, ``Retry-After`` and ``x-should-retry: true`` (a streaming request
too, as JSON, before its stream starts), rather than being cancelled by uvicorn's
timeout into a bare ``500`` with a traceback. A request whose decision is already
running gets the same grace and is answered normally (a decision takes milliseconds; a
case is never left half journalled). A decision still running when the grace is over
waits on a model follow-up (a live re-ask, a deliberation): its model calls are then cut
off, each a failed call, so its follow-up fails and the pipeline ends the case as it
ends any failed follow-up (journalled, most often escalated to a human), and its request
is answered normally within :data:`CUT_GRACE_FRACTION` more of the graceful time. One
that still has not ended then (a follow-up asleep in a retry's back-off) has its request
answered ``503`` ``shutting_down_case_unfinished`` naming its case, with
``x-should-retry: false``, and is stopped when the application shuts down (its run
partial and resumable, as a run cancelled by the shutdown is). So the server exits
within uvicorn's graceful time whatever a follow-up model does.

The socket is bound before anything is printed (:func:`listen`): a port in use is a
one-line configuration error (exit 2), never a review URL followed by a failure. A
configuration error while the application starts up (loading the similarity backend,
the acceptance libraries, the member clients) ends the server before it serves and is
raised from :func:`serve` (one line, exit 2), not logged as uvicorn's start-up traceback.

Once started (the application's start-up done: encoder, acceptance libraries, member
clients loaded), the objects that start-up made are moved out of the garbage collector's
generations (``gc.freeze``): they live as long as the process, and a full collection
would otherwise walk every one of them again, well over a hundred thousand objects (the web
framework, the model SDK's types), for garbage that only requests make.

The connections speak uvicorn's HTTP/1.1 with a time limit on request heads (the request
timeout: :mod:`.protocol`), so a client cannot hold a connection by never ending one.

Before it serves, a panel whose settings cannot work as meant under the service's
``--timeout`` is one ``warning:`` line each on stderr (the ``dissensus.serve`` logger:
:func:`~dissensus.serve.chat.start_warnings`): a request time shorter than
``panel.deadline_s``, a ``budget.max_calls`` below the number of members. The server
starts all the same, as a policy that can still answer some requests.

The graceful time is :data:`GRACEFUL_SHUTDOWN_S` unless ``$DISSENSUS_SERVE_SHUTDOWN_S``
gives another whole number of seconds (at least 1), e.g. to fit a container platform's
termination grace period; an unreadable value is a one-line configuration error.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
from typing import Any

import uvicorn

from dissensus.errors import ConfigError
from dissensus.panels import PanelChat
from dissensus.serve.app import STARTUP_ERROR, STARTUP_ERROR_DEFERRED
from dissensus.serve.chat import start_warnings
from dissensus.serve.protocol import (
    MAX_CONNECTIONS,
    MAX_CONNECTIONS_PER_ADDRESS,
    connection_bound,
    head_timeout_protocol,
)
from dissensus.serve.runs import Runner

__all__ = [
    "CUT_GRACE_FRACTION",
    "GRACEFUL_SHUTDOWN_S",
    "RUN_GRACE_FRACTION",
    "SHUTDOWN_ENV",
    "Server",
    "graceful_shutdown_s",
    "listen",
    "serve",
]

GRACEFUL_SHUTDOWN_S = 5.0
"""Seconds uvicorn waits for open connections on shutdown."""

RUN_GRACE_FRACTION = 0.6
"""Share of that time runs in progress get to finish before they are cancelled."""

CUT_GRACE_FRACTION = 0.2
"""Share of that time a chat decision whose model calls were cut off at the end of the
grace gets to end (:meth:`~dissensus.panels.PanelChat.adrain`); the rest is left for the
answers to be written before uvicorn's own timeout."""

SHUTDOWN_ENV = "DISSENSUS_SERVE_SHUTDOWN_S"
"""Environment variable overriding :data:`GRACEFUL_SHUTDOWN_S` (whole seconds, at least 1)."""


def graceful_shutdown_s(environ: dict[str, str] | None = None) -> int:
    """The graceful-shutdown time in seconds: ``$DISSENSUS_SERVE_SHUTDOWN_S`` or the default."""
    raw = (os.environ if environ is None else environ).get(SHUTDOWN_ENV, "").strip()
    if not raw:
        return int(GRACEFUL_SHUTDOWN_S)
    try:
        seconds = int(raw)
    except ValueError:
        seconds = 0
    if seconds < 1:
        raise ConfigError(
            f"${SHUTDOWN_ENV} must be a whole number of seconds, at least 1; got {raw!r}",
            field=SHUTDOWN_ENV,
        )
    return seconds


class Server(uvicorn.Server):
    """uvicorn's server, draining the service's runs and chat requests when it shuts down."""

    def __init__(
        self,
        config: uvicorn.Config,
        runner: Runner,
        chat: PanelChat | None = None,
        state: Any = None,
    ) -> None:
        super().__init__(config)
        self.runner = runner
        self.chat = chat
        self.state = state
        if state is not None:
            setattr(state, STARTUP_ERROR_DEFERRED, True)

    def startup_error(self) -> ConfigError | None:
        """The configuration error the application's start-up met, if any."""
        found = getattr(self.state, STARTUP_ERROR, None) if self.state is not None else None
        return found if isinstance(found, ConfigError) else None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.startup_error() is not None:
            self.should_exit = True  # shut down at once, serving nothing
            return
        # What start-up loaded (modules, the app, the policy, the models) lives as long as
        # the process: out of the collector's sight, a full collection walks only what
        # requests made since.
        gc.collect()
        gc.freeze()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        graceful = self.config.timeout_graceful_shutdown or GRACEFUL_SHUTDOWN_S
        grace = graceful * RUN_GRACE_FRACTION
        drains = [asyncio.create_task(self.runner.drain(grace))]
        if self.chat is not None:
            cut = graceful * CUT_GRACE_FRACTION
            drains.append(asyncio.create_task(self.chat.adrain(grace, cut)))
        try:
            await super().shutdown(sockets)
        finally:
            await asyncio.gather(*drains)


def listen(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` and listening (``ConfigError`` naming the address
    when it cannot be: in use, not an address of this machine, no permission).

    It listens at once, before the application starts (a policy's embedding model can
    take seconds to load): a client that connects as soon as the start-up line is
    printed waits in the backlog until the server answers, instead of being refused."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # Named TCP (not protocol 0): asyncio turns Nagle's algorithm off (TCP_NODELAY) only
    # on connections whose socket says IPPROTO_TCP, and accepted sockets inherit it.
    # Without it a response written in two parts (head, then body) waits for the
    # client's delayed ACK: about 40 ms on every request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(_BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}", field="port"
        ) from None
    sock.set_inheritable(True)
    return sock


log = logging.getLogger("dissensus.serve")

_BACKLOG = 2048
"""Connections the kernel queues before the server accepts them (uvicorn's default)."""


def serve(
    app: Any,
    runner: Runner,
    *,
    sock: socket.socket,
    shutdown_s: int | None = None,
    head_timeout_s: float = 60.0,
    max_connections: int = MAX_CONNECTIONS,
    max_connections_per_address: int = MAX_CONNECTIONS_PER_ADDRESS,
) -> None:
    """Serve ``app`` on the bound ``sock`` (:func:`listen`) until SIGTERM / SIGINT, with
    ``shutdown_s`` seconds of graceful shutdown (default: :func:`graceful_shutdown_s`);
    a request head must arrive within ``head_timeout_s``, and at most
    ``max_connections`` are open, ``max_connections_per_address`` from one address
    (:mod:`.protocol`; the first bound lowered to what the open-files limit allows)."""
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=graceful_shutdown_s() if shutdown_s is None else shutdown_s,
        http=head_timeout_protocol(
            head_timeout_s,
            max_connections=connection_bound(max_connections),
            max_per_address=max_connections_per_address,
        ),
    )
    state = getattr(app, "state", None)
    chat = getattr(state, "chat", None)
    if isinstance(chat, PanelChat):
        service = getattr(state, "service", None)
        timeout = getattr(getattr(service, "settings", None), "request_timeout_s", None)
        for line in start_warnings(chat, timeout if isinstance(timeout, int | float) else None):
            log.warning("warning: %s", line)
    server = Server(config, runner, chat if isinstance(chat, PanelChat) else None, state)
    server.run(sockets=[sock])
    failed = server.startup_error()
    if failed is not None:  # one line and exit 2 (dissensus serve), not a traceback
        raise failed
