"""Shared fixtures. Hypothesis runs derandomized (fixed seeds) with no deadline.

SQLite journals in the suite run with ``DISSENSUS_JOURNAL_SYNC=normal`` (set here, so the
CLI processes the tests start inherit it): a commit then skips the fsync that only
power-loss durability needs, and every committed event still survives a process kill,
which is what the crash and interrupt tests check. ``test_store_journal`` removes the
variable to check that ``full`` is the default.

Before each ``async`` test the garbage collector runs (outside any event loop). A model
SDK's HTTP client left unclosed by an earlier test (the ``openai`` SDK's client schedules
its own ``aclose()`` on whatever loop is running when it is collected) is then dropped
with no loop running, instead of failing a later test with "Event loop is closed".

Under ``--dist worksteal`` (``make test``) the tests marked ``slow`` are collected first:
they start at once, and the other worker steals the short tests around them, so no long
test starts last and runs alone. The framework integration tests (inspect_ai, mcp,
langgraph: seconds of import each) come right after them, then the tests that load
scikit-learn and scipy, so they start in the first worker's share and each of these
libraries is imported by one worker, not by both.

PostgreSQL: when ``$DISSENSUS_TEST_PG`` is unset, the controller process starts a
throw-away server before the xdist workers start (they inherit the variable) and stops
it at the end (:class:`store_backends.ThrowawayPostgres`); ``DISSENSUS_TEST_PG=off``
runs without one. At the end, one line names every reason tests were skipped for, with
the command that enables them.

After collection, what it loaded is frozen out of the garbage collector's reach
(``gc.freeze()``): it lives for the whole run, and each collection then walks only what
the tests make.
"""

from __future__ import annotations

import gc
import inspect
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default",
    derandomize=True,
    deadline=None,
    max_examples=60,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parent.parent


_DIST_ENV = "DISSENSUS_TEST_DIST"
_PG_KEY = pytest.StashKey[object]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # xdist's workers see ``dist = "no"``: they learn the mode from the controller's env.
    if hasattr(config, "workerinput"):
        return
    os.environ[_DIST_ENV] = str(getattr(config.option, "dist", "no"))
    _start_postgres(config)


def _start_postgres(config: pytest.Config) -> None:
    from store_backends import PG_ENV, PG_WHY_ENV, ThrowawayPostgres

    wanted = os.environ.get(PG_ENV, "")
    if wanted == "off":
        del os.environ[PG_ENV]
        os.environ[PG_WHY_ENV] = f"{PG_ENV}=off"
        return
    if wanted or config.option.collectonly:
        return
    server = ThrowawayPostgres()
    url = server.start()
    config.stash[_PG_KEY] = server
    if url is not None:
        os.environ[PG_ENV] = url
    else:
        os.environ[PG_WHY_ENV] = server.why_not or "the server did not start"


_SKIPPED_KEY = pytest.StashKey[str]()


def pytest_unconfigure(config: pytest.Config) -> None:
    # The skip line is written last, after pytest's own summary line.
    line = config.stash.get(_SKIPPED_KEY, None)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if line and reporter is not None:
        reporter.write_line(line)
    server = config.stash.get(_PG_KEY, None)
    if server is not None:
        from store_backends import ThrowawayPostgres

        assert isinstance(server, ThrowawayPostgres)
        server.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line naming what was skipped, by reason (each reason says what enables it),
    written when the session ends."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if not reasons:
        return
    parts = [f"{n} × {why}" for why, n in sorted(reasons.items(), key=lambda x: -x[1])]
    config.stash[_SKIPPED_KEY] = "still skipped: " + "; ".join(parts)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(_DIST_ENV) == "worksteal":
        items.sort(key=_schedule)  # stable


# Test files that load scikit-learn and scipy (seconds of import): scheduled together,
# after the integration tests, so that one worker imports them, not both.
_SCIENCE = (
    "test_acceptance_",
    "test_review_confirm.py",
    "test_guard_arrays.py",
    "test_public_errors.py",
)


def _schedule(item: pytest.Item) -> tuple[bool, bool, bool]:
    name = item.path.name
    return (
        item.get_closest_marker("slow") is None,
        not name.startswith("test_integrations_"),
        not name.startswith(_SCIENCE),
    )


os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")


def shared_data_dir() -> Path:
    """The real data folder: ``$DISSENSUS_DATA`` or ``../shared/data`` beside the repo."""
    env = os.environ.get("DISSENSUS_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = shared_data_dir()
    if not (path / "llmbar").is_dir():
        pytest.skip(f"real data not found at {path}")
    return path


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio only (the service's event loop)."""
    return "asyncio"


@pytest.fixture(params=["sqlite", "postgres"])
def journal_target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh journal target on each back end (PostgreSQL skips without $DISSENSUS_TEST_PG)."""
    from store_backends import target_for

    with target_for(request.param, tmp_path) as target:
        yield target


@pytest.fixture(autouse=True)
def _collect_leaked_clients_before_async_tests(request: pytest.FixtureRequest) -> None:
    """See the module docstring: collect garbage before a test that runs an event loop."""
    if inspect.iscoroutinefunction(getattr(request.node, "obj", None)):
        gc.collect()


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection loaded (modules, hypothesis strategies, pydantic models) lives for
    # the whole run: out of the collector's reach, each collection walks only what the
    # tests make.
    gc.collect()
    gc.freeze()
