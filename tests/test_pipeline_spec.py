"""The run specification: built once, checked before a run exists, journalled, rebuilt on resume."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import Policy, RunSpec
from dissensus.pipeline.batch import check_resumable, execute_run, run_spec, start_run
from dissensus.pipeline.policy import PIPELINE_ACTIONS, policy_from_dict
from dissensus.pipeline.spec import file_sha256
from dissensus.store import Journal
from pipeline_cases import mixed_batch, write_jsonl, write_policy, write_script

ROOT = Path(__file__).resolve().parents[1]


def _llmbar_copy(tmp: Path) -> Path:
    for name in ("llmbar-policy.yaml", "llmbar-accept.json"):
        shutil.copy(ROOT / "examples" / name, tmp / name)
    return tmp / "llmbar-policy.yaml"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"routing": {"defaults": {"DD": "auto_explian"}}}, "routing.defaults.DD"),
        (
            {"routing": {"rules": [{"id": "r", "when": {"state": "CA"}, "action": "sihp"}]}},
            "routing.rules.0.action",
        ),
    ],
)
def test_a_typo_in_an_action_is_refused_with_the_field_and_the_valid_actions(
    data: dict[str, object], field: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict(data, file="p.yaml")
    assert err.value.field == field
    assert all(a in str(err.value) for a in PIPELINE_ACTIONS)
    # The same check for a policy built in Python, and on the command line (exit 2, one line).
    with pytest.raises(ConfigError):
        RunSpec.from_policy(Policy.model_validate(data))
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump(data), encoding="utf-8")
    panels = write_jsonl(tmp_path / "in.jsonl", [r for r in mixed_batch() if isinstance(r, dict)])
    got = cli("decide", panels, "--policy", policy, "--journal", tmp_path / "j.sqlite")
    assert got.code == 2 and field in got.err and len(got.err.strip().splitlines()) == 1
    assert not (tmp_path / "j.sqlite").exists() or not Journal(tmp_path / "j.sqlite").runs()


def test_every_pipeline_action_is_accepted() -> None:
    for action in PIPELINE_ACTIONS:
        assert policy_from_dict({"routing": {"defaults": {"DD": action}}})


def test_the_spec_loads_every_file_relative_to_the_policy_with_its_digest(tmp_path: Path) -> None:
    policy = _llmbar_copy(tmp_path)
    spec = RunSpec.from_policy(policy)
    assert spec.base_dir == str(tmp_path.resolve())
    assert spec.acceptance is not None
    assert spec.digests() == {
        "policy": file_sha256(policy),
        "acceptance.model": file_sha256(tmp_path / "llmbar-accept.json"),
    }
    assert RunSpec.from_policy(spec) is spec  # a spec is a policy source of its own
    assert RunSpec.from_started(spec.started_fields()) == spec  # the journal round-trips it


def test_a_policy_file_with_an_explicit_folder_reads_every_relative_path_there(
    tmp_path: Path,
) -> None:
    """``policy_dir`` / ``base_dir`` beside a policy file holds all its relative paths: the
    acceptance file and the model files alike (the model files were read from the policy
    file's folder, the rest from the one given)."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    policy = _llmbar_copy(there)
    data = yaml.safe_load(policy.read_text())
    data["seek_context"] = {**(data.get("seek_context") or {}), "model": "scripted:rules.yaml"}
    moved = here / "policy.yaml"
    moved.write_text(yaml.safe_dump(data))
    write_script(there / "rules.yaml", {"a1": "1"})
    spec = RunSpec.from_policy(moved, base_dir=there)
    assert spec.base_dir == str(there.resolve()) and spec.acceptance is not None
    assert spec.policy.seek_context.model == f"scripted:{there.resolve() / 'rules.yaml'}"
    with pytest.raises(ConfigError):  # its own folder holds neither file
        RunSpec.from_policy(moved)


def test_overrides_are_checked_and_written_into_the_policy(tmp_path: Path) -> None:
    spec = RunSpec.from_policy(
        write_policy(tmp_path / "p.yaml"), deadline_s=3.0, concurrency=7, similarity="tfidf"
    )
    assert (spec.policy.deadline_s, spec.policy.concurrency) == (3.0, 7)
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(None, concurrency=0)
    assert err.value.field == "concurrency"
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(None, similarity="nope")
    assert err.value.field == "similarity"
    with pytest.raises(ConfigError, match="model spec"):
        RunSpec.from_policy(None, model="scripted:" + str(tmp_path / "missing.yaml"))
    # learned acceptance calibrated with MiniLM refuses another reading backend
    with pytest.raises(ConfigError, match="calibrated with similarity"):
        RunSpec.from_policy(_llmbar_copy(tmp_path), similarity="tfidf")


def test_the_model_comes_from_the_argument_the_policy_or_the_environment(tmp_path: Path) -> None:
    script = write_script(tmp_path / "s.yaml", {"a1": "1"})
    env_model = f"scripted:{script}"
    assert RunSpec.from_policy(None, environ={"DISSENSUS_MODEL": env_model}).model == env_model
    assert RunSpec.from_policy(None, environ={}).model is None
    policy = write_policy(tmp_path / "p.yaml", {"seek_context": {"model": "scripted:s.yaml"}})
    spec = RunSpec.from_policy(policy, environ={"DISSENSUS_MODEL": "openai:elsewhere"})
    assert spec.model == f"scripted:{tmp_path.resolve() / 's.yaml'}"


def test_run_started_holds_the_spec_and_runs_show_prints_it(tmp_path: Path) -> None:
    policy = _llmbar_copy(tmp_path)
    panels = write_jsonl(tmp_path / "in.jsonl", [r for r in mixed_batch() if isinstance(r, dict)])
    journal = tmp_path / "j.sqlite"
    with Journal(journal) as store:
        info = start_run(store, str(panels), policy, similarity=None)
        spec = run_spec(store, info.run_id)
    assert spec.digests()["acceptance.model"] == file_sha256(tmp_path / "llmbar-accept.json")
    shown = cli("runs", "show", info.run_id, "--journal", journal)
    assert shown.code == 0
    assert f"acceptance.model: {tmp_path.resolve() / 'llmbar-accept.json'}" in shown.out
    assert file_sha256(policy) in shown.out
    data = json.loads(cli("runs", "show", info.run_id, "--journal", journal, "--json").out)
    assert data["spec"]["similarity"] == "minilm"
    assert {f["role"] for f in data["spec"]["files"]} == {"policy", "acceptance.model"}


def test_resume_refuses_a_file_that_changed_and_names_it(tmp_path: Path) -> None:
    policy = _llmbar_copy(tmp_path)
    panels = write_jsonl(tmp_path / "in.jsonl", [r for r in mixed_batch() if isinstance(r, dict)])
    journal = tmp_path / "j.sqlite"
    with Journal(journal) as store:
        start_run(store, str(panels), policy, run_id="R")
        check_resumable(store, "R")  # nothing changed yet
        accept = tmp_path / "llmbar-accept.json"
        accept.write_text(accept.read_text(encoding="utf-8") + "\n", encoding="utf-8")
        with pytest.raises(ConfigError) as err:
            check_resumable(store, "R")
        assert err.value.field == "acceptance.model" and str(accept.resolve()) in str(err.value)
    got = cli("runs", "resume", "R", "--journal", journal)
    assert got.code == 2 and "llmbar-accept.json changed since the run started" in got.err
    accept.unlink()  # gone is fine: the journal holds the content
    with Journal(journal) as store:
        check_resumable(store, "R")


def test_a_resumed_run_decides_with_the_journalled_spec_not_the_files(tmp_path: Path) -> None:
    """The policy file may be edited (or removed) after the start: the journal's copy rules."""
    policy = write_policy(tmp_path / "p.yaml")
    rows = [r for r in mixed_batch() if isinstance(r, dict)]
    panels = write_jsonl(tmp_path / "in.jsonl", rows)
    with Journal(tmp_path / "j.sqlite") as store:
        start_run(store, str(panels), policy, run_id="R")
        policy.unlink()

        async def go() -> list[str]:
            return [r.id async for r in execute_run(store, "R")]

        assert asyncio.run(go()) == [r["id"] for r in rows]


def test_an_unimportable_similarity_function_is_refused_when_the_spec_is_built(
    tmp_path: Path,
) -> None:
    bad = {"allow_code": True, "reading": {"similarity": "no_such_module_xyz:fn"}}
    policy = write_policy(tmp_path / "p.yaml", bad)
    for source in (policy, bad, policy_from_dict(bad)):
        with pytest.raises(ConfigError, match="cannot import module 'no_such_module_xyz'") as err:
            RunSpec.from_policy(source)
        assert err.value.field == "reading.similarity"
    with pytest.raises(ConfigError, match="cannot import") as err:
        RunSpec.from_policy({"allow_code": True}, similarity="no_such_module_xyz:fn")
    assert err.value.field == "similarity"
    spec = RunSpec.from_policy({"allow_code": True})
    with pytest.raises(ConfigError, match="has no attribute"):
        RunSpec.from_policy(spec, similarity="json:no_such_function")
    # without allow_code an override naming code is refused at once too
    with pytest.raises(ConfigError, match="names Python code"):
        RunSpec.from_policy(None, similarity="json:dumps")
    # a code backend has no calibrated default theta_s: the policy must give one
    with pytest.raises(ConfigError, match="no calibrated default theta_s") as no_theta:
        RunSpec.from_policy({"allow_code": True}, similarity="json:dumps")
    assert no_theta.value.field == "reading.theta_s"
    with pytest.raises(ConfigError, match="no calibrated default theta_s"):
        RunSpec.from_policy(spec, similarity="json:dumps")
    assert RunSpec.from_policy(
        {"allow_code": True, "reading": {"similarity": "json:dumps", "theta_s": 0.5}},
        similarity="json:dumps",
    )


def test_a_similarity_alias_reads_with_the_backend_learned_acceptance_was_calibrated_with(
    tmp_path: Path,
) -> None:
    from dissensus.pipeline import decide

    policy = _llmbar_copy(tmp_path)
    text = policy.read_text(encoding="utf-8")
    assert "similarity: minilm" in text
    policy.write_text(
        text.replace("similarity: minilm", "similarity: all-MiniLM-L6-v2"), encoding="utf-8"
    )
    spec = RunSpec.from_policy(policy)
    assert spec.acceptance is not None and spec.policy.reading.similarity == "minilm"
    first = json.loads((ROOT / "examples" / "llmbar-swap.jsonl").read_text().splitlines()[0])
    assert decide(first, spec).state  # learned acceptance takes the alias too
    again = RunSpec.from_policy(spec, similarity="sentence-transformers/all-MiniLM-L6-v2")
    assert again.policy.reading.similarity == "minilm"
    with pytest.raises(ConfigError, match="calibrated with similarity 'minilm'"):
        RunSpec.from_policy(spec, similarity="static")


def _counting_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[Path]:
    """Count the reads of each file (resolved path) through the one file reader (which
    recordings and YAML files are read with)."""
    from dissensus import files
    from dissensus.io import yamlfile

    reads: Counter[Path] = Counter()
    read = files.read_file_bytes

    def counting(path: str | Path, **kwargs: Any) -> bytes:
        reads[Path(path).resolve()] += 1
        return read(path, **kwargs)

    monkeypatch.setattr(files, "read_file_bytes", counting)
    monkeypatch.setattr(yamlfile, "read_file_bytes", counting)
    return reads


def test_a_spec_build_reads_each_model_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's model and every agent's name one recording (and one script): the build
    reads each once, however many specs name it (it read the recording once per spec)."""
    rec = tmp_path / "rec.jsonl"
    rec.write_text("")  # an empty recording: valid, every call a miss
    script = write_script(tmp_path / "s.yaml", {"a1": "1"})
    models = {f"a{i}": "replay:rec.jsonl" for i in range(1, 6)}
    models |= {"a6": f"replay:{rec}", "a7": "record:out.jsonl:replay:rec.jsonl"}
    models |= {"a8": "scripted:s.yaml", "a9": f"scripted:{script}"}
    policy = write_policy(
        tmp_path / "p.yaml", {"seek_context": {"model": "replay:rec.jsonl", "models": models}}
    )
    reads = _counting_reads(monkeypatch)
    spec = RunSpec.from_policy(str(policy))
    assert spec.model == f"replay:{rec}"
    assert (reads[rec.resolve()], reads[script.resolve()]) == (1, 1), reads
    # The cache is the build's: another build reads the files again (they may have changed).
    RunSpec.from_policy(str(policy))
    assert (reads[rec.resolve()], reads[script.resolve()]) == (2, 2), reads


def test_a_model_file_that_changed_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file is known by its resolved path, size and modification time: one that changed
    since it was checked is read (and checked) again, through another path too."""
    from dissensus.llm.resolve import check_model_spec

    rec = tmp_path / "rec.jsonl"
    rec.write_text("")
    (tmp_path / "link.jsonl").symlink_to(rec)
    reads = _counting_reads(monkeypatch)
    checked: set[tuple[str, int, int]] = set()
    check_model_spec(f"replay:{rec}", checked=checked)
    check_model_spec(f"replay:{tmp_path / 'link.jsonl'}", checked=checked)
    assert reads[rec] == 1
    rec.write_text("not a recording\n")
    with pytest.raises(ConfigError, match="line 1"):
        check_model_spec(f"replay:{rec}", checked=checked)
    assert reads[rec] == 2
