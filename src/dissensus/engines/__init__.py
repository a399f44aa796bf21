"""Execution engines for batch runs: the same decisions, on one process or on a Ray cluster.

``local`` (default) decides in this process: :func:`dissensus.pipeline.execute_run` with
its default executor (:class:`dissensus.pipeline.executors.LocalExecutor`), and routes
with :func:`dissensus.states.stream.route_stream`; no module of this package takes part.
``ray`` spreads blocks of input lines (:mod:`dissensus.engines.blocks`) over Ray workers
(:mod:`dissensus.engines.ray`, the ``ray`` extra: ``decide`` on Ray actors, as an
executor of the same run loop, ``route`` as a Ray Data ``map_batches``) and keeps the
journal in the driver. Both produce the same records, in input order, and the same
rejects; a run started on one engine can be resumed on the other.

Choices: engines are chosen by name (``--engine local|ray``); an unknown name is a
:class:`~dissensus.errors.ConfigError` on field ``engine``, an empty ``--ray-address`` one
on ``ray_address`` (not read as no address, which starts a local instance); the Ray engine is imported
only when chosen, so the core never needs ``ray``.
"""

from __future__ import annotations

from dissensus.errors import ConfigError

__all__ = ["ENGINES", "check_engine"]

ENGINES = ("local", "ray")
"""Names accepted by ``--engine``."""


def check_engine(name: str, *, workers: int | None = None, address: str | None = None) -> str:
    """The normalised engine name; refuse unknown names and Ray-only options on ``local``."""
    key = name.strip().lower()
    if key not in ENGINES:
        raise ConfigError(f"unknown engine {name!r} (expected 'local' or 'ray')", field="engine")
    if key == "local" and (workers is not None or address is not None):
        raise ConfigError("--workers and --ray-address need '--engine ray'", field="engine")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}", field="workers")
    if address is not None and not address.strip():
        raise ConfigError(
            "--ray-address is empty: name the cluster to join (HOST:PORT, auto or "
            "ray://HOST:PORT), or leave the option out to start a local Ray instance",
            field="ray_address",
        )
    if key == "ray":
        from dissensus.engines.ray.fault import check_fault

        check_fault()  # the test switch's form, before any run starts
    return key
