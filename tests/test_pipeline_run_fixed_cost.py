"""What a run of one panel makes once, not once per run: the journalled form of its
specification, the specification its ``run.started`` reads back as, and the payload of
that event (the same bytes as before: the hash chain and resume are unchanged)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dissensus.canonical import canonical
from dissensus.pipeline import RunSpec, decide
from dissensus.pipeline.batch import _started_payload, run_spec
from dissensus.pipeline.policy import policy_from_dict
from dissensus.pipeline.run_events import RunInput, RunStarted
from dissensus.store import Journal
from dissensus.types import Panel
from pipeline_cases import panel

SPEC = RunSpec.from_policy(policy_from_dict({"reading": {"similarity": "tfidf"}}))


def test_a_spec_makes_its_journalled_fields_and_its_read_back_spec_once() -> None:
    spec = RunSpec.from_policy(policy_from_dict({"reading": {"similarity": "tfidf"}}))
    fields = spec.started_fields()
    assert fields == spec.started().payload()
    again = spec.started_fields()
    assert again == fields and again is not fields  # a new dictionary each call
    assert spec.journalled() is spec.journalled()
    assert spec.journalled() == RunSpec.from_started(fields) == spec
    # A copy with other fields makes both again from its own fields.
    other = spec.model_copy(update={"model": "scripted:answers.yaml"})
    assert other.started_fields()["model"] == "scripted:answers.yaml"
    assert other.journalled().model == "scripted:answers.yaml"
    assert spec.started_fields()["model"] is None and spec.journalled().model is None
    # What a spec made is neither a field nor compared.
    assert other != spec and spec.model_copy() == spec
    assert set(spec.model_dump()) == set(RunSpec.model_fields)


def test_runs_started_here_are_not_rebuilt_from_their_start_and_decide_as_read_back(
    monkeypatch: Any,
) -> None:
    """Three single-panel runs under one spec build the spec their start reads as once
    (it was once per run), and decide as that spec: each run replays to its record, and
    its journalled start reads back as the spec the runs were handed."""
    calls: Counter[str] = Counter()
    original = RunSpec.from_started.__func__  # type: ignore[attr-defined]

    def counted(cls: type[RunSpec], started: Any) -> RunSpec:
        calls["from_started"] += 1
        return original(cls, started)  # type: ignore[no-any-return]

    spec = RunSpec.from_policy(policy_from_dict({"reading": {"similarity": "tfidf"}}))
    monkeypatch.setattr(RunSpec, "from_started", classmethod(counted))
    journal = Journal(":memory:")
    try:
        panels = [Panel.model_validate(panel(f"p{i}", ["A", "A", "B"])) for i in range(3)]
        records = [decide(p, spec, journal=journal, run_id=f"r{i}") for i, p in enumerate(panels)]
        assert calls["from_started"] == 1
        for i, (p, record) in enumerate(zip(panels, records, strict=True)):
            assert run_spec(journal, f"r{i}") == spec.journalled()
            assert decide(p, spec, journal=journal, run_id=f"r{i}") == record  # replayed
            assert journal.verify(f"r{i}").ok
    finally:
        journal.close()


_KEYS = st.sampled_from(["submitted_by", "note", "policy", "model", "kind", "via", "input"])
_VALUES = st.one_of(
    st.none(), st.text(max_size=5), st.integers(), st.lists(st.integers(), max_size=2)
)


@given(
    extra=st.one_of(st.none(), st.dictionaries(_KEYS, _VALUES, max_size=3)),
    kind=st.sampled_from(["decide", "chat"]),
    via=st.sampled_from([None, "", "serve"]),
    text=st.text(max_size=20),
)
def test_the_run_started_payload_is_the_one_validated_whole(
    extra: dict[str, Any] | None, kind: str, via: str | None, text: str
) -> None:
    """The payload made from the spec's fields made once is, key for key and in order,
    the one validating every field of ``run.started`` gives: the same canonical bytes."""
    source: RunInput = {"path": "-", "text": text}
    fields: dict[str, Any] = {"input": source, **SPEC.started_fields(), **(extra or {})}
    fields["kind"] = kind
    if via:
        fields["via"] = via
    try:
        want = RunStarted.model_validate(fields).payload()
    except ValueError:
        want = None
    try:
        got = _started_payload(SPEC, source, extra, kind, via)
    except ValueError:
        got = None
    assert got == want
    if want is not None and got is not None:
        assert list(got) == list(want) and canonical(got) == canonical(want)


def test_a_panel_under_a_fresh_run_id_asks_the_journal_nothing_before_its_commit(
    tmp_path: Any,
) -> None:
    """``adecide`` without a run id makes a fresh one, which names no run: its one
    transaction is all it sends (it looked the id up first); a given id is still looked
    up, so the same panel under it replays."""
    journal = Journal(str(tmp_path / "j.sqlite"))
    try:
        statements: list[str] = []
        db: Any = journal._backend._db  # type: ignore[attr-defined]
        first = Panel.model_validate(panel("p", ["A", "A", "B"]))
        decide(first, SPEC, journal=journal)  # warm: the journal's schema is made
        db.set_trace_callback(statements.append)
        record = decide(first, SPEC, journal=journal)
        db.set_trace_callback(None)
        assert statements[0] == "BEGIN IMMEDIATE" and statements[-1] == "COMMIT", statements
        assert sum(s == "COMMIT" for s in statements) == 1
        run_id = journal.newest_runs(1)[0].run_id
        assert journal.verify(run_id).ok
        statements.clear()
        db.set_trace_callback(statements.append)
        assert decide(first, SPEC, journal=journal, run_id=run_id) == record
        db.set_trace_callback(None)
        assert statements and not [s for s in statements if s.startswith(("BEGIN", "INSERT"))]
    finally:
        journal.close()


def test_a_deferred_run_whose_extra_overrides_a_spec_field_decides_as_its_start_reads() -> None:
    """``start_run``'s ``extra`` naming a field of the spec overrides it in the run's
    ``run.started``: the run loop then decides with the spec that event reads back as
    (what a resume uses), not the one the caller passed."""
    import json

    from dissensus.pipeline.batch import _start_of, start_run

    journal = Journal(":memory:")
    try:
        text = json.dumps(panel("p", ["A", "A", "B"])) + "\n"
        extra = {"model": "scripted:other.yaml"}
        start_run(journal, None, SPEC, text=text, extra=extra, run_id="x", lock=True, defer=True)
        started, used = _start_of(journal, "x")
        assert started.model == "scripted:other.yaml"
        assert used == RunSpec.from_started(started) and used.model == "scripted:other.yaml"
        start_run(journal, None, SPEC, text=text, extra={"note": "n"}, run_id="y", defer=True)
        started, used = _start_of(journal, "y")
        assert used is SPEC.journalled() and used == RunSpec.from_started(started)
    finally:
        journal.close()
