"""Whether two paths name one file is one test, :func:`dissensus.files.same_file`, with
its options named by each caller: the command line's output checks and the model specs
(one resolved path, or one file, ``False`` when it cannot tell) and the MCP server's
caller files (one file only, ``None`` when it cannot tell). Three copies had drifted
apart in what they compared and what they answered when unsure."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dissensus.errors import InputError
from dissensus.files import same_file


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    real = tmp_path / "real.jsonl"
    real.write_text("{}\n")
    linked = tmp_path / "hard.jsonl"
    os.link(real, linked)
    (tmp_path / "sub").mkdir()
    return {
        "real": real,
        "hard": linked,
        "dotted": tmp_path / "sub" / ".." / "real.jsonl",
        "other": tmp_path / "other.jsonl",
        "new": tmp_path / "new.jsonl",
        "new_dotted": tmp_path / "sub" / ".." / "new.jsonl",
    }


def test_by_name_a_path_yet_to_be_written_is_the_same_under_another_spelling(
    files: dict[str, Path],
) -> None:
    assert same_file(files["new"], files["new_dotted"]) is True
    assert same_file(files["real"], files["dotted"]) is True
    assert same_file(files["real"], files["hard"]) is True  # one inode, two names


def test_what_cannot_be_told_is_the_callers_answer(files: dict[str, Path]) -> None:
    other = files["other"]
    other.write_text("{}\n")
    assert same_file(files["real"], other) is False
    assert same_file(files["real"], other, by_name=False, unknown=None) is False
    # Neither name exists: by name they differ, and by inode it cannot be told.
    assert same_file(files["new"], files["real"].with_name("gone")) is False
    assert same_file(files["new"], files["new_dotted"], by_name=False, unknown=None) is None
    assert same_file(files["real"], "bad\x00name", unknown=None) is None


def test_a_symbolic_link_loop_is_not_an_error(tmp_path: Path) -> None:
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert same_file(loop, tmp_path / "x") is False
    assert same_file(loop, tmp_path / "x", by_name=False, unknown=None) is None


def test_the_command_line_refuses_an_output_that_is_its_input_by_another_name(
    files: dict[str, Path],
) -> None:
    from dissensus.cli.common import check_output_path

    with pytest.raises(InputError, match="same file as") as refused:
        check_output_path(str(files["hard"]), option="--out", inputs=[str(files["real"])])
    assert "--out" in str(refused.value)
    check_output_path(str(files["new"]), option="--out", inputs=[str(files["real"])])
