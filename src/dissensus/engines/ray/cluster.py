"""Ray itself for the driver: the engine's options, Ray imported only when used (a
:class:`~dissensus.errors.ConfigError` naming the ``ray`` extra when it is missing), a
cluster joined or a local instance started (:func:`ensure_ray`: the cluster address,
``--ray-address`` or else ``$RAY_ADDRESS`` as Ray reads it, probed first, the program's SIGTERM handler kept (also while ``ray.init`` runs: a
SIGTERM then is an interrupt, not Ray's exit 15), ``--workers`` checked against the
cluster's CPUs, or :data:`LOCAL_WORKERS_PER_CPU` times this machine's before a local
instance is started), and the static
similarity table distilled before any worker starts. :class:`RayOptions` refuses what
the command line refuses (workers or lines a block below 1, an empty address) where it
is made, so a library caller gets the same one-line error."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
from dataclasses import dataclass
from typing import Any

from dissensus.errors import ConfigError

LINES_PER_BLOCK = 512
"""Default input lines per block."""


_MISSING = "the Ray engine needs the 'ray' extra (pip install 'dissensus[ray]')"


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide to run."""

    address: str | None = None
    """Ray cluster to join (``ray://`` or ``auto``); None: start a local instance."""
    workers: int | None = None
    """Worker actors (default: the cluster's CPUs)."""
    lines_per_block: int = LINES_PER_BLOCK
    """Input lines per block."""

    def __post_init__(self) -> None:
        # Checked where the options are made, so a library caller's mistake is named as
        # the command line's is, before Ray starts (0 workers read as "all CPUs", a
        # negative count reached ray.init, 0 lines a block planned nothing or failed).
        workers, lines = self.workers, self.lines_per_block
        if workers is not None and (type(workers) is not int or workers < 1):
            raise ConfigError(f"--workers must be at least 1, got {workers!r}", field="workers")
        if type(lines) is not int or lines < 1:
            raise ConfigError(
                f"lines_per_block must be at least 1, got {lines!r}", field="lines_per_block"
            )
        if self.address is not None:
            _check_address(self.address)


def _check_address(address: str) -> None:
    """Refuse an empty (or blank) cluster address: an unset variable in
    ``--ray-address "$RAY_ADDRESS"`` would otherwise start a local instance instead of
    joining the cluster meant."""
    if not address.strip():
        raise ConfigError(
            "--ray-address is empty: name the cluster to join (HOST:PORT, auto or "
            "ray://HOST:PORT), or leave the option out to start a local Ray instance",
            field="ray_address",
        )


LOCAL_WORKERS_PER_CPU = 8
"""The most workers a local Ray instance is started with, per CPU this process may run
on: more than the cores is a choice (workers mostly waiting on model calls); far more is
a typo (``--workers 500`` for 50), refused before Ray starts."""


def _local_cpus() -> int:
    """The CPUs this process may run on (its affinity where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - no affinity on this system
        return os.cpu_count() or 1


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(_MISSING, field="engine") from exc
    return ray


def ensure_ray(options: RayOptions) -> int:
    """Connect to (or start) Ray, the program's SIGTERM handler kept; the number of
    workers to use."""
    ray = _ray()
    # Ray itself joins the cluster $RAY_ADDRESS names when ray.init is given no address
    # (``ray job submit`` sets it for its drivers): the same address, checked and named
    # as --ray-address is (unchecked it was retried for minutes, or a raw ValueError when
    # --workers asked ray.init for CPUs of a cluster it joined).
    address, option = options.address, "--ray-address"
    if not address and (from_env := os.environ.get(_ADDRESS_ENV, "").strip()):
        address, option = from_env, f"${_ADDRESS_ENV}"
    if not ray.is_initialized():
        # Keyword arguments of ray.init, passed through as they are.
        kwargs: dict[str, Any] = {
            "include_dashboard": False,
            "log_to_driver": False,
            # Ray's own INFO and WARNING lines (its start, a cluster joined) are not the
            # command's output: its errors are still shown, and a worker's error comes
            # back to the driver with the block it failed (Ray's exception).
            "logging_level": logging.ERROR,
        }
        if address:
            kwargs["address"] = address
        else:
            if options.workers:
                here = _local_cpus()
                most = LOCAL_WORKERS_PER_CPU * here
                if options.workers > most:
                    # A local instance claims that many CPUs and starts a process per
                    # worker on the cores there are. A few more workers than cores is a
                    # choice (workers waiting on model calls); a typo of 500 for 50 is not.
                    raise ConfigError(
                        f"--workers {options.workers} is more than {LOCAL_WORKERS_PER_CPU} "
                        f"workers for each of the {here} CPU(s) of this machine (a local Ray "
                        f"instance starts a process per worker): use --workers {most} or "
                        "fewer, or --ray-address to join a cluster",
                        field="workers",
                    )
                kwargs["num_cpus"] = options.workers
        if address:
            _probe(address, option)
        own = _own_sigterm()
        try:
            ray.init(**kwargs)
        except SystemExit as exc:
            # Ray's SIGTERM handler, in place from the start of ray.init, exits the process
            # (``sys.exit(15)``: exit 15, no word said) when SIGTERM lands while Ray starts;
            # where the program made SIGTERM an interrupt, it is one here too.
            if own is None or exc.code != signal.SIGTERM:
                raise
            _shutdown(ray)
            raise KeyboardInterrupt(signal.SIGTERM.name) from None
        except (ConnectionError, ValueError) as exc:
            # No cluster at that address, or an address this installation cannot use
            # (``ray://`` without Ray's client): a setting to fix, named as such.
            if not address:
                raise
            raise ConfigError(
                f"cannot join the Ray cluster at {address!r} ({option}): {exc}",
                field="ray_address",
            ) from None
        finally:
            if own is not None:  # ray.init installs a SIGTERM handler of its own
                signal.signal(signal.SIGTERM, own)
        _messages_to_stderr()
        # Ray's modules and state are hundreds of thousands of long-lived objects: moved
        # out of the collector's generations, so its full passes (which the journal's
        # appends trigger) walk only what the run itself keeps.
        gc.freeze()
    cpus = int(ray.cluster_resources().get("CPU", 0))
    if options.workers:
        if options.workers > cpus:
            # Each worker takes a CPU: one beyond the cluster's would never be scheduled,
            # and the run would wait for it for ever.
            where = f"the Ray cluster at {address!r}" if address else "Ray"
            raise ConfigError(
                f"--workers {options.workers} is more than the {cpus} CPU(s) of {where} "
                f"(each worker takes one): use --workers {max(1, cpus)} or fewer",
                field="workers",
            )
        return options.workers
    return max(1, cpus)


def _shutdown(ray: Any) -> None:
    """Stop what an interrupted ``ray.init`` started (nothing, if it started nothing)."""
    try:
        ray.shutdown()
    except Exception:  # pragma: no cover - Ray half started: its own exit hook stops it
        return


def _messages_to_stderr() -> None:
    """Send Ray's messages about the cluster (a worker that died, from ``(raylet)``) to
    standard error: Ray prints them on standard output, where ``decide --json`` writes
    its records. Ray's printer (``ray._private.worker.print_to_stdstream``, looked up
    when each message comes) is wrapped once; a Ray without it is left as it is."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - another Ray layout
        return
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None or getattr(printer, "dissensus_stderr", False):
        return

    def to_stderr(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and not data.get("is_err"):
            data = {**data, "is_err": True}
        return printer(data, *args, **kwargs)

    to_stderr.dissensus_stderr = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


_ADDRESS_ENV = "RAY_ADDRESS"
"""The variable Ray reads a cluster's address from when ``ray.init`` is given none."""


_PROBE_S = 5.0
"""Seconds the driver waits for a ``HOST:PORT`` cluster address to accept a connection
before it calls the cluster unreachable (:func:`_probe`)."""


def _probe(address: str, option: str = "--ray-address") -> None:
    """Refuse a ``HOST:PORT`` cluster ``address`` where nothing accepts a connection
    (:class:`~dissensus.errors.ConfigError` naming ``ray_address``): ``ray.init`` would
    retry it for minutes before it gives up. ``auto``, ``local`` and ``ray://`` (or any
    other scheme) are left to Ray."""
    import socket

    if "://" in address or address in ("auto", "local"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return
    host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
    try:
        with socket.create_connection((host, int(port)), timeout=_PROBE_S):
            return
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
    raise ConfigError(
        f"cannot join the Ray cluster at {address!r} ({option}): nothing accepts a "
        f"connection at {host}:{port} ({reason})",
        field="ray_address",
    )


def _own_sigterm() -> Any:
    """The program's own SIGTERM handler (the command line's: SIGTERM is an interrupt),
    or ``SIG_IGN``; ``None`` where SIGTERM has its default action, or off the main thread
    (where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    handler = signal.getsignal(signal.SIGTERM)
    return None if handler in (signal.SIG_DFL, None) else handler


def _warm(similarity: str) -> None:
    """Distil the static table in the driver first, so workers do not race to do it."""
    if similarity.strip().lower() in {"static", "static-all-minilm-l6-v2"}:
        from dissensus.states.static import distil_static

        distil_static()
