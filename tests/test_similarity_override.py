"""A similarity override reads alike through every door: ``reading.theta_s`` is its backend's.

``decide --similarity``, ``RunSpec.from_policy(similarity=)`` / ``start_run(similarity=)``,
``POST /v1/route?similarity=`` and ``route --similarity`` follow one rule
(:meth:`~dissensus.pipeline.policy.ReadingSettings.with_similarity`): a policy's
``theta_s`` is kept for a backend of the same key and dropped (the new backend's
calibrated default) for another. A learned acceptance file calibrated with another
backend than the override's is refused naming the override, not the policy file.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import RunSpec, decide, execute_run, start_run
from dissensus.pipeline.policy import ReadingSettings
from dissensus.pipeline.records import CaseRecord
from dissensus.serve.library_calls import route_thresholds
from dissensus.states import Thresholds
from dissensus.states.similarity import backend_key
from dissensus.store import Journal
from dissensus.store import event_types as ev
from serve_helpers import auth, client_for, settings

ROOT = Path(__file__).resolve().parents[1]

# MiniLM's threshold: under it tfidf reads this panel's reasoning as divergent (DA); under
# tfidf's own calibrated default (0.39) as similar (CA).
POLICY = {"reading": {"similarity": "minilm", "theta_s": 0.95}}
PANEL: dict[str, Any] = {
    "id": "p1",
    "meta": {},
    "outputs": [
        {
            "agent": "a",
            "decision": "1",
            "reasoning": "Option one states the refund window of thirty days.",
        },
        {
            "agent": "b",
            "decision": "1",
            "reasoning": "The refund window is thirty days, so option one.",
        },
    ],
}
TFIDF_DEFAULT = Thresholds.for_model("tfidf").theta_s

Door = Callable[[Path], tuple[str, float]]
"""A door deciding or routing PANEL under POLICY with ``similarity=tfidf``: the state it
read and the theta_s it read with."""


def _policy(tmp: Path) -> Path:
    path = tmp / "minilm-policy.yaml"
    path.write_text(yaml.safe_dump(POLICY), encoding="utf-8")
    return path


def _panels(tmp: Path) -> Path:
    path = tmp / "one.jsonl"
    path.write_text(json.dumps(PANEL) + "\n", encoding="utf-8")
    return path


def _started_theta_s(journal: Path, run_id: str | None = None) -> float:
    """The theta_s the run read with, from its journalled policy."""
    with Journal(journal) as store:
        run = run_id or store.runs()[0].run_id
        started = next(e for e in store.events(run) if e.type == ev.RUN_STARTED)
    reading = started.payload["policy"]["reading"]
    return Thresholds.for_model(backend_key(reading["similarity"]), reading["theta_s"]).theta_s


def _library_spec(tmp: Path) -> tuple[str, float]:
    journal = tmp / "lib.sqlite"
    spec = RunSpec.from_policy(_policy(tmp), similarity="tfidf")
    record = decide(PANEL, spec, journal=journal)
    return str(record.state), _started_theta_s(journal)


def _library_start_run(tmp: Path) -> tuple[str, float]:
    journal = tmp / "start.sqlite"

    async def run() -> list[CaseRecord]:
        with Journal(journal) as store:
            info = start_run(store, str(_panels(tmp)), _policy(tmp), similarity="tfidf", lock=True)
            return [r async for r in execute_run(store, info.run_id)]

    records = asyncio.run(run())
    return str(records[0].state), _started_theta_s(journal)


def _cli_decide(tmp: Path) -> tuple[str, float]:
    journal = tmp / "cli.sqlite"
    got = cli(
        "decide", _panels(tmp), "--policy", _policy(tmp), "--similarity", "tfidf", "--json",
        "--journal", journal,
    )  # fmt: skip
    assert got.code == 0, got.err
    return json.loads(got.out.splitlines()[0])["state"], _started_theta_s(journal)


def _cli_route(tmp: Path) -> tuple[str, float]:
    got = cli("route", _panels(tmp), "--similarity", "tfidf", "--json")
    assert got.code == 0, got.err
    record = json.loads(got.out.splitlines()[0])
    return record["state"], record["theta_s"]


def _service_route(tmp: Path) -> tuple[str, float]:
    async def ask() -> dict[str, Any]:
        async with client_for(settings(tmp, policy=str(_policy(tmp)))) as client:
            res = await client.post("/v1/route?similarity=tfidf", json=PANEL, headers=auth("sub"))
            assert res.status_code == 200, res.text
            return dict(res.json())

    record = asyncio.run(ask())
    return record["state"], record["theta_s"]


DOORS: dict[str, Door] = {
    "library RunSpec": _library_spec,
    "library start_run": _library_start_run,
    "cli decide": _cli_decide,
    "cli route": _cli_route,
    "service route": _service_route,
}


@pytest.mark.parametrize("door", sorted(DOORS))
def test_every_door_reads_the_override_with_the_new_backends_theta_s(
    door: str, tmp_path: Path
) -> None:
    state, theta_s = DOORS[door](tmp_path)
    assert (state, theta_s) == ("CA", TFIDF_DEFAULT), door


def test_the_journalled_policy_and_runs_show_say_the_policys_theta_s_was_not_carried_over(
    tmp_path: Path,
) -> None:
    journal = tmp_path / "j.sqlite"
    decided = cli(
        "decide", _panels(tmp_path), "--policy", _policy(tmp_path), "--similarity", "tfidf",
        "--json", "--journal", journal, "--run-id", "R",
    )  # fmt: skip
    assert decided.code == 0, decided.err
    with Journal(journal) as store:
        started = next(e for e in store.events("R") if e.type == ev.RUN_STARTED)
    assert started.payload["policy"]["reading"] == {
        "similarity": "tfidf",
        "theta_s": None,
        "theta_a": 0.8,
    }
    shown = cli("runs", "show", "R", "--journal", journal)
    assert "similarity tfidf (θ_s the backend's calibrated default)" in shown.out
    spec = json.loads(cli("runs", "show", "R", "--journal", journal, "--json").out)["spec"]
    assert (spec["similarity"], spec["theta_s"]) == ("tfidf", None)
    # The same backend by another name keeps the policy's theta_s, and runs show says it.
    again = cli(
        "decide", _panels(tmp_path), "--policy", _policy(tmp_path), "--similarity",
        "all-MiniLM-L6-v2", "--journal", journal, "--run-id", "S", "--json",
    )  # fmt: skip
    assert again.code == 0, again.err
    assert "(θ_s 0.95)" in cli("runs", "show", "S", "--journal", journal).out


NAMES = ["minilm", "all-MiniLM-L6-v2", "MiniLM", "tfidf", "static", "static-all-MiniLM-L6-v2"]


@given(
    policy_backend=st.sampled_from(NAMES),
    override=st.sampled_from(NAMES),
    theta_s=st.none() | st.floats(-1.0, 1.0, allow_nan=False),
    theta_a=st.floats(0.01, 1.0, allow_nan=False),
)
def test_one_rule_for_the_run_specification_and_the_route_endpoint(
    policy_backend: str, override: str, theta_s: float | None, theta_a: float
) -> None:
    reading = ReadingSettings(similarity=policy_backend, theta_s=theta_s, theta_a=theta_a)
    spec = RunSpec.from_policy({"reading": reading.model_dump()}, similarity=override)
    same = backend_key(policy_backend) == backend_key(override)
    expected = ReadingSettings(
        similarity=override, theta_s=theta_s if same else None, theta_a=theta_a
    )
    assert spec.policy.reading == expected == reading.with_similarity(override)
    # An override of a built spec, and the service's route thresholds, follow it too.
    assert RunSpec.from_policy(RunSpec.from_policy({"reading": reading.model_dump()}),
                               similarity=override).policy.reading == expected  # fmt: skip
    assert route_thresholds(reading, override, theta_s=None, theta_a=None) == (
        expected.theta_s,
        theta_a,
    )


def _llmbar_copy(tmp: Path) -> Path:
    for name in ("llmbar-policy.yaml", "llmbar-accept.json"):
        shutil.copy(ROOT / "examples" / name, tmp / name)
    return tmp / "llmbar-policy.yaml"


def test_an_override_the_acceptance_file_was_not_calibrated_with_is_named_not_the_policy(
    tmp_path: Path,
) -> None:
    policy = _llmbar_copy(tmp_path)
    got = cli(
        "decide", _panels(tmp_path), "--policy", policy, "--similarity", "tfidf",
        "--journal", tmp_path / "j.sqlite",
    )  # fmt: skip
    assert got.code == 2
    assert got.err.strip() == (
        "error: field 'similarity': the acceptance file was calibrated with similarity "
        "'minilm', --similarity reads with 'tfidf'"
    )
    assert str(policy) not in got.err and "reading.similarity" not in got.err
    # The library names its own argument; a built spec overridden says the same.
    for given_policy in (policy, RunSpec.from_policy(policy)):
        with pytest.raises(ConfigError) as err:
            RunSpec.from_policy(given_policy, similarity="tfidf")
        assert err.value.field == "similarity" and err.value.file is None
        assert str(err.value).endswith("the override reads with 'tfidf'")
    # A policy naming the other backend itself is still the policy file's field.
    data = yaml.safe_load(policy.read_text(encoding="utf-8"))
    data["reading"]["similarity"] = "tfidf"
    policy.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(policy)
    assert err.value.field == "reading.similarity" and err.value.file == str(policy)
    assert "the policy reads with 'tfidf'" in str(err.value)
