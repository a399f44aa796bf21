"""A ``record:FILE:<spec>`` recording is an output: never a file the run reads, never in a
missing directory, and a recording that cannot be written is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.llm import ChatRequest, Message, resolve_model
from dissensus.llm.base import ModelCallError
from dissensus.llm.resolve import check_model_spec

RULES = 'default: "We should ship."\n'


def ask() -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content="q")], agent="a", stage="s")


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    return path


def _aliases(rules: Path) -> list[Path]:
    link = rules.with_name("link.yaml")
    link.symlink_to(rules.name)
    hard = rules.with_name("hard.yaml")
    os.link(rules, hard)
    return [rules, link, hard]


def test_a_recording_that_is_the_inner_specs_file_is_refused(rules: Path) -> None:
    for alias in _aliases(rules):
        for inner in (f"scripted:{rules}", f"record:{rules.with_name('x.jsonl')}:scripted:{rules}"):
            spec = f"record:{alias}:{inner}"
            with pytest.raises(ConfigError, match="same file") as info:
                resolve_model(spec)
            assert spec in str(info.value) and "\n" not in str(info.value)
            with pytest.raises(ConfigError, match="same file"):
                check_model_spec(spec)
    assert rules.read_text() == RULES


def test_a_recording_of_a_replay_into_its_own_recording_is_refused(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    rec.write_text("")
    with pytest.raises(ConfigError, match="same file"):
        resolve_model(f"record:{rec}:replay:{rec}")
    assert rec.read_text() == ""


def test_a_recording_in_a_missing_directory_is_refused_not_created(
    tmp_path: Path, rules: Path
) -> None:
    missing = tmp_path / "no" / "such"
    spec = f"record:{missing / 'r.jsonl'}:scripted:{rules}"
    for call in (resolve_model, check_model_spec):
        with pytest.raises(ConfigError, match="directory does not exist") as info:
            call(spec)
        assert str(missing) in str(info.value)
    assert not (tmp_path / "no").exists()


def test_a_recording_that_is_one_of_the_commands_files_is_refused(
    tmp_path: Path, rules: Path
) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("question: ship?\n")
    with pytest.raises(ConfigError, match=r"same file as .*task\.yaml \(TASK\.yaml\)"):
        check_model_spec(f"record:{task}:scripted:{rules}", files={"TASK.yaml": str(task)})


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_recording_that_cannot_be_written_is_named(rules: Path) -> None:
    client = resolve_model(f"record:/dev/full:scripted:{rules}")
    with pytest.raises(ModelCallError) as info:
        client.chat_sync(ask())
    text = str(info.value)
    assert "cannot write the recording /dev/full" in text and "ENOSPC" in text
    assert "\n" not in text
    client.close()  # nothing left to flush: closing does not fail again


def test_deliberate_refuses_a_recording_over_its_rules_or_task(tmp_path: Path, rules: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("question: ship?\n")
    for target in (rules, task):
        before = target.read_text()
        res = cli(
            "deliberate", "-m", "single", "--model", f"record:{target}:scripted:{rules}", task
        )
        assert res.code == 2, res.err
        lines = res.err.strip().splitlines()
        assert len(lines) == 1 and "same file" in lines[0] and str(target) in lines[0]
        assert target.read_text() == before


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_deliberate_names_a_recording_that_cannot_be_written(tmp_path: Path, rules: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("question: ship?\n")
    res = cli("deliberate", "-m", "single", "--model", f"record:/dev/full:scripted:{rules}", task)
    assert res.code == 1
    assert "cannot write the recording /dev/full" in res.err
    assert "Traceback" not in res.err


def test_deliberate_refuses_a_missing_recording_directory(tmp_path: Path, rules: Path) -> None:
    task = tmp_path / "task.yaml"
    task.write_text("question: ship?\n")
    missing = tmp_path / "gone"
    res = cli("deliberate", "--model", f"record:{missing / 'r.jsonl'}:scripted:{rules}", task)
    assert res.code == 2 and str(missing) in res.err and len(res.err.strip().splitlines()) == 1
    assert not missing.exists()


def test_decide_refuses_a_recording_over_its_panels(tmp_path: Path, rules: Path) -> None:
    panels = tmp_path / "panels.jsonl"
    panels.write_text("{}\n")
    res = cli(
        "decide",
        panels,
        "--journal",
        tmp_path / "j.db",
        "--model",
        f"record:{panels}:scripted:{rules}",
    )
    assert res.code == 2, res.err
    assert "same file" in res.err and "PANELS" in res.err
    assert panels.read_text() == "{}\n"
    assert not (tmp_path / "j.db").exists()
