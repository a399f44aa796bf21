"""What the journal already holds of a run's blocks: the events each case resumes from
(:func:`_seeds`), the blocks complete in it (:func:`_complete`), which are not sent to a
worker again, and their outcomes replayed from it (:func:`_replayed`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from dissensus.engines.blocks import Block, block_lines
from dissensus.engines.ray.messages import _SeedEvent
from dissensus.io.jsonl import Reject, blank_line

if TYPE_CHECKING:
    from dissensus.pipeline.executors import Outcome


def _seeds(journal: Any, run_id: str) -> dict[str, list[_SeedEvent]]:
    """The run's journalled case events, by case (line)."""
    out: dict[str, list[_SeedEvent]] = {}
    for event in journal.events(run_id):
        if event.case is not None:
            out.setdefault(event.case, []).append(
                {"key": event.key, "type": event.type, "case": event.case, "payload": event.payload}
            )
    return out


def _complete(block: Block, seeds: dict[str, list[_SeedEvent]]) -> bool:
    """Every non-blank line of ``block`` has a journalled record or reject."""
    if not seeds:
        return False
    for number, text in block_lines(block):
        if blank_line(text, number):
            continue
        keys = {e["key"] for e in seeds.get(str(number), [])}
        if f"case/{number}/record" not in keys and f"reject/{number}" not in keys:
            return False
    return True


def _replayed(journal: Any, run_id: str, block: Block) -> Iterator[Outcome]:
    """The outcomes of a block whose every line is journalled, read from the journal."""
    from dissensus.pipeline.executors import Outcome
    from dissensus.pipeline.records import CaseRecord

    for number, text in block_lines(block):
        if blank_line(text, number):
            continue
        reject = journal.get(run_id, f"reject/{number}")
        if reject is not None:
            yield Outcome(line=number, reject=reject.read_as(Reject), journalled=True)
            continue
        record = journal.get(run_id, f"case/{number}/record")
        yield Outcome(line=number, record=record.read_as(CaseRecord))
