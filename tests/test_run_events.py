"""Typed run-level events keep the payloads earlier versions wrote (so the chain's text of
an event is what it was) and read the payloads of a 0.2 journal."""

from __future__ import annotations

import gzip
from collections import Counter
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dissensus.pipeline.run_events import (
    ModelFailed,
    ModelSent,
    ModelSpend,
    ReviewResolved,
    RunFinished,
    RunStarted,
    RunStopped,
    StartedSpec,
)
from dissensus.pipeline.spec import RunSpec
from dissensus.store import event_types as ev
from dissensus.store import open_journal
from dissensus.types import Usage

FIXTURES = Path(__file__).parent / "fixtures"

_KEYS = st.sampled_from(["cases", "auto", "escalated", "rejected"])


@given(st.dictionaries(_KEYS, st.integers(min_value=0, max_value=10**6)))
def test_run_finished_is_the_counts_it_was_given(counts: dict[str, int]) -> None:
    counter = Counter(counts)
    assert RunFinished(**counter).payload() == dict(counter)


def test_model_and_stop_payloads_keep_their_earlier_shape() -> None:
    usage = Usage(calls=1, attempts=3, prompt_tokens=10, completion_tokens=2)
    assert ModelFailed(call="k", usage=usage, outcome="failed").payload() == {
        "call": "k",
        "usage": usage.model_dump(mode="json"),
        "outcome": "failed",
    }
    assert ModelSpend(call="k", agent=None, model="m").payload() == {
        "call": "k",
        "agent": None,
        "model": "m",
    }
    assert ModelSent(call="k", n=2).payload() == {"call": "k", "n": 2}
    assert RunStopped(reason="deadline", deadline_s=1.5, cases=3).payload() == {
        "reason": "deadline",
        "deadline_s": 1.5,
        "cases": 3,
    }


def test_a_02_journal_reads_through_the_models(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "journal-0.2.sqlite.gz").read_bytes()))
    models = {
        ev.RUN_STARTED: RunStarted,
        ev.RUN_FINISHED: RunFinished,
        ev.REVIEW_RESOLVED: ReviewResolved,
    }
    seen = set()
    with open_journal(str(path)) as journal:
        for run in journal.runs():
            for event in journal.events(run.run_id):
                model = models.get(event.type)
                if model is not None:
                    assert model.model_validate(event.payload).payload() == event.payload
                    seen.add(event.type)
    assert seen == set(models)


def test_a_02_run_started_round_trips_and_gives_the_spec_it_gave(tmp_path: Path) -> None:
    path = tmp_path / "journal.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "journal-0.2.sqlite.gz").read_bytes()))
    with open_journal(str(path)) as journal:
        payloads = [event.payload for event in journal.events_of_type(ev.RUN_STARTED)]
    assert payloads
    for payload in payloads:
        started = RunStarted.model_validate(payload)
        assert started.payload() == payload
        assert "base_dir" not in started.payload()  # absent keys stay absent
        assert started.input == payload["input"]
        # The spec read through the model is the spec read from the raw payload.
        assert RunSpec.from_started(started) == RunSpec.from_started(payload)
        assert RunSpec.from_started(started).policy_file == payload["policy_file"]


_TEXT = st.text(max_size=20)
_INPUTS = st.one_of(
    st.fixed_dictionaries({"path": _TEXT, "sha256": _TEXT}),
    st.fixed_dictionaries({"path": st.just("-"), "text": _TEXT}),
    st.fixed_dictionaries({"path": st.just("-"), "base64": _TEXT}),
)


@given(
    _INPUTS,
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), _TEXT),
    st.one_of(st.none(), _TEXT),
)
def test_run_started_keeps_the_payload_a_writer_gave(
    source: dict[str, str], model: str | None, policy_file: str | None, submitted_by: str | None
) -> None:
    spec = RunSpec(model=model, policy_file=policy_file)
    written = {"input": source, **spec.started_fields()}
    if submitted_by is not None:
        written["submitted_by"] = submitted_by
    started = RunStarted.model_validate(written)
    assert started.payload() == written
    assert RunSpec.from_started(started) == spec
    assert StartedSpec.model_validate(spec.started_fields()).payload() == spec.started_fields()
