"""The local engine's functions under engine names (the reference the Ray engine equals).

:func:`decide_local` is :func:`dissensus.pipeline.batch.execute_run` (bounded
concurrency, records in input order, the journal written as cases progress) and
:func:`route_local` is :func:`dissensus.states.stream.route_stream`: aliases, for
callers that pick an engine's functions by module. Nothing in the package uses them:
the command line calls ``execute_run`` (whose default executor,
:class:`dissensus.pipeline.executors.LocalExecutor`, is the local engine) and
``route_stream`` directly. :mod:`dissensus.engines.ray` has the drop-in twins
``decide_ray`` and ``route_ray``.
"""

from __future__ import annotations

from dissensus.pipeline.batch import execute_run as decide_local
from dissensus.states.stream import route_stream as route_local

__all__ = ["decide_local", "route_local"]
