"""An unknown query parameter is checked after the caller's token, never before.

Before: the check ran as a router dependency, ahead of the route's role: ``GET
/v1/runs?_=1`` without a token, with a wrong one, or with a token of another role was
answered 422 listing the endpoint's parameters, its token never checked (a wrong token
not counted by the throttle of failed checks), where it is 401 (with
``WWW-Authenticate``) or 403.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from serve_helpers import auth, client_for, settings

pytestmark = pytest.mark.anyio


async def test_credentials_are_checked_before_the_query(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        bare = await client.get("/v1/runs?_=1")
        assert bare.status_code == 401, bare.text
        assert "www-authenticate" in bare.headers
        assert "takes" not in bare.text
        wrong = await client.get("/v1/runs?_=1", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, wrong.text
        other_role = await client.get("/v1/runs?_=1", headers=auth("rev"))
        assert other_role.status_code == 403, other_role.text
        review_route = await client.get("/v1/review?_=1", headers=auth("sub"))
        assert review_route.status_code == 403, review_route.text
        # A caller who may use the endpoint is still told of the parameter.
        known = await client.get("/v1/runs?_=1", headers=auth("sub"))
        assert known.status_code == 422 and known.json()["field"] == "_", known.text
        twice = await client.get("/v1/runs?limit=5&limit=6", headers=auth("sub"))
        assert twice.status_code == 422 and twice.json()["field"] == "limit", twice.text


async def test_a_route_without_the_query_check_still_takes_any_query(tmp_path: Path) -> None:
    async with client_for(settings(tmp_path)) as client:
        res = await client.get("/healthz?_=1")
        assert res.status_code == 200, res.text
