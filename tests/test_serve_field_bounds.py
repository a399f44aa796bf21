"""An error names a field with its path, each key cut to 64 characters, never echoing
the input whole.

Before: a panel whose ``meta`` held a 1,000,000-character key with the value ``1e999``
was answered with a 1,000,061-byte 422 (``field: "meta.kkkk..."``), a key given twice
with a 2 MB 400, and a chat content part's 100 KB ``type`` was echoed in the message.
The command line's reader names the same fields the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from dissensus.io.jsonl import Reject, parse_line
from dissensus.panels.shapes import RequestMessage
from dissensus.types import FIELD_SEGMENT_CHARS, Panel, field_segment
from pipeline_cases import panel
from serve_helpers import auth, client_for
from serve_helpers import settings as serve_settings

pytestmark = pytest.mark.anyio

KEY = "k" * 1_000_000


def _line(meta_text: str) -> str:
    row = panel("p1", ["1", "1", "1"])
    row.pop("meta", None)
    return json.dumps(row)[:-1] + f', "meta": {meta_text}}}'


@pytest.mark.parametrize(
    ("case", "meta", "status"),
    [
        ("non-finite", f'{{"{KEY}": 1e999}}', 422),
        ("duplicate", f'{{"{KEY}": 1, "{KEY}": 2}}', 400),
    ],
)
async def test_a_huge_key_is_cut_in_the_field_as_the_cli_cuts_it(
    tmp_path: Path, case: str, meta: str, status: int
) -> None:
    line = _line(meta)
    cli = parse_line(Panel, line, file="-", line=1)
    assert isinstance(cli, Reject), case
    assert len(cli.field) < 200 and cli.field.startswith("meta.k") and cli.field.endswith("…")
    async with client_for(serve_settings(tmp_path)) as client:
        headers = {**auth("sub"), "Content-Type": "application/json"}
        res = await client.post("/v1/decide", headers=headers, content=line)
    assert res.status_code == status, res.text[:300]
    assert len(res.content) < 2_000, (case, len(res.content))
    body = res.json()
    assert body["field"] == cli.field, (body, cli.field)
    assert KEY[:100] not in body["error"]


def test_a_huge_content_part_type_is_cut_in_the_message() -> None:
    kind = "t" * 100_000
    with pytest.raises(ValidationError) as caught:
        RequestMessage.model_validate({"role": "user", "content": [{"type": kind}]})
    message = str(caught.value.errors()[0]["msg"])
    assert len(message) < 300 and "…" in message, len(message)


@seed(20261208)
@settings(max_examples=60, deadline=None)
@given(st.text(min_size=0, max_size=300))
def test_a_segment_is_at_most_the_bound_and_a_short_one_is_kept(text: str) -> None:
    shown = field_segment(text)
    assert len(shown) <= FIELD_SEGMENT_CHARS
    if len(text) <= FIELD_SEGMENT_CHARS:
        assert shown == text
    else:
        assert shown.endswith("…") and text.startswith(shown[:-1])
