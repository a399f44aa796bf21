"""One vocabulary of journal event types: every type a journal holds is listed in
``dissensus.store.event_types``, and no module spells a type as a string of its own."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from dissensus.store import event_types, open_journal

SRC = Path(__file__).resolve().parents[1] / "src" / "dissensus"
FIXTURES = Path(__file__).parent / "fixtures"


def test_every_constant_is_listed_once() -> None:
    constants = {
        name: value
        for name, value in vars(event_types).items()
        if name.isupper() and isinstance(value, str)
    }
    assert set(constants.values()) == event_types.EVENT_TYPES
    assert len(constants) == len(event_types.EVENT_TYPES)
    assert set(event_types.EventTypeName.__args__) == event_types.EVENT_TYPES
    for name, value in constants.items():
        assert name == value.replace(".", "_").upper()


def test_no_module_spells_an_event_type_itself() -> None:
    pattern = re.compile("|".join(re.escape(f'"{t}"') for t in sorted(event_types.EVENT_TYPES)))
    offenders = [
        f"{path.relative_to(SRC)}:{n}"
        for path in SRC.rglob("*.py")
        if path.name != "event_types.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1)
        if pattern.search(line)
    ]
    assert offenders == []


def test_a_02_journal_holds_only_known_types(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "journal-0.2.sqlite.gz").read_bytes()))
    with open_journal(str(path)) as journal:
        types = {e.type for run in journal.runs() for e in journal.events(run.run_id)}
    assert types  # the fixture has events
    assert types <= event_types.EVENT_TYPES
