"""The review page shows a DCI packet's residual objections as text, not Python.

A case a ``deliberate`` route sent to review carries its decision packet; the case page
printed each residual objection as the ``repr`` of its JSON object
(``{'tension': 't1', 'holder': 'challenger', ..., 'points': [...]}``). It now reads as
the packet's text does: who objects, to what (the case's own label of an option, and its
id in the deliberation), whether it blocks, and the point made.
"""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import yaml

from cli_helpers import cli
from dissensus.serve import ServeSettings
from pipeline_cases import panel, write_jsonl, write_policy
from serve_helpers import client_for, login, settings

pytestmark = pytest.mark.anyio

POINT = "o1 misses the <b>refund</b> window"

_RULES: list[dict[str, object]] = [
    {"match": {"stage": "dci.frame"}, "json": {"act": "frame", "target": "a0", "text": "f"}},
    {"match": {"stage": "dci.propose"}, "json": {"act": "extend", "target": "o2", "text": "e"}},
    {
        "match": {"stage": "dci.challenge", "agent": "challenger"},
        "json": {"act": "challenge", "target": "o1", "text": POINT, "blocking": True},
    },
    {"match": {"stage": "dci.challenge"}, "json": {"act": "ground", "target": "o2", "text": "g"}},
    {"match": {"stage": "dci.revise"}, "json": {"act": "clarify", "target": "o2", "text": "c"}},
    {
        "match": {"stage": "dci.score"},
        "json": {"act": "recommend", "target": "o2", "text": "r", "scores": {"o1": 0.1, "o2": 0.9}},
    },
    {
        "match": {"stage": "dci.synthesize"},
        "json": {"act": "synthesize", "target": "o2", "text": "s"},
    },
]


@pytest.fixture
def journalled(tmp_path: Path) -> ServeSettings:
    """The service's settings over a journal holding one case a deliberate route sent
    to review, its packet holding a blocking objection."""
    s = settings(tmp_path)
    script = tmp_path / "dci.yaml"
    script.write_text(yaml.safe_dump({"rules": _RULES}), encoding="utf-8")
    deliberate = {"id": "d", "condition": "agreement < 0.9", "action": "deliberate", "priority": 5}
    policy = write_policy(tmp_path / "deliberate.yaml", {"routing": {"rules": [deliberate]}})
    inp = write_jsonl(tmp_path / "in.jsonl", [panel("c", ["2", "1", "2"])])
    args = ["decide", str(inp), "--policy", str(policy), "--journal", s.journal, "--json"]
    result = cli(*args, "--model", f"scripted:{script}")
    assert result.code == 0, result.err
    assert "DCI packet attached for review" in result.out
    return s


async def test_a_residual_objection_reads_as_text(journalled: ServeSettings) -> None:
    async with client_for(journalled) as client:
        assert (await login(client, "rev")).status_code == 303
        queue = await client.get("/review")
        (review_id,) = {part.split('"')[0] for part in queue.text.split("/review/case/")[1:]}
        page = await client.get(f"/review/case/{review_id}")
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert "'tension'" not in text and "'points'" not in text
    # the option the case calls 1, by its label and its id in the deliberation
    assert "<bdi>challenger</bdi> on <bdi>1 (o1)</bdi> (blocking):" in text
    assert POINT in text and "<b>refund</b>" not in page.text  # escaped, never markup
