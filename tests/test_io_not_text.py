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
