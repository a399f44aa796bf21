"""The review page shows the characters that show as nothing, escaped as the command line
shows them, and still posts the values it was given.

An agent named ``a\\u200bb`` read as ``ab`` on the case page (the command line escaped
it). Every ``{{ }}`` of a page now escapes the characters that show as nothing (``\\u200b``),
except in the values a form sends back (radio values, kept fields), which must round-trip:
an option whose id holds a zero-width space is resolved with that very id. Bidi controls
stay verbatim, isolated (``tests/test_serve_review_bidi.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from dissensus.store import Journal
from pipeline_cases import panel
from serve_helpers import auth, client_for, csrf_of, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

ZW = "\u200b"
OPTION = f"1{ZW}x"  # looks like "1x"


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def _case() -> dict[str, object]:
    case = panel(
        "zw",
        [OPTION, "2", OPTION],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=[f"Option one{ZW} is right\u202e.", "Two.", "One."],
    )
    outputs = case["outputs"]
    assert isinstance(outputs, list)
    outputs[0]["agent"] = f"a{ZW}b"
    return case


async def test_invisible_characters_are_shown_escaped_and_posted_as_given(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[_case()], headers=auth("sub"))).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        review_id = record["review_id"]
        await login(client, "rev")
        page = await client.get(f"/review/case/{review_id}")
        assert page.status_code == 200, page.text
        html = page.text
        assert "a\\u200bb" in html  # the agent, as the command line shows it
        assert "one\\u200b is right\\u202e." in html  # reasoning too, bidi controls as well
        shown = re.sub(r'(value|data-option)="[^"]*"', "", html)
        assert ZW not in shown  # nothing invisible is displayed
        assert f'value="{OPTION}"' in html  # the radio posts the option's own id
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', html)
        assert sha is not None
        done = await client.post(
            f"/review/case/{review_id}/resolve",
            data={
                "decision": OPTION,
                "note": f"kept{ZW}",
                "csrf": csrf_of(html),
                "content_sha256": sha.group(1),
            },
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run["run_id"], "review/1/resolved")
        assert resolved is not None
        assert resolved.payload["decision"] == OPTION
        assert resolved.payload["note"] == f"kept{ZW}"
