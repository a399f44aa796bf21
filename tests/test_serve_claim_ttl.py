"""The server's claim duration is bounded as the journal bounds a claim.

The journal refuses a claim over ten years (``MAX_CLAIM_TTL``); a server set to hold
claims longer started, and then answered every claim with 409. Such a setting is now
refused when the server is configured, and the longest one it takes is a claim it can
make.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import ValidationError

from dissensus.serve import ServeSettings
from dissensus.store.claims import MAX_CLAIM_TTL
from serve_helpers import auth, client_for, escalating, settings


@pytest.mark.parametrize("ttl", [MAX_CLAIM_TTL + 1, 1e9, 1e12, float("inf")])
def test_a_claim_ttl_over_ten_years_is_refused_at_start_up(ttl: float) -> None:
    with pytest.raises(ValidationError) as caught:
        ServeSettings(claim_ttl_s=ttl)
    assert caught.value.errors()[0]["loc"] == ("claim_ttl_s",)


def test_the_longest_claim_ttl_taken_makes_claims(tmp_path: Path) -> None:
    s = settings(tmp_path, claim_ttl_s=MAX_CLAIM_TTL)

    async def go() -> int:
        async with client_for(s) as client:
            run = await client.post("/v1/decide", json=[escalating("a")], headers=auth("sub"))
            review_id = run.json()["records"][0]["review_id"]
            claimed = await client.post(f"/v1/review/{review_id}/claim", headers=auth("rev"))
            return claimed.status_code

    assert asyncio.run(go()) == 200
