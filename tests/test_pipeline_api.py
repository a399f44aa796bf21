"""``decide`` / ``adecide`` refuse arguments of the wrong kind with a ConfigError naming
the argument (docs/pipeline.md: "anything else is an error naming the argument"); they
raised AttributeError or TypeError from deep inside. A calibration may be given as its
data (what ``json.load`` of the file gives), validated as the file is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dissensus.errors import ConfigError
from dissensus.pipeline import decide

REPO = Path(__file__).resolve().parent.parent
PANEL = {
    "id": "c1",
    "outputs": [
        {"agent": "a", "decision": "x", "reasoning": "r"},
        {"agent": "b", "decision": "y", "reasoning": "q"},
    ],
}
POLICY = {"reading": {"similarity": "tfidf"}}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"calibration": 5}, "calibration"),
        ({"calibration": {"strata": "no"}}, "calibration"),
        ({"guard_calibration": 5}, "guard_calibration"),
        ({"guard_calibration": {"agents": 3}}, "guard_calibration"),
        ({"policy_dir": 5}, "policy_dir"),
        ({"journal": ""}, "journal"),
        ({"journal": "  "}, "journal"),
    ],
)
def test_a_wrong_kind_of_argument_is_a_config_error_naming_it(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        decide(PANEL, POLICY, **kwargs)
    assert caught.value.field == field, caught.value


def test_a_calibration_may_be_its_files_data() -> None:
    """``json.load`` of the shipped reliability calibration (a ``CalibrationFile``) is
    accepted as the calibration; as the guard's calibration (another file) it is refused."""
    data = json.loads((REPO / "examples" / "llmbar-reliability.json").read_text())
    assert decide(PANEL, POLICY, calibration=data).id == "c1"
    with pytest.raises(ConfigError) as caught:
        decide(PANEL, POLICY, guard_calibration=data)
    assert caught.value.field == "guard_calibration"


@pytest.mark.parametrize("target", [None, 5, 1.5, b"j.sqlite"])
def test_a_journal_target_that_is_no_path_is_refused(
    target: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Journal(None)`` made an SQLite file called ``None`` in the working directory."""
    from dissensus.store import Journal

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="a journal is a path"):
        Journal(target)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
@pytest.mark.parametrize("shared", [True, False])
async def test_concurrent_calls_with_one_run_id_decide_once_and_replay(
    tmp_path: Path, shared: bool
) -> None:
    """Several ``adecide`` calls with one ``run_id`` at once (one journal object, or each
    its own on one file) give the record sequential calls give: the first decides, the
    others wait and replay it (they failed with ``RunExists``)."""
    import asyncio

    from dissensus.pipeline import adecide
    from dissensus.store.journal import Journal

    path = tmp_path / "runs.sqlite"
    with Journal(str(path)) as opened:
        target: Any = opened if shared else str(path)
        records = await asyncio.gather(
            *(adecide(PANEL, POLICY, journal=target, run_id="same") for _ in range(4))
        )
        other = dict(PANEL, id="c2")
        with pytest.raises(ConfigError, match="already decided another panel"):
            await adecide(other, POLICY, journal=target, run_id="same")
    assert all(r == records[0] for r in records)
    assert records[0].id == "c1"


def test_a_fresh_id_another_run_has_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh id is 48 random bits: one that names a run already (another panel's) is
    not this call's run, so another is drawn; the other run stays as it was. Three
    collisions in a row are said (``RunExists``)."""
    import dissensus.pipeline as pipeline
    from dissensus.store.errors import RunExists
    from dissensus.store.journal import open_journal

    path = str(tmp_path / "j.sqlite")
    other = {**PANEL, "id": "other"}
    first = decide(other, POLICY, journal=path, run_id="taken")
    ids = iter(["taken", "fresh"])
    monkeypatch.setattr(pipeline, "new_run_id", lambda: next(ids))
    record = decide(PANEL, POLICY, journal=path)
    assert record.id == "c1"
    with open_journal(path) as journal:
        assert journal.run("fresh") is not None
        assert journal.verify("taken").ok and journal.verify("fresh").ok
    assert decide(other, POLICY, journal=path, run_id="taken") == first  # a replay
    monkeypatch.setattr(pipeline, "new_run_id", lambda: "taken")
    with pytest.raises(RunExists):
        decide(PANEL, POLICY, journal=path)
