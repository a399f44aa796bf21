"""What the tools answer that the library has no model of: ``decide``'s :class:`DecideResult`
and its :class:`PanelReject` per panel that was not decided."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from dissensus.pipeline import CaseRecord


class PanelReject(BaseModel):
    """A panel of a ``decide`` call that was not decided, as ``dissensus serve`` reports a
    rejected item: its place in ``panels`` (0-based), its id (its first
    :data:`~dissensus.quoting.SHORT_LIMIT` characters then ``…`` when longer), its run,
    and the field path and message the CLI reports for the same line (``field`` is
    ``None`` when the run stopped rather than refused the panel: its policy's
    ``deadline_s``, or an error that names no field; the run can be resumed)."""

    index: int
    id: str
    run_id: str
    field: str | None
    error: str


class UnfinishedRun(BaseModel):
    """A panel of a ``decide`` call whose record was made (it is under ``result``,
    journalled) but whose run then stopped before it ended: its policy's ``deadline_s``
    passed, or an error came after the record. The run reads ``incomplete`` in ``runs
    list``; ``error`` says why and gives the ``dissensus runs resume`` command that ends
    it (nothing is decided again)."""

    index: int
    id: str
    run_id: str
    error: str


def _empty(value: list[Any]) -> bool:
    return not value


class DecideResult(BaseModel):
    """The answer of ``decide``: the records under ``result`` (as ``dissensus decide --json``
    writes them, in panel order), and ``rejects`` when a panel was not decided (left out
    when none was, so that a call with no reject answers exactly ``{"result": [...]}``)."""

    result: list[CaseRecord]
    rejects: list[PanelReject] = Field(default_factory=list, exclude_if=_empty)
    unfinished: list[UnfinishedRun] = Field(default_factory=list, exclude_if=_empty)
    """Panels whose record is under ``result`` but whose run did not end (left out when
    every run ended)."""
