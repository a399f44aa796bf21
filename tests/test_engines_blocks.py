"""Blocks of input lines for the engines: same lines, same numbers as reading the file."""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.engines import check_engine
from dissensus.engines.blocks import block_lines, count_lines, plan_blocks, plan_text_blocks
from dissensus.errors import ConfigError, InputError

_PIECES = st.lists(
    st.one_of(
        st.sampled_from(["\n", "\r\n", "\r", "", " \n", '{"id": "x"}', "é", "\u2028", "\x0c"]),
        st.binary(max_size=3).map(lambda b: b.decode("latin-1")),
    ),
    max_size=40,
)


def _file_lines(data: bytes) -> list[tuple[int, str]]:
    with tempfile.NamedTemporaryFile(delete=False) as handle:
        handle.write(data)
    try:
        with open(handle.name, encoding="utf-8", errors="surrogateescape") as text:
            return list(enumerate(text, start=1))
    finally:
        Path(handle.name).unlink()


@given(_PIECES, st.booleans(), st.integers(min_value=1, max_value=7))
def test_blocks_cover_the_file_with_the_numbers_text_mode_gives(
    pieces: list[str], bad_byte: bool, size: int
) -> None:
    data = "".join(pieces).encode("utf-8")
    if bad_byte:
        data += b"\xff\xfe tail\n"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(data)
        blocks = plan_blocks(path, size)
        got = [pair for block in blocks for pair in block_lines(block)]
        assert got == _file_lines(data)
        assert sum(b.length for b in blocks) == len(data)
        assert [b.index for b in blocks] == list(range(len(blocks)))
        for block in blocks:
            assert block.n_lines == len(list(block_lines(block)))


@given(_PIECES)
def test_count_lines_counts_as_text_mode_reads(pieces: list[str]) -> None:
    data = "".join(pieces).encode("utf-8")
    assert count_lines(data) == len(_file_lines(data))


def test_small_chunks_cut_blocks_the_same(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dissensus.engines import blocks as mod

    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join(b'{"n": %d}\r\n' % i for i in range(100)) + b"last")
    whole = plan_blocks(path, 9)
    monkeypatch.setattr(mod, "_CHUNK", 7)
    assert plan_blocks(path, 9) == whole
    assert [b.first_line for b in whole][:3] == [1, 10, 19] and whole[-1].last_line == 101


def test_text_blocks_keep_the_callers_lines() -> None:
    lines = "a\nb\x0cc\r\n\nd".splitlines(keepends=True)
    blocks = plan_text_blocks(lines, 2)
    assert [pair for b in blocks for pair in block_lines(b)] == list(enumerate(lines, start=1))
    assert count_lines(b"a\r\nb\rc\n") == 3 and count_lines(b"x") == 1 and count_lines(b"") == 0


def test_engine_names_and_options() -> None:
    assert check_engine("Ray") == "ray" and check_engine("local") == "local"
    with pytest.raises(ConfigError, match="unknown engine"):
        check_engine("spark")
    with pytest.raises(ConfigError, match="need '--engine ray'"):
        check_engine("local", workers=2)
    with pytest.raises(ConfigError, match="at least 1"):
        check_engine("ray", workers=0)


def test_cli_refuses_unknown_engine_and_ray_options_without_ray(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dissensus.cli import main

    panels = str(Path(__file__).resolve().parent.parent / "examples" / "llmbar-cot.jsonl")
    assert main(["route", panels, "--similarity", "tfidf", "--engine", "spark"]) == 2
    assert "field 'engine': unknown engine 'spark'" in capsys.readouterr().err
    assert main(["decide", panels, "--journal", str(tmp_path / "j.sqlite"), "--workers", "2"]) == 2
    assert "need '--engine ray'" in capsys.readouterr().err


@given(_PIECES, st.integers(min_value=1, max_value=5), st.integers(min_value=1, max_value=9))
def test_any_chunk_size_plans_the_same_blocks(pieces: list[str], size: int, chunk: int) -> None:
    from dissensus.engines import blocks as mod

    data = "".join(pieces).encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(data)
        whole = plan_blocks(path, size)
        saved = mod._CHUNK
        mod._CHUNK = chunk
        try:
            assert plan_blocks(path, size) == whole
        finally:
            mod._CHUNK = saved
        assert sum(b.n_lines for b in whole) == count_lines(data)


def test_an_endless_line_is_planned_and_read_within_the_line_bound(tmp_path: Path) -> None:
    from dissensus.io.limits import MAX_LINE_CHARS

    path = tmp_path / "in.jsonl"
    with path.open("wb") as handle:
        handle.write(b'{"id": "a"}\n')
        handle.write(b"[" * (MAX_LINE_CHARS + 5_000_000) + b"\n")
        handle.write(b'{"id": "b"}')
    blocks = plan_blocks(path, 1)
    assert [(b.first_line, b.n_lines) for b in blocks] == [(1, 1), (2, 1), (3, 1)]
    lines = [pair for block in blocks for pair in block_lines(block)]
    assert [number for number, _ in lines] == [1, 2, 3]
    assert len(lines[1][1]) == MAX_LINE_CHARS + 1  # the parser rejects it as <line>
    assert lines[2][1] == '{"id": "b"}'


@given(
    _PIECES,
    st.integers(min_value=1, max_value=5),
    st.integers(min_value=1, max_value=9),
    st.data(),
)
def test_each_block_verifies_its_own_bytes_and_only_its_own(
    pieces: list[str], size: int, chunk: int, data: st.DataObject
) -> None:
    """Planned with the file's sha256, every block reads back unchanged; a byte changed
    afterwards fails exactly the block that holds it, and planning the changed file
    against the old sha256 is refused (chunks of any size: a block across chunks)."""
    from dissensus.engines import blocks as mod

    raw = "".join(pieces).encode("utf-8")
    digest = hashlib.sha256(raw).hexdigest()
    with tempfile.TemporaryDirectory() as tmp, patch.object(mod, "_CHUNK", chunk):
        path = Path(tmp) / "in.jsonl"
        path.write_bytes(raw)
        blocks = plan_blocks(path, size, digest)
        assert [b.sha256 for b in blocks] == [
            hashlib.sha256(raw[b.offset : b.offset + b.length]).hexdigest() for b in blocks
        ]
        assert [pair for b in blocks for pair in block_lines(b)] == _file_lines(raw)
        if not raw:
            return
        at = data.draw(st.integers(min_value=0, max_value=len(raw) - 1), label="flipped byte")
        changed = bytearray(raw)
        changed[at] ^= 0xFF
        path.write_bytes(bytes(changed))
        failed = []
        for block in blocks:
            try:
                list(block_lines(block))
            except InputError as exc:
                assert str(exc) == f"the run's input file changed since the run started: {path}"
                failed.append(block.index)
        assert failed == [b.index for b in blocks if b.offset <= at < b.offset + b.length]
        with pytest.raises(InputError, match="changed since the run started"):
            plan_blocks(path, size, digest)


def test_blocks_planned_without_the_files_sha256_are_not_checked(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b"}\n')
    blocks = plan_blocks(path, 1)
    assert [b.sha256 for b in blocks] == [None, None]
    path.write_bytes(b'{"id": "A"}\n{"id": "B"}\n')  # route journals no sha256 to keep to
    assert [text for b in blocks for _, text in block_lines(b)] == [
        '{"id": "A"}\n',
        '{"id": "B"}\n',
    ]
    assert all(b.sha256 is None for b in plan_text_blocks(["x\n"], 1))


@pytest.mark.parametrize("value", ["abc", "1", "x:/tmp/m", "1:", "١:/tmp/m"])
def test_a_malformed_ray_fault_switch_is_refused_before_a_run(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ray engine's test switch, set by mistake to another form, is a ConfigError naming
    it when the engine is checked (before any run starts), never a worker's traceback."""
    from dissensus.engines.ray.fault import FAULT_ENV, _fault

    monkeypatch.setenv(FAULT_ENV, value)
    with pytest.raises(ConfigError) as caught:
        check_engine("ray")
    assert caught.value.field == FAULT_ENV and FAULT_ENV in str(caught.value)
    monkeypatch.setenv(FAULT_ENV, "3:/tmp/marker")
    assert check_engine("ray") == "ray" and _fault() == (3, "/tmp/marker", 1)
    monkeypatch.setenv(FAULT_ENV, "3:/tmp/a:b:2")
    assert _fault() == (3, "/tmp/a:b", 2)
    monkeypatch.delenv(FAULT_ENV)
    assert _fault() is None and check_engine("local") == "local"
