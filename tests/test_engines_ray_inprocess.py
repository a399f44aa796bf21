"""The Ray engine's workers run in this process (the driver's code as it is, Ray's
transport replaced by direct calls): the lines a worker decides, routes or counts as
complete are the lines a local run reads, so records, rejects and events are a local
run's. No Ray instance is started: these run in the default suite."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dissensus.engines.blocks import plan_blocks
from dissensus.engines.ray import RayExecutor, RayOptions, codec, executor, flight, worker
from dissensus.engines.ray.messages import _fields
from dissensus.engines.ray.resume import _complete, _seeds
from dissensus.engines.ray.route import _Router, _RouteSpec
from dissensus.pipeline import execute_run, start_run
from dissensus.pipeline.records import CaseRecord
from dissensus.store.journal import Journal

REPO = Path(__file__).resolve().parent.parent
LINES = (REPO / "examples" / "llmbar-cot.jsonl").read_text(encoding="utf-8").splitlines(True)
POLICY = "reading: {similarity: tfidf}\n"


class _InProcess:
    def __init__(self, *args: Any) -> None:
        self.decider = worker._Decider(*args)


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ray executor with its workers in this process."""
    monkeypatch.setattr(executor, "ensure_ray", lambda options: options.workers)
    monkeypatch.setattr(
        executor, "_deciders", lambda n, args: [_InProcess(*args) for _ in range(n)]
    )

    def send(actor: _InProcess, text: str) -> Callable[[], bytes]:
        return partial(actor.decider.decide, text)

    monkeypatch.setattr(flight, "_send", send)
    monkeypatch.setattr(flight, "_take", lambda ref: codec._decoded(ref()))
    monkeypatch.setattr(executor, "_release", lambda actors: None)


async def _collect(stream: AsyncIterator[CaseRecord]) -> list[dict[str, Any]]:
    return [r.model_dump(mode="json") async for r in stream]


def _run(tmp_path: Path, panels: Path, name: str, ray: RayOptions | None) -> Any:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    journal = Journal(tmp_path / f"{name}.sqlite")
    start_run(journal, str(panels), str(policy), run_id="R")
    rejects: list[str] = []
    runner = RayExecutor(ray) if ray is not None else None
    records = asyncio.run(
        _collect(
            execute_run(
                journal, "R", on_reject=lambda r: rejects.append(r.describe()), executor=runner
            )
        )
    )
    skip = ("run/started", "reserved/", "settled/")
    events = {e.key: e.payload for e in journal.events("R") if not e.key.startswith(skip)}
    return journal, records, rejects, events


# A file saved with a byte order mark whose first line is blank: a local run skips the
# line (a file holding only a BOM is empty); the workers read it as a line of JSON.
BOM_FIRST = "\ufeff\n" + "".join(LINES[:5])


@pytest.mark.parametrize("lines_per_block", [1, 2, 1000])
def test_a_blank_first_line_after_a_byte_order_mark_is_blank_on_ray_too(
    tmp_path: Path, in_process: None, lines_per_block: int
) -> None:
    panels = tmp_path / "bom.jsonl"
    panels.write_text(BOM_FIRST, encoding="utf-8")
    _, records, rejects, events = _run(tmp_path, panels, "local", None)
    assert rejects == [] and len(records) == 5
    options = RayOptions(workers=2, lines_per_block=lines_per_block)
    journal, got, got_rejects, got_events = _run(tmp_path, panels, "ray", options)
    assert got_rejects == rejects  # not "bom.jsonl:1: field '<json>': invalid JSON"
    assert got == records
    assert got_events == events
    assert journal.verify("R").ok


def test_a_finished_block_with_a_bom_blank_first_line_is_complete(
    tmp_path: Path, in_process: None
) -> None:
    """A resumed run does not send a block whose lines are all journalled again."""
    panels = tmp_path / "bom.jsonl"
    panels.write_text(BOM_FIRST, encoding="utf-8")
    journal, *_ = _run(tmp_path, panels, "local", None)
    (block,) = plan_blocks(str(panels), 1000)
    assert _complete(block, _seeds(journal, "R"))


def test_ray_route_skips_a_blank_first_line_after_a_byte_order_mark(tmp_path: Path) -> None:
    panels = tmp_path / "bom.jsonl"
    panels.write_text(BOM_FIRST, encoding="utf-8")
    spec = _RouteSpec(
        similarity="tfidf",
        no_cache=True,
        theta_s=None,
        theta_a=None,
        rules=None,
        with_matrix=False,
        keep_rows=0,
    )
    router = _Router(spec)
    (block,) = plan_blocks(str(panels), 1000)
    item = json.dumps({"block": _fields(block), "name": str(panels)})
    (raw,) = router({"item": [item]})["result"]
    import pickle

    result = pickle.loads(raw)
    assert result["rejects"] == []
    assert len(result["lines"]) == 5


def test_a_block_refused_past_its_share_says_so_and_names_the_runs_limit(
    tmp_path: Path, in_process: None
) -> None:
    """Ten panels making two calls each (20 in all) then fifty without a call, under
    ``max_calls: 60`` on 2 workers: the first block's share is 15, so 5 of its calls are
    refused though the run's budget has room (documented); the reason says it is the
    block's share of the run's ``max_calls 60``, not as if the run allowed 15."""
    from dissensus.pipeline import load_policy
    from pipeline_cases import crash_script, panel, write_jsonl, write_policy

    rows: list[Any] = [panel(f"live-{i}", ["1", "1", "1"]) for i in range(10)]
    path = write_jsonl(tmp_path / "in.jsonl", [*rows, *["{bad"] * 50])
    extra = {"guard": {"enabled": False}, "budget": {"max_calls": 60}}
    policy = write_policy(tmp_path / "policy.yaml", extra)
    model = f"scripted:{crash_script(tmp_path / 'model.yaml')}"
    with Journal(tmp_path / "j.sqlite") as journal:
        start_run(journal, str(path), load_policy(str(policy))[0], run_id="K", model=model)
        options = RayOptions(workers=2, lines_per_block=10)
        records = asyncio.run(
            _collect(
                execute_run(journal, "K", on_reject=lambda r: None, executor=RayExecutor(options))
            )
        )
    refused = [r["reason"] for r in records if "budget exhausted" in r["reason"]]
    assert refused, "the first block's share no longer binds: rebuild the scenario"
    for reason in refused:
        assert "all 15 attempts allowed are spent or in flight" in reason
        assert "this Ray block's share of the run's max_calls 60" in reason
