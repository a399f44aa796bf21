"""``runs show``, ``runs verify`` and ``runs export`` read a run a page at a time, on both
back ends: the memory they take does not grow with the run's length. ``runs show
--json`` writes the run's records as a second pass reads them, never holding them.

Before, each read the whole run into a list (``runs show`` three times over: its events,
its records, then the chain's rows), so a run of 375,000 events took 6.8 GB to show. Here
a run four times as long as another (the same panels, more of them) may take the
commands no more than a tenth of its extra stored payload in extra memory (traced with
``tracemalloc``, in this process); reading whole, the extra is more than all of it.
"""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.cli import main
from pipeline_cases import panel
from store_backends import BACKENDS, raw, target_for

SMALL = 150
"""Panels of the shorter run (about 550 events; the longer has four times as many)."""
PAGE = 100
"""The page size the test reads with: well below either run's length."""


def _panels(path: Path, n: int) -> None:
    lines = []
    for i in range(n):
        words = [f"reason {i} {k} " + "because the text says so. " * 40 for k in range(3)]
        lines.append(json.dumps(panel(f"p{i}", ["x", "y", "x"], reasoning=words)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _peak(*args: str | Path, out: Path | None = None) -> int:
    """Peak traced memory of ``dissensus ARGS`` above what was traced when it started;
    with ``out``, standard output goes to that file (not kept in memory by the test)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        if out is None:
            res = cli(*args)
            code, err = res.code, res.err
        else:
            with out.open("w", encoding="utf-8") as handle, contextlib.redirect_stdout(handle):
                code, err = main([str(a) for a in args]), ""
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0, err
    return peak - base


@pytest.fixture(scope="module", params=BACKENDS)
def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, int]]:
    """A journal holding run ``short`` (:data:`SMALL` panels) and ``long`` (four times
    as many); the payload bytes the long one stores beyond the short one."""
    tmp_path = tmp_path_factory.mktemp("runs")
    with target_for(request.param, tmp_path) as journal:
        for name, n in (("short", SMALL), ("long", 4 * SMALL)):
            panels = tmp_path / f"{name}.jsonl"
            _panels(panels, n)
            res = cli("decide", panels, "--journal", journal, "--run-id", name)
            assert res.code == 0, res.err
        sizes = dict(
            raw(journal, "SELECT run_id, SUM(LENGTH(payload)) FROM events GROUP BY run_id")
        )
        yield journal, int(sizes["long"]) - int(sizes["short"])


@pytest.mark.parametrize(
    "command",
    [
        ("runs", "show"),
        ("runs", "show", "--events"),
        ("runs", "show", "--json"),
        ("runs", "verify"),
        ("runs", "export"),
    ],
    ids=["show", "show-events", "show-json", "verify", "export"],
)
def test_reading_a_run_takes_memory_independent_of_its_length(
    runs: tuple[str, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    command: tuple[str, ...],
) -> None:
    from dissensus.pipeline import review
    from dissensus.store import log

    monkeypatch.setattr(log, "PAGE", PAGE, raising=False)
    monkeypatch.setattr(review, "RECORDS_PART", PAGE, raising=False)
    journal, extra = runs
    peaks = {}
    for run in ("short", "long"):
        args: list[str | Path] = [*command[:2], run, *command[2:], "--journal", journal]
        if command[1] == "export":
            args += ["--output", tmp_path / f"{run}.jsonl"]
        # --json writes a document as long as the run: into a file, not the test's memory.
        out = tmp_path / f"{run}.json" if command[-1] == "--json" else None
        _peak(*args, out=out)  # first calls warm caches (imports, compiled patterns)
        peaks[run] = _peak(*args, out=out)
    grew = peaks["long"] - peaks["short"]
    assert grew < extra / 10, (
        f"{' '.join(command)}: peak {peaks['short']:,} B for the short run, "
        f"{peaks['long']:,} B for the long one ({extra:,} B more payload)"
    )


def test_a_run_read_in_pages_is_read_whole_and_in_order(
    runs: tuple[str, int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Pages of 7 events end anywhere in the run: every event comes once, in sequence
    order, and the chain verifies and exports exactly as read in one page."""
    from dissensus.store import log

    journal, _ = runs
    whole = cli("runs", "export", "long", "--journal", journal)
    shown = cli("runs", "show", "long", "--journal", journal, "--json")
    monkeypatch.setattr(log, "PAGE", 7, raising=False)
    paged = cli("runs", "export", "long", "--journal", journal)
    assert paged.code == whole.code == 0, paged.err
    assert paged.out == whole.out
    seqs = [json.loads(line)["seq"] for line in paged.out.splitlines()]
    assert seqs == list(range(len(seqs))) and len(seqs) > 4 * SMALL
    assert cli("runs", "show", "long", "--journal", journal, "--json").out == shown.out
    verified = cli("runs", "verify", "long", "--journal", journal, "--json")
    assert verified.code == 0, verified.err
    assert json.loads(verified.out)["n_events"] == len(seqs)
