"""A JSONL input that is no UTF-8 text at all (UTF-16, gzip, ...) is one error naming
it and what it is, for a file and for standard input, never a reject per line."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
from pathlib import Path

import pytest

from cli_helpers import run_cli
from dissensus.io.jsonl import HEAD_BYTES, not_text

PANEL = {
    "id": "p1",
    "outputs": [
        {"agent": "a", "decision": "1", "reasoning": "because one"},
        {"agent": "b", "decision": "1", "reasoning": "because one too"},
    ],
}
TEXT = json.dumps(PANEL) + "\n" + json.dumps({**PANEL, "id": "p2"}) + "\n"

ENCODED = {
    "utf-16": (TEXT.encode("utf-16"), "it is UTF-16"),
    "utf-16-le": (TEXT.encode("utf-16-le"), "it is UTF-16"),
    "utf-16-be": (TEXT.encode("utf-16-be"), "it is UTF-16"),
    "utf-32": (TEXT.encode("utf-32"), "it is UTF-32"),
    "gzip": (gzip.compress(TEXT.encode()), "gzip-compressed"),
    "bzip2": (bz2.compress(TEXT.encode()), "bzip2-compressed"),
    "xz": (lzma.compress(TEXT.encode()), "xz-compressed"),
}


@pytest.mark.parametrize("kind", sorted(ENCODED))
def test_not_text_names_what_the_bytes_are(kind: str) -> None:
    data, what = ENCODED[kind]
    why = not_text(data[:HEAD_BYTES])
    assert why is not None and what in why


@pytest.mark.parametrize(
    "data",
    [
        TEXT.encode(),
        b"\xef\xbb\xbf" + TEXT.encode(),  # a UTF-8 byte order mark is UTF-8
        b"",
        b"\n\n",
        b"BZh",  # too short to be bzip2's header: a bad line, rejected as such
        b"BZhx\n",
        b"\x00\n" + TEXT.encode(),  # a NUL line is one bad line among good ones
    ],
)
def test_utf8_and_bad_lines_are_text(data: bytes) -> None:
    assert not_text(data[:HEAD_BYTES]) is None


@pytest.mark.parametrize("kind", ["utf-16", "gzip"])
@pytest.mark.parametrize(
    "command",
    [
        ["route", "--similarity", "tfidf", "--json"],
        ["decide", "--similarity", "tfidf", "--json"],
        ["calibrate-acceptance", "--out", "ACCEPT"],
        ["vote"],
    ],
)
def test_a_file_that_is_not_text_is_one_error(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    """It was a reject per line (23 for a small gzip file, each 'line is not valid
    UTF-8'), and, for decide, a run journalled of nothing but rejects."""
    data, what = ENCODED[kind]
    source = tmp_path / "panels.jsonl"
    source.write_bytes(data)
    name, *options = command
    options = [str(tmp_path / "accept.json") if o == "ACCEPT" else o for o in options]
    journal = tmp_path / "j.sqlite"
    extra = ["--journal", str(journal)] if name == "decide" else []
    proc = run_cli(name, str(source), *options, *extra)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {source}: not UTF-8 text (it is ")
    assert what in lines[0]
    assert "rejected" not in proc.stderr and proc.stdout == ""
    assert not journal.exists()


@pytest.mark.parametrize("kind", ["utf-16", "gzip", "xz"])
@pytest.mark.parametrize("command", [["route", "--similarity", "tfidf"], ["decide"]])
def test_standard_input_that_is_not_text_is_one_error(
    tmp_path: Path, kind: str, command: list[str]
) -> None:
    data, what = ENCODED[kind]
    extra = ["--journal", str(tmp_path / "j.sqlite")] if command[0] == "decide" else []
    proc = run_cli(command[0], "-", *command[1:], *extra, stdin=data)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: standard input: not UTF-8 text (it is ")
    assert what in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "rejected" not in proc.stderr


def test_utf8_standard_input_is_still_read_whole(tmp_path: Path) -> None:
    proc = run_cli("route", "-", "--similarity", "tfidf", "--json", stdin=TEXT.encode())
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["p1", "p2"]


@pytest.mark.parametrize(
    "data",
    [
        b"\xff\xfe{}\n",  # bytes of a byte order mark, then UTF-8: one bad first line
        b"\xfe\xff{}\n",
        b"\x1f\x8b{}\n",
        b"PK{}\n",
    ],
)
def test_a_bad_first_line_that_only_looks_like_a_signature_is_a_line(data: bytes) -> None:
    assert not_text(data[:HEAD_BYTES]) is None


def test_a_named_pipe_that_is_not_text_is_one_error(tmp_path: Path) -> None:
    """A named pipe's bytes are peeked where it is read, none consumed."""
    import os
    import threading

    fifo = tmp_path / "panels.fifo"
    os.mkfifo(fifo)
    data, _ = ENCODED["gzip"]

    def feed() -> None:
        with open(fifo, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = run_cli("route", str(fifo), "--similarity", "tfidf", "--json")
    writer.join(timeout=10)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: {fifo}: " + (
        "not UTF-8 text (it is gzip-compressed; decompress it first (gzip -dc FILE | dissensus ... -))"
    )


def test_a_named_pipe_of_utf8_is_still_read_whole(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "panels.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with open(fifo, "wb") as out:
            out.write(TEXT.encode())

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    proc = run_cli("route", str(fifo), "--similarity", "tfidf", "--json")
    writer.join(timeout=10)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["p1", "p2"]


REFUSING = [
    ["route", "--similarity", "tfidf", "--json"],
    ["calibrate-thresholds", "--quantile", "0.5", "--similarity", "tfidf"],
    ["calibrate"],
    ["vote"],
    ["judge"],
    ["calibrate-acceptance", "--out", "ACCEPT"],
    ["decide", "--similarity", "tfidf"],
]


def _refused(tmp_path: Path, command: list[str], source: str) -> None:
    """``command`` on ``source`` (``-`` or a named pipe) of gzip bytes is refused whole, and
    its outputs are as they were: the rejects file of a previous run keeps its lines, no
    journal is made."""
    import os
    import threading

    data, _ = ENCODED["gzip"]
    rejects = tmp_path / "rejects.jsonl"
    rejects.write_text('{"previous": "run"}\n')
    journal = tmp_path / "j.sqlite"
    accept = tmp_path / "accept.json"
    name, *options = command
    options = [str(accept) if o == "ACCEPT" else o for o in options]
    extra = ["--journal", str(journal)] if name == "decide" else []
    stdin: bytes | None = data
    writer = None
    if source != "-":
        os.mkfifo(source)
        stdin = None

        def feed() -> None:
            with open(source, "wb") as out:
                out.write(data)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
    proc = run_cli(name, source, *options, *extra, "--rejects", str(rejects), stdin=stdin)
    if writer is not None:
        writer.join(timeout=10)
    assert proc.returncode == 2, proc.stderr
    assert "gzip-compressed" in proc.stderr and "rejected" not in proc.stderr
    assert rejects.read_text() == '{"previous": "run"}\n'
    assert not journal.exists() and not accept.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["rejects.jsonl", *([] if source == "-" else [Path(source).name])]
    )


@pytest.mark.parametrize("command", REFUSING, ids=lambda c: c[0])
def test_standard_input_refused_whole_writes_nothing(tmp_path: Path, command: list[str]) -> None:
    """The rejects file was opened (emptied) before standard input was looked at, and
    ``decide -`` opened its journal first: a journal of no run was left behind."""
    _refused(tmp_path, command, "-")


@pytest.mark.parametrize("command", [c for c in REFUSING if c[0] != "decide"], ids=lambda c: c[0])
def test_a_named_pipe_refused_whole_writes_nothing(tmp_path: Path, command: list[str]) -> None:
    """A run's input is a regular file, so ``decide`` is not among them."""
    _refused(tmp_path, command, str(tmp_path / "in.fifo"))
