"""The review page's session store stays bounded, and without tokens cookie-less page
requests (which any web page can make a browser send) open no sessions."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dissensus.serve import create_app
from dissensus.serve.auth import LOCAL, Principal, SessionStore
from serve_helpers import csrf_of, escalating, settings

KIM = Principal(name="kim", role="review")


def test_the_store_never_holds_more_than_its_bound_and_ends_the_oldest() -> None:
    store = SessionStore(60.0, max_sessions=50)
    sids = [store.open(KIM) for _ in range(500)]
    assert len(store) == 50
    assert all(store.get(sid) is None for sid in sids[:-50])
    assert all(store.get(sid) == KIM for sid in sids[-50:])
    store.close(sids[-1])
    assert len(store) == 49 and store.get(sids[-1]) is None


def test_expired_sessions_are_dropped_when_the_next_opens(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr("dissensus.serve.auth.time.monotonic", lambda: now[0])
    store = SessionStore(10.0)
    old = [store.open(KIM) for _ in range(30)]
    now[0] += 5
    young = [store.open(KIM) for _ in range(20)]
    now[0] += 6  # the first 30 have expired, the 20 have not
    fresh = store.open(KIM)
    assert len(store) == 21
    assert all(store.get(sid) is None for sid in old)
    assert all(store.get(sid) == KIM for sid in [*young, fresh])


def test_the_local_session_is_shared_until_it_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr("dissensus.serve.auth.time.monotonic", lambda: now[0])
    store = SessionStore(10.0)
    sid = store.local(LOCAL)
    assert [store.local(LOCAL) for _ in range(100)] == [sid] * 100 and len(store) == 1
    store.close(sid)  # "log out"
    second = store.local(LOCAL)
    assert second != sid and store.get(second) == LOCAL
    now[0] += 11  # --session-ttl passed
    third = store.local(LOCAL)
    assert third not in (sid, second) and store.get(third) == LOCAL


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_without_tokens_cookieless_pages_share_one_session(
    tmp_path: Path, anyio_backend: str
) -> None:
    app = create_app(settings(tmp_path, tokens=None))
    sessions: SessionStore = app.state.service.sessions
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as bare:
        rid = (await bare.post("/v1/decide", json=escalating("a"))).json()["review_id"]
        given = set()
        for _ in range(200):
            got = await bare.get("/review")
            assert got.status_code == 303
            given.add(got.cookies["dissensus_session"])
            bare.cookies.clear()
        assert len(given) == 1 and len(sessions) == 1
    # Two browsers: the second's page and form work with the one session.
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as browser:
        page = await browser.get(f"/review/case/{rid}", follow_redirects=True)
        assert page.status_code == 200 and browser.cookies["dissensus_session"] in given
        claimed = await browser.post(f"/review/case/{rid}/claim", data={"csrf": csrf_of(page.text)})
        assert claimed.status_code == 303
    assert len(sessions) == 1
