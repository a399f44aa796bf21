"""Splitting a JSONL input into blocks of whole lines, and reading one block back.

A block is a byte range of the input that starts and ends on a line boundary, plus the
number of its first line. The driver plans blocks by scanning the bytes once (no JSON
is parsed there); a worker reads its block and numbers the lines exactly as reading the
whole file would, so rejects name the same line numbers as a local run.

Choices:

* Lines are counted with universal newlines (``\\n``, ``\\r\\n`` and a lone ``\\r``
  all end a line), as Python's text mode does; blocks are cut only after a ``\\n``, so
  a ``\\r\\n`` pair is never split.
* Bytes are decoded as UTF-8 with ``surrogateescape`` (like :func:`dissensus.io.jsonl.open_text`):
  an undecodable line is rejected on its own by the parser.
* A block's lines are all its lines, blank ones included; what reads them (a decide or
  route worker, a resumed run counting a block complete) skips a line exactly when a
  local run does (:func:`~dissensus.io.jsonl.blank_line`: white space only, or a byte
  order mark and white space on the first line), so a file saved with a BOM before a
  blank first line gives no reject on Ray that a local run does not give.
* Standard input (``-``) has no byte ranges to hand out: its lines (split by the
  caller, as the local path splits them) travel inside the block itself.
* Planning only counts (no bytes are kept from one read to the next) and a worker
  streams its block, reading a line over the line bound no further than
  :func:`~dissensus.io.jsonl.bounded_lines` reads it, as a local run does: a line of
  any length costs the memory of one chunk.
* ``lines_per_block`` is approximate in bytes: a block closes at the first ``\\n``
  after ``lines_per_block`` newlines.
* Planned for a run (with the file's ``sha256`` as the run journalled it), the planning
  pass hashes the whole file and each block's bytes as it counts them: a file that
  hashes otherwise is refused before any block is planned, and each block carries its
  own sha256, which :func:`block_lines` checks as it reads the block (the bytes hashed
  on the way, no second pass): a block whose bytes changed since (the file edited
  meanwhile) is an :class:`~dissensus.errors.InputError` once its last line is read,
  the error of a local run's input changed since the run started (lines appended after
  planning are in no block: not the run's, as its journalled sha256 says). Planned
  without it (``route``, which journals nothing), nothing is hashed.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from dissensus.errors import InputError
from dissensus.io.jsonl import bounded_lines

__all__ = ["Block", "block_lines", "count_lines", "plan_blocks", "plan_text_blocks"]

_CHUNK = 1 << 22


@dataclass(frozen=True)
class Block:
    """Whole lines ``first_line .. first_line + n_lines - 1`` of one input."""

    index: int
    """Position of the block in the input (0-based)."""
    first_line: int
    """1-based number of the block's first line."""
    n_lines: int
    """Lines in the block (blank ones included)."""
    path: str
    """The input file (``-`` when the lines are carried in ``lines``)."""
    offset: int = 0
    """Byte offset of the block in ``path``."""
    length: int = 0
    """Byte length of the block."""
    lines: tuple[str, ...] | None = None
    """The block's lines, for standard input."""
    sha256: str | None = None
    """The sha256 of the block's bytes as planned (``None``: not checked)."""

    @property
    def last_line(self) -> int:
        return self.first_line + self.n_lines - 1


def count_lines(data: bytes) -> int:
    """Lines in ``data`` under universal newlines (a last unterminated line counts)."""
    return _count(data, 0, len(data), data.count(b"\n"))


def _count(data: bytes, start: int, end: int, newlines: int) -> int:
    """:func:`count_lines` of ``data[start:end]`` (without copying it), which holds
    ``newlines`` ``\\n`` bytes."""
    # Each "\r\n" is one line end, as are a lone "\r" and a lone "\n". Most inputs
    # have no "\r" at all, which one memchr finds out: the two counts (by far the
    # dearest part of planning) only when there is one.
    n = newlines
    if data.find(b"\r", start, end) >= 0:
        n += data.count(b"\r", start, end) - data.count(b"\r\n", start, end)
    if end > start and data[end - 1] not in _ENDS:
        n += 1
    return n


_ENDS = b"\n\r"


def plan_blocks(path: str | Path, lines_per_block: int, sha256: str | None = None) -> list[Block]:
    """Blocks of about ``lines_per_block`` lines covering the file at ``path``.

    The file is read in chunks and only counted: no bytes are kept from one chunk to
    the next, so a line of any length (a file of one endless line) costs one chunk of
    memory and one pass, never a copy of what came before. With ``sha256`` (the file's,
    as its run journalled it), the same pass hashes the file and each block: another
    hash is :class:`~dissensus.errors.InputError`, and each block carries its own."""
    blocks: list[Block] = []
    start = 0  # absolute offset of the open block
    first = 1
    newlines = returns = pairs = 0  # b"\n", b"\r" and b"\r\n" in the open block
    at = 0  # absolute offset of the chunk read
    last = 0  # the last byte read (0: none yet)
    whole, part = (hashlib.sha256(), hashlib.sha256()) if sha256 is not None else (None, None)
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            if whole is not None:
                whole.update(chunk)
            if last == 0x0D and chunk[0] == 0x0A:
                pairs += 1  # a "\r\n" across two chunks (never across two blocks)
            view = memoryview(chunk)
            pos = 0
            while True:
                cut, found = _cut(chunk, pos, lines_per_block - newlines)
                end = cut or len(chunk)
                newlines += found
                if chunk.find(b"\r", pos, end) >= 0:
                    returns += chunk.count(b"\r", pos, end)
                    pairs += chunk.count(b"\r\n", pos, end)
                if part is not None:
                    part.update(view[pos:end])
                if not cut:
                    break
                n = newlines + returns - pairs
                blocks.append(_block(len(blocks), first, n, path, start, at + cut - start, part))
                start, first = at + cut, first + n
                newlines = returns = pairs = 0
                part = hashlib.sha256() if part is not None else None
                pos = cut
            at += len(chunk)
            last = chunk[-1]
    if whole is not None and whole.hexdigest() != sha256:
        raise InputError(_CHANGED.format(path=path))
    if at > start:
        n = newlines + returns - pairs + (last not in _ENDS)
        blocks.append(_block(len(blocks), first, n, path, start, at - start, part))
    return blocks


_CHANGED = "the run's input file changed since the run started: {path}"
"""A run's input that hashes otherwise than the run journalled (as a local run words it)."""


def _block(
    index: int, first: int, n: int, path: str | Path, offset: int, length: int, digest: Any
) -> Block:
    """A planned block, with the sha256 of its bytes when ``digest`` hashed them."""
    sha256 = digest.hexdigest() if digest is not None else None
    return Block(index, first, n, str(path), offset, length, sha256=sha256)


def _cut(data: bytes, start: int, lines: int) -> tuple[int, int]:
    """End (exclusive, an offset into ``data``) of the ``lines``-th ``\\n`` of
    ``data[start:]`` and ``lines``; or 0 and the ``\\n`` bytes there are, when fewer."""
    pos = start - 1
    for found in range(lines):
        pos = data.find(b"\n", pos + 1)
        if pos < 0:
            return 0, found
    return pos + 1, lines


def plan_text_blocks(lines: list[str], lines_per_block: int) -> list[Block]:
    """Blocks over lines already in memory (standard input), split by the caller."""
    return [
        Block(i, start + 1, len(part), "-", lines=tuple(part))
        for i, start in enumerate(range(0, len(lines), lines_per_block))
        for part in [lines[start : start + lines_per_block]]
    ]


def block_lines(block: Block) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for every line of ``block``, blank lines included; a line
    over the line bound is read no further than :func:`~dissensus.io.jsonl.bounded_lines`
    reads it (the parser then rejects it), so a block of one endless line is streamed.
    A block with a ``sha256`` has its bytes hashed as they are read: read to its end, a
    block that hashes otherwise is :class:`~dissensus.errors.InputError`; so is a file
    that can no longer be read (removed or moved since the run was planned), naming it."""
    if block.lines is not None:
        yield from enumerate(block.lines, start=block.first_line)
        return
    try:
        with open(block.path, "rb") as handle:
            handle.seek(block.offset)
            raw = _Window(handle, block.length, hashed=block.sha256 is not None)
            window = io.BufferedReader(raw, buffer_size=_CHUNK)
            with io.TextIOWrapper(window, encoding="utf-8", errors="surrogateescape") as source:
                yield from enumerate(bounded_lines(source), start=block.first_line)
    except OSError as exc:  # removed, moved or unreadable since the run was planned
        raise InputError(
            f"the run's input file cannot be read: {block.path} "
            f"({exc.strerror or type(exc).__name__})"
        ) from None
    if raw.digest is not None and raw.digest.hexdigest() != block.sha256:
        raise InputError(_CHANGED.format(path=block.path))


class _Window(io.RawIOBase):
    """The next ``length`` bytes of ``handle``, as a raw stream (the block's bytes),
    hashed (sha256, :attr:`digest`) on the way with ``hashed``."""

    def __init__(self, handle: BinaryIO, length: int, *, hashed: bool = False) -> None:
        self._handle = handle
        self._left = length
        self.digest = hashlib.sha256() if hashed else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        size = min(len(view), self._left)
        if size <= 0:
            return 0
        got: int = self._handle.readinto(view[:size])  # type: ignore[attr-defined]
        self._left -= got
        if self.digest is not None:
            self.digest.update(view[:got])
        return got
