"""``dissensus serve``: the decision layer as an HTTP service with a web review queue.

>>> from dissensus.serve import ServeSettings, create_app      # doctest: +SKIP
>>> app = create_app(ServeSettings(journal="journal.sqlite"))  # doctest: +SKIP
>>> import uvicorn; uvicorn.run(app, host="127.0.0.1", port=8000)  # doctest: +SKIP

Modules: :mod:`.app` (the endpoints), :mod:`.auth` (tokens, roles, sessions, CSRF),
:mod:`.limits` (body size, timeout), :mod:`.runs` (decide runs, progress),
:mod:`.journal_adapter` (claims, resolutions, history), :mod:`.library_calls` (route,
vote, negotiate, verify, bound), :mod:`.pages` (the HTML review pages), :mod:`.api_docs`
(``/docs`` and ``/redoc`` from local files), :mod:`.server` (uvicorn with a shutdown that
drains runs). Needs the ``serve`` extra (FastAPI, uvicorn, Jinja2, python-multipart,
fastapi-offline). See ``docs/serve.md``.
"""

from dissensus.serve.app import Service, create_app
from dissensus.serve.settings import ServeSettings, check_exposure, is_loopback

__all__ = ["ServeSettings", "Service", "check_exposure", "create_app", "is_loopback"]
