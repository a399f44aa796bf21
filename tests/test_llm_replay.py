"""Recording and replaying models: canonical keys, distinct agents, misses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from dissensus.errors import ConfigError
from dissensus.llm import (
    ChatRequest,
    Message,
    ReplayBackend,
    ReplayMiss,
    ScriptedBackend,
    request_key,
    resolve_model,
)
from dissensus.llm.client import ModelClient
from dissensus.llm.replay import RecordBackend


class Answer(BaseModel):
    label: str


def ask(text: str, agent: str | None = "a1", **kw: object) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=text)], agent=agent, stage="s", **kw)  # type: ignore[arg-type]


SCRIPT = """
rules:
  - match: {agent: a1}
    responses: ["first", "second"]
  - match: {agent: a2}
    json: {label: "yes"}
default: "other"
"""


def test_record_then_replay_round_trip(tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(SCRIPT)
    rec = tmp_path / "run.jsonl"
    recorder = resolve_model(f"record:{rec}:scripted:{tmp_path / 'rules.yaml'}")
    first = [recorder.chat_sync(ask("q")).text for _ in range(2)]
    parsed = recorder.chat_sync(ask("q", agent="a2"), schema=Answer).parsed
    recorder.close()
    assert first == ["first", "second"] and parsed == Answer(label="yes")
    lines = [json.loads(line) for line in rec.read_text().splitlines()]
    assert len(lines) == 3 and lines[0]["key"] == lines[1]["key"] != lines[2]["key"]

    replayer = resolve_model(f"replay:{rec}")
    assert [replayer.chat_sync(ask("q")).text for _ in range(3)] == ["first", "second", "first"]
    assert replayer.chat_sync(ask("q", agent="a2"), schema=Answer).parsed == Answer(label="yes")
    replayer.close()


def test_replay_miss_names_the_hash_and_the_closest_request(tmp_path: Path) -> None:
    rec = tmp_path / "run.jsonl"
    recorder = ModelClient(RecordBackend(ScriptedBackend.from_dict({"default": "x"}), rec))
    recorder.chat_sync(ask("What is the capital of France?"))
    recorder.chat_sync(ask("Completely unrelated words here"))
    recorder.close()
    replayer = ModelClient(ReplayBackend.from_file(rec))
    missing = ask("What is the capital of Spain?")
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(missing)
    assert info.value.key == request_key(missing)
    assert request_key(missing) in str(info.value)
    assert info.value.closest is not None and "capital of France" in info.value.closest
    assert "capital of France" in str(info.value)
    replayer.close()


def test_a_miss_reads_a_bounded_prefix_of_each_request(tmp_path: Path) -> None:
    """The closest-request hint reads each canonical request up to CLOSEST_CHARS: words
    past it decide nothing (so a long request's miss costs what a short one's does)."""
    from dissensus.llm.replay import CLOSEST_CHARS, Recording

    filler = "apples " * (CLOSEST_CHARS // 7 + 10)
    recordings = [
        Recording(
            key=f"k{i}",
            request={"messages": [{"role": "user", "content": filler + tail}]},
            response={"text": str(i), "model": "m"},
        )
        for i, tail in enumerate(["pears plums", "figs dates"])
    ]
    replayer = ModelClient(ReplayBackend(recordings))
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(ask(filler + "figs dates"))
    assert info.value.closest is not None and "pears plums" in info.value.closest  # first of equals
    replayer.close()


def test_a_long_repetitive_miss_still_names_the_closest_request(tmp_path: Path) -> None:
    """A repetitive request of thousands of words against 150 recordings (the slowest case
    of an edit-distance search: it held a server's event loop for minutes)."""
    from dissensus.llm.replay import Recording

    recordings = [
        Recording(
            key=f"k{i}",
            request={
                "messages": [
                    {"role": "user", "content": f"Tom has {i} apples and buys more. " * 50}
                ]
            },
            response={"text": str(i), "model": "m"},
        )
        for i in range(150)
    ]
    replayer = ModelClient(ReplayBackend(recordings))
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(ask("Tom has 77 apples and buys more apples. How many? " * 2_000))
    assert info.value.closest is not None and "Tom has 77 apples" in info.value.closest
    replayer.close()


def test_replay_miss_on_empty_recording(tmp_path: Path) -> None:
    rec = tmp_path / "empty.jsonl"
    rec.write_text("")
    client = resolve_model(f"replay:{rec}")
    with pytest.raises(ReplayMiss, match="recording is empty"):
        client.chat_sync(ask("q"))
    client.close()


def test_bad_recording_line_names_file_and_line(tmp_path: Path) -> None:
    rec = tmp_path / "bad.jsonl"
    rec.write_text(
        '{"key": "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "request": {}, "response": {"text": "t", "model": "m"}}\n{"key": 1}\n'
    )
    with pytest.raises(ConfigError, match=r"bad.jsonl.*line 2"):
        ReplayBackend.from_file(rec)


def test_recording_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    rec = tmp_path / "binary.jsonl"
    rec.write_bytes(b"\xff\xfe{}\n")
    with pytest.raises(ConfigError, match=r"binary.jsonl: recording is not UTF-8 text"):
        ReplayBackend.from_file(rec)


def test_key_is_model_independent_and_ignores_max_tokens() -> None:
    assert request_key(ask("q", max_tokens=5)) == request_key(ask("q", max_tokens=500))


texts = st.text(max_size=30)
names = st.one_of(st.none(), st.text(min_size=1, max_size=8))


@given(text=texts, a=names, b=names)
def test_each_agent_gets_distinct_keys(text: str, a: str | None, b: str | None) -> None:
    same = request_key(ask(text, agent=a)) == request_key(ask(text, agent=b))
    assert same == (a == b)


@given(
    text=texts,
    changed=st.sampled_from(["role", "stage", "temperature", "seed", "json_schema", "text"]),
)
def test_every_keyed_field_changes_the_key(text: str, changed: str) -> None:
    base = ask(text)
    update: dict[str, object] = {
        "role": {"role": "Framer"},
        "stage": {"stage": "other"},
        "temperature": {"temperature": 0.7},
        "seed": {"seed": 3},
        "json_schema": {"json_schema": {"type": "object"}},
        "text": {"messages": [Message(role="user", content=text + "!")]},
    }[changed]
    assert request_key(base) != request_key(base.model_copy(update=update))


def test_record_spec_with_inner_spec_containing_colons(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    client = resolve_model(f"record:{tmp_path / 'r.jsonl'}:openai:some:model")
    assert isinstance(client.backend, RecordBackend)
    assert client.model_id == "some:model"
    client.close()


def test_a_miss_says_when_only_the_prompt_text_differs(tmp_path: Path) -> None:
    """A recording made with another version's prompts: same agent, stage, schema and
    seed, the prompt reworded. The miss says the prompt text is all that differs."""
    rec = tmp_path / "run.jsonl"
    recorder = ModelClient(RecordBackend(ScriptedBackend.from_dict({"default": "x"}), rec))
    recorder.chat_sync(ask("CRITERIA: cost; risk\nWhich option?"))
    recorder.close()
    replayer = ModelClient(ReplayBackend.from_file(rec))
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(ask('<<<CRITERIA\n["cost", "risk"]\nCRITERIA>>>\nWhich option?'))
    assert "differs from this request only in its prompt text" in str(info.value)
    assert "another version of dissensus" in str(info.value)
    assert "the task or case text changed" in str(info.value)
    # another agent (or stage, seed, ...) is not a prompt-only difference
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(ask("CRITERIA: cost; risk\nWhich option?", agent="a2"))
    assert "only in its prompt text" not in str(info.value)
    replayer.close()


def test_a_miss_after_the_case_text_changed_names_the_input_first(tmp_path: Path) -> None:
    """The same prompts over another case's text: the miss says the input changed, not
    only that another version may have recorded it."""
    rec = tmp_path / "run.jsonl"
    recorder = ModelClient(RecordBackend(ScriptedBackend.from_dict({"default": "x"}), rec))
    recorder.chat_sync(ask("Question: ship on Friday?\nWhich option?"))
    recorder.close()
    replayer = ModelClient(ReplayBackend.from_file(rec))
    with pytest.raises(ReplayMiss) as info:
        replayer.chat_sync(ask("Question: ship on Monday?\nWhich option?"))
    message = str(info.value)
    assert "only in its prompt text: the task or case text changed" in message
    assert "was perhaps made by another version" not in message
    replayer.close()


LINE_BREAKS_OF_STR = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c\r"
"""Characters ``str.splitlines()`` ends a line at besides ``\\n``; canonical JSON writes
the first three as they are."""


@pytest.mark.parametrize("crlf", [False, True])
def test_a_recording_whose_prompt_holds_unicode_line_breaks_replays(
    tmp_path: Path, crlf: bool
) -> None:
    (tmp_path / "rules.yaml").write_text(SCRIPT)
    rec = tmp_path / "run.jsonl"
    prompts = [f"line one{ch}line two" for ch in LINE_BREAKS_OF_STR]
    recorder = resolve_model(f"record:{rec}:scripted:{tmp_path / 'rules.yaml'}")
    answers = [recorder.chat_sync(ask(p, agent="a3")).text for p in prompts]
    recorder.close()
    data = rec.read_bytes()
    assert "\u2028".encode() in data  # written unescaped, as canonical JSON writes it
    if crlf:  # a recording saved with CRLF line ends reads the same
        rec.write_bytes(data.replace(b"\n", b"\r\n"))
    replayer = resolve_model(f"replay:{rec}")
    assert [replayer.chat_sync(ask(p, agent="a3")).text for p in prompts] == answers
    replayer.close()
