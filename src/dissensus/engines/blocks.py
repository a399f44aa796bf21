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
* Standard input (``-``) has no byte ranges to hand out: its lines (split by the
  caller, as the local path splits them) travel inside the block itself.
* ``lines_per_block`` is approximate in bytes: a block closes at the first ``\\n``
  after ``lines_per_block`` newlines.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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


def plan_blocks(path: str | Path, lines_per_block: int) -> list[Block]:
    """Blocks of about ``lines_per_block`` lines covering the file at ``path``."""
    blocks: list[Block] = []
    offset = 0
    first = 1
    pending = b""
    with open(path, "rb") as handle:
        while True:
            chunk = handle.read(_CHUNK)
            data = pending + chunk if pending else chunk
            # Blocks are cut at offsets into the chunk read: no copy of what follows a cut.
            start = 0
            cut, newlines = _cut(data, start, lines_per_block, final=not chunk)
            while cut:
                n = _count(data, start, cut, newlines)
                blocks.append(Block(len(blocks), first, n, str(path), offset, cut - start))
                offset += cut - start
                first += n
                start = cut
                cut, newlines = _cut(data, start, lines_per_block, final=not chunk)
            pending = data[start:]
            if not chunk:
                break
    return blocks


def _cut(data: bytes, start: int, lines: int, *, final: bool) -> tuple[int, int]:
    """End (exclusive, an offset into ``data``) of the first block in ``data[start:]``,
    or 0 when more bytes are needed; and the ``\\n`` bytes in the block."""
    if start >= len(data):
        return 0, 0
    pos = start - 1
    for found in range(lines):
        pos = data.find(b"\n", pos + 1)
        if pos < 0:
            return (len(data), found) if final else (0, 0)
    return pos + 1, lines


def plan_text_blocks(lines: list[str], lines_per_block: int) -> list[Block]:
    """Blocks over lines already in memory (standard input), split by the caller."""
    return [
        Block(i, start + 1, len(part), "-", lines=tuple(part))
        for i, start in enumerate(range(0, len(lines), lines_per_block))
        for part in [lines[start : start + lines_per_block]]
    ]


def block_lines(block: Block) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` for every line of ``block``, blank lines included."""
    if block.lines is not None:
        yield from enumerate(block.lines, start=block.first_line)
        return
    with open(block.path, "rb") as handle:
        handle.seek(block.offset)
        data = handle.read(block.length)
    source = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")
    yield from enumerate(source, start=block.first_line)
