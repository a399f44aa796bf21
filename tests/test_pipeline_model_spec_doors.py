"""One run specification behind every door: the model spec a run journals.

A run journals its model spec with relative files made absolute (against the policy's
directory, else the working directory), whichever door built the run: the command line,
``$DISSENSUS_MODEL``, :func:`dissensus.pipeline.decide` with a :class:`Policy` or its
data, :func:`~dissensus.pipeline.batch.start_run` with a :class:`RunSpec` or a policy
and ``model=``. A recording's file name ends at the first ``:`` of ``record:FILE:...``,
so in a directory whose path holds ``:`` a relative recording is journalled as written.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import Policy, decide
from dissensus.pipeline.batch import run_spec, start_run
from dissensus.pipeline.policy import relative_model_spec
from dissensus.pipeline.spec import RunSpec
from dissensus.serve import ServeSettings
from dissensus.store.journal import open_journal
from pipeline_cases import CRASH_ANSWERS, panel, write_jsonl, write_policy, write_script
from serve_helpers import auth, client_for, write_tokens

POLICY = {
    "reading": {"similarity": "tfidf", "theta_s": 0.3},
    "routing": {"convergent_disagreement_without_values": "seek_context"},
    "acceptance": {"min_families": 2},
}
ROWS = [panel(f"p{i}", ["2", "1", "2"]) for i in range(3)]


def _journalled(journal: Path, run_id: str) -> str | None:
    store = open_journal(str(journal))
    try:
        return run_spec(store, run_id).model
    finally:
        store.close()


def test_every_door_journals_the_same_model_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISSENSUS_MODEL", raising=False)
    write_script(tmp_path / "rel.yaml", CRASH_ANSWERS)
    write_jsonl(tmp_path / "in.jsonl", ROWS)
    write_policy(tmp_path / "pol.yaml")
    journal = tmp_path / "j.sqlite"
    spec = "scripted:rel.yaml"
    with_model = {**POLICY, "seek_context": {"model": spec}}
    decide(ROWS[0], Policy.model_validate(with_model), journal=str(journal), run_id="obj")
    decide(ROWS[0], with_model, journal=str(journal), run_id="data")
    monkeypatch.setenv("DISSENSUS_MODEL", spec)
    decide(ROWS[0], Policy.model_validate(POLICY), journal=str(journal), run_id="env")
    monkeypatch.delenv("DISSENSUS_MODEL")
    store = open_journal(str(journal))
    try:
        built = RunSpec.from_policy(Policy.model_validate(POLICY))
        start_run(store, "in.jsonl", built, model=spec, run_id="spec-model")
        start_run(store, "in.jsonl", Policy.model_validate(POLICY), model=spec, run_id="pol-model")
    finally:
        store.close()
    res = cli("decide", "in.jsonl", "--policy", "pol.yaml", "--journal", journal,
              "--run-id", "cli", "--model", spec, "--json", cwd=tmp_path)  # fmt: skip
    assert res.code == 0, res.err
    settings = ServeSettings(
        journal=str(journal),
        policy=str(tmp_path / "pol.yaml"),
        tokens=str(write_tokens(tmp_path / "tokens.txt")),
        request_timeout_s=900.0,
    )

    async def serve() -> str:
        async with client_for(settings) as client:
            response = await client.post("/v1/decide", json=[ROWS[0]], headers=auth("sub"))
        assert response.status_code == 200, response.text
        return str(response.json()["run_id"])

    monkeypatch.setenv("DISSENSUS_MODEL", spec)
    served = asyncio.run(serve())
    monkeypatch.delenv("DISSENSUS_MODEL")
    doors = ["obj", "data", "env", "spec-model", "pol-model", "cli", served]
    want = f"scripted:{tmp_path / 'rel.yaml'}"
    assert {door: _journalled(journal, door) for door in doors} == dict.fromkeys(doors, want)


@pytest.mark.parametrize("via", ["--model", "DISSENSUS_MODEL"])
def test_a_recording_in_a_directory_with_a_colon_is_written(tmp_path: Path, via: str) -> None:
    """In ``x:y`` a relative recording is journalled as written (its absolute path would
    end the file name at the ``:``): the run asks the model and writes the recording
    (every follow-up failed with ``unknown model kind 'y/rec.jsonl'``)."""
    here = tmp_path / "x:y"
    here.mkdir()
    write_script(here / "rel.yaml", CRASH_ANSWERS)
    write_jsonl(here / "in.jsonl", ROWS)
    write_policy(here / "pol.yaml", {"budget": {"max_calls": 100000}})
    spec = "record:rec.jsonl:scripted:rel.yaml"
    model = ["--model", spec] if via == "--model" else []
    env = {"DISSENSUS_MODEL": spec if via != "--model" else None}
    res = cli("decide", "in.jsonl", "--policy", "pol.yaml", "--journal", "j.sqlite",
              "--run-id", "C", "--json", *model, cwd=here, env=env)  # fmt: skip
    assert res.code == 0, res.err
    records = [json.loads(line) for line in res.out.splitlines()]
    assert len(records) == len(ROWS)
    assert not any("re-ask failed" in str(r["reason"]) for r in records)
    assert (here / "rec.jsonl").stat().st_size > 0
    assert _journalled(here / "j.sqlite", "C") == f"record:rec.jsonl:scripted:{here / 'rel.yaml'}"


def test_a_policy_recording_under_a_colon_elsewhere_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A policy's relative recording in another directory whose path holds ``:`` cannot
    be named by any spec: refused naming the field, not journalled unparseable."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="':' ends a recording's file name") as exc:
        relative_model_spec(
            "record:rec.jsonl:scripted:s.yaml", tmp_path / "x:y", field="seek_context.model"
        )
    assert exc.value.field == "seek_context.model"
    assert relative_model_spec("record:rec.jsonl:scripted:s.yaml", tmp_path / "x") == (
        f"record:{tmp_path / 'x' / 'rec.jsonl'}:scripted:{tmp_path / 'x' / 's.yaml'}"
    )


def test_a_run_resumes_elsewhere_over_panel_members_it_never_asks(tmp_path: Path) -> None:
    """A policy in ``x:y`` whose unused panel member records relatively: ``decide`` from
    there runs, and ``runs resume`` from elsewhere finishes (it failed on the ``:``
    while listing the files the run may not overwrite)."""
    here = tmp_path / "x:y"
    here.mkdir()
    write_script(here / "rel.yaml", CRASH_ANSWERS)
    write_jsonl(here / "in.jsonl", ROWS)
    members = [
        {"name": "m1", "model": "record:rec.jsonl:scripted:rel.yaml"},
        {"name": "m2", "model": "scripted:rel.yaml"},
    ]
    write_policy(
        here / "pol.yaml", {"budget": {"max_calls": 100000}, "panel": {"members": members}}
    )
    journal = tmp_path / "j.sqlite"
    res = cli("decide", "in.jsonl", "--policy", "pol.yaml", "--journal", journal,
              "--run-id", "R", "--json", cwd=here)  # fmt: skip
    assert res.code == 0, res.err
    res = cli("runs", "resume", "R", "--journal", journal, "--json", cwd=tmp_path)
    assert res.code == 0, res.err
    assert "':'" not in res.err
    store = open_journal(str(journal))
    try:
        reads = run_spec(store, "R").model_reads()
    finally:
        store.close()
    assert reads["the model file of panel.members.0.model"] == str(here / "rel.yaml")
    assert reads["the model file of panel.members.1.model"] == str(here / "rel.yaml")
