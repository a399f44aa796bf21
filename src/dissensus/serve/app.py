"""``dissensus serve``: the decision layer as an HTTP service (FastAPI).

:func:`create_app` builds the app: the shared :class:`~dissensus.serve.service.Service`,
the error handlers (:mod:`.http`), one router per area (:mod:`.routes`: health, decide
and runs, library calls, review; and the review pages: login, queue, case, audits, with
their shared helpers in :mod:`.pages`), the chat door, the API docs (the schema's answers
and refusals: :mod:`.api_schema`), and the middleware (timeouts, body size, browser
guard, and the ``/v1`` answers' ``Cache-Control: no-store`` and ``nosniff``:
:mod:`.no_store`). Every endpoint is an adapter over the library call
the CLI makes: ``POST /v1/decide`` runs :func:`dissensus.pipeline.execute_run`
(:mod:`.runs`), the review endpoints and pages go through
:class:`~dissensus.serve.journal_adapter.ReviewDesk`, and route / vote / negotiate /
verify / bound through :mod:`.library_calls`; ``/docs`` and ``/redoc`` are served from
local files (:mod:`.api_docs`). See ``docs/serve.md`` for every endpoint, status code
and limit.

Choices this module makes:

* Errors are ``{"error": message, "field": path-or-null}``: 400 unreadable body,
  401 no or unknown token, 403 wrong role (or a foreign ``Host``, a cross-origin
  write: :mod:`.origin`), 404 unknown run / review item (never naming the journal),
  408 body not received in time, 409 conflict (stale content hash, already resolved
  (with who and when), claimed by another reviewer, run not finished), 413 body, panel
  count, agents or panel text over the limit, 415 a non-JSON write, 422 invalid input
  (with the field path the CLI would name), 500 ``internal error`` (nothing more),
  504 request timeout. On the OpenAI-compatible paths (``/v1/chat/completions``,
  ``/v1/models``, ``/v1/cases/{id}``, and any other path under ``/v1/chat/``,
  ``/v1/models/`` or ``/v1/cases/`` but the review endpoint ``/v1/cases/{ref}/confirm``:
  :func:`~dissensus.serve.limits.openai_path`) every refusal, the middleware's and the
  route matching's (404, 405) included, is OpenAI's ``{"error": {"message", "type",
  "param", "code"}}`` with the same status.
* Every ``/v1`` response is ``Cache-Control: no-store`` and ``X-Content-Type-Options:
  nosniff``, as the review pages are (:mod:`.no_store`): the API's answers carry case
  content too; an event stream keeps its own ``Cache-Control``.
* A query parameter a JSON API route does not take is ``422`` naming it
  (:func:`~dissensus.serve.http.known_query`): a misspelt ``theta`` for ``theta_s`` was
  ignored, and the answer made under the policy's values. The OpenAI-compatible paths
  ignore unknown parameters, as OpenAI's API does (clients add their own, such as
  ``api-version``).
* ``HEAD`` is answered on every ``GET`` path, as that ``GET`` without its body
  (:mod:`.head`).
* A path that names a route but for a trailing slash is a ``307`` to the route with a
  relative ``Location`` (:mod:`.slashes`), never one built from the ``Host`` header.
* An error response keeps the headers of the exception it answers: a 405 names the
  allowed methods (``Allow``), a 401 asks for a bearer token (``WWW-Authenticate``).
  ``Allow`` names every method the path takes, from all the routes on it (the router
  named only the first route's: ``POST`` of a claim, without its ``DELETE``), and
  ``HEAD`` wherever ``GET`` is (:func:`~dissensus.serve.http.allowed_methods`).
* A single panel answers with its record; a list answers ``{run_id, status, records,
  rejects}`` (status 200 also when some items were rejected, as the CLI still decides
  the rest; ``rejected`` counts them).
* The journal is used from the event loop only (every handler is ``async``), so one
  connection serves the whole process; SQLite's own locking serialises it with other
  processes (the CLI) sharing the file.
* CPU work of a request (parsing the body, validating panels, route, vote, verify,
  bound; negotiate on a loop of its own: :mod:`.library_calls`) runs in a worker thread
  (``run_in_threadpool``), so ``/healthz`` and other
  requests keep being answered while it runs; the bounds of :mod:`dissensus.io.limits`
  (agents per panel, characters per field) keep each panel's work small. A decide
  body of at most :data:`~dissensus.serve.http.INLINE_BODY_BYTES` (a few panels) is
  parsed and validated on the event loop: that takes tens of microseconds, less than
  the hop to a worker thread.
* A body nested deeper than :data:`dissensus.io.jsonl.MAX_DEPTH` levels, or holding an
  integer Python refuses to read (more than 4,300 digits), is ``400`` naming
  ``<depth>`` / ``<json>``; any error no handler expected is a JSON ``500`` that names
  nothing of the server (no path, no exception text).
* ``/v1`` takes bearer tokens only (no cookies), so it needs no CSRF protection; the
  review page takes its session cookie and checks a CSRF token on every form. Foreign
  ``Host`` names, cross-origin writes and non-JSON writes are refused before any route
  (:mod:`.origin`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from dissensus.errors import ConfigError
from dissensus.serve import api_docs, api_schema, chat, routes
from dissensus.serve.head import HeadAsGet
from dissensus.serve.http import ApiError, install_errors, limits_of
from dissensus.serve.journal_adapter import open_journal
from dissensus.serve.limits import BodyLimit, RequestTimeout
from dissensus.serve.no_store import ApiHeaders
from dissensus.serve.origin import BrowserGuard, allowed_hosts
from dissensus.serve.pages import install_page_errors
from dissensus.serve.service import Service
from dissensus.serve.settings import ServeSettings, is_loopback
from dissensus.serve.slashes import SlashRedirect
from dissensus.signing import signer_from_env
from dissensus.store.journal import Journal

__all__ = ["STARTUP_ERROR", "STARTUP_ERROR_DEFERRED", "ApiError", "Service", "create_app"]

STARTUP_ERROR_DEFERRED = "startup_error_deferred"
"""``app.state`` flag set by :mod:`dissensus.serve.server`: a configuration error while
starting up is kept (as :data:`STARTUP_ERROR`) rather than raised, so the server can end
without serving and report it in one line."""
STARTUP_ERROR = "startup_error"
"""``app.state`` attribute holding that configuration error."""


def create_app(
    settings: ServeSettings | None = None,
    *,
    journal: Journal | None = None,
) -> FastAPI:
    """The service over ``settings.journal`` (or an already open ``journal``)."""
    settings = settings or ServeSettings()
    owned = journal is None
    store = (
        journal if journal is not None else open_journal(settings.journal, signer=signer_from_env())
    )
    service = Service(settings, store)

    @asynccontextmanager
    async def lifespan(started: FastAPI) -> AsyncIterator[None]:
        try:
            # Load the encoder and the acceptance libraries before the first request, not
            # while answering one (imports and model loading hold up the whole process).
            await asyncio.to_thread(service.runner.warm)
            # The panel's member clients too (the model SDK's import takes seconds).
            await started.state.chat.awarm()
        except ConfigError as exc:
            if not getattr(started.state, STARTUP_ERROR_DEFERRED, False):
                raise
            # dissensus serve's server ends without serving and reports it in one line
            # (exit 2), not as the server's start-up traceback.
            setattr(started.state, STARTUP_ERROR, exc)
        watch = asyncio.create_task(service.shift_watch.run())
        yield
        await service.shift_watch.stop(watch)
        await service.runner.close()
        await started.state.chat.aclose()
        if owned:
            store.close()

    app = FastAPI(
        title="dissensus",
        summary="Decide under disagreement: the decision layer as an HTTP service.",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,  # SlashRedirect: relative, never from Host
    )
    app.state.service = service
    install_errors(app)
    install_page_errors(app)  # after the API's: a page load's journal outage is a page
    routes.install(app)
    chat.install(app, spec=service.spec, journal=store, limits=limits_of(service))
    routes.install_pages(app)
    api_docs.install(app)
    api_schema.install(app)  # the schema's refusals are the server's own
    app.router.default = SlashRedirect(app.router, app.router.default)
    app.add_middleware(HeadAsGet)
    app.add_middleware(RequestTimeout, seconds=settings.request_timeout_s)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    hosts = allowed_hosts(settings.host, settings.allow_hosts, loopback=is_loopback(settings.host))
    app.add_middleware(BrowserGuard, hosts=hosts)
    app.add_middleware(ApiHeaders)  # outermost: the guard's refusals get them too
    return app


def _version() -> str:
    from dissensus import __version__

    return __version__
