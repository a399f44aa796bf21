"""Guessing a token is slowed down: after ``--login-failures`` unknown tokens from one
address within a minute, its tokens are refused 429 unchecked until the minute passes
(bearer tokens, the chat door and the login form alike)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.serve import create_app
from dissensus.serve.throttle import FailedLogins, address_key
from serve_helpers import auth, csrf_of, heap_frozen
from serve_helpers import settings as serve_settings

RUNS = "/v1/runs?limit=1"


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _client(app: object, host: str = "10.0.0.1") -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app, client=(host, 4000))  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


def _app(tmp_path: Path, limit: int, clock: Clock) -> object:
    app = create_app(serve_settings(tmp_path, login_failures=limit))
    app.state.service.failed_logins = FailedLogins(limit, clock=clock)
    return app


# -- the counter --------------------------------------------------------------------------

_STEPS = st.lists(
    st.tuples(
        st.sampled_from(["fail", "ask"]),
        st.sampled_from(["10.0.0.1", "10.0.0.2", "2001:db8::1", "2001:db8::2", "2001:db9::1"]),
        st.floats(min_value=0, max_value=40, allow_nan=False),
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(steps=_STEPS, limit=st.integers(1, 5), room=st.integers(1, 6))
def test_an_address_is_refused_exactly_while_it_has_limit_failures_in_the_window(
    steps: list[tuple[str, str, float]], limit: int, room: int
) -> None:
    clock = Clock()
    logins = FailedLogins(limit, window_s=60.0, max_addresses=room, clock=clock)
    failures: dict[str, list[float]] = {}  # the model: every failure, never forgotten
    forgotten: set[str] = set()
    for op, host, dt in steps:
        clock.now += dt
        key = address_key(host)
        recent = [t for t in failures.get(key, []) if t > clock.now - 60.0]
        wait = logins.retry_after(host)
        if key not in forgotten:
            if len(recent) >= limit:
                assert wait is not None
                # until the oldest failure that keeps it refused leaves the window
                assert 1 <= wait <= 60 and wait >= recent[-limit] + 60.0 - clock.now
            else:
                assert wait is None
        elif wait is not None:  # forgotten, then failing again: never more than the model
            assert len(recent) >= limit
        if op == "fail" and wait is None:
            if key not in {address_key(h) for h in logins._failures} and len(logins) >= room:
                # the new address pushes the one failing longest ago out
                forgotten.add(next(iter(logins._failures)))
            failures.setdefault(key, []).append(clock.now)
            logins.failed(host)
        assert len(logins) <= room


def test_an_ipv6_address_counts_by_its_network_and_a_mapped_ipv4_as_itself() -> None:
    assert address_key("2001:db8::1") == address_key("2001:db8::ffff:1") == "2001:db8::/64"
    assert address_key("2001:db8:0:1::1") != address_key("2001:db8::1")
    assert address_key("::ffff:10.0.0.1") == address_key("10.0.0.1") == "10.0.0.1"
    assert address_key(None) == "" and address_key("testclient") == "testclient"


def test_no_limit_remembers_nothing() -> None:
    logins = FailedLogins(0)
    for _ in range(100):
        logins.failed("10.0.0.1")
    assert logins.retry_after("10.0.0.1") is None and len(logins) == 0
    with pytest.raises(ValueError):
        FailedLogins(-1)


# -- bearer tokens ------------------------------------------------------------------------


@pytest.mark.anyio
async def test_unknown_bearer_tokens_are_refused_unchecked_for_a_minute(tmp_path: Path) -> None:
    clock = Clock()
    app = _app(tmp_path, 3, clock)
    async with _client(app) as client, _client(app, "10.0.0.9") as other:
        for _ in range(3):
            clock.now += 1
            wrong = await client.get(RUNS, headers=auth("guess"))
            assert wrong.status_code == 401
        refused = await client.get(RUNS, headers=auth("sub"))  # a right token: not checked
        assert refused.status_code == 429
        assert refused.headers["Retry-After"] == "58"
        assert refused.json() == {
            "error": "too many unknown tokens from this address: try again in 58 s "
            "(the token was not checked)",
            "field": "Authorization",
        }
        # another address, a request without a token, a refused one: none is counted
        assert (await other.get(RUNS, headers=auth("sub"))).status_code == 200
        assert (await client.get(RUNS)).status_code == 401
        for _ in range(10):
            assert (await client.get(RUNS, headers=auth("guess"))).status_code == 429
        clock.now += 58  # the first failure is a minute old
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 200
        assert (await client.get(RUNS, headers=auth("guess"))).status_code == 401
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 429


@pytest.mark.anyio
async def test_a_token_refused_for_its_role_is_no_failure(tmp_path: Path) -> None:
    app = _app(tmp_path, 2, Clock())
    async with _client(app) as client:
        for _ in range(5):
            assert (await client.get("/v1/review?limit=1", headers=auth("sub"))).status_code == 403
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 200


@pytest.mark.anyio
async def test_the_chat_door_refuses_as_openai_and_asks_sdks_not_to_retry(tmp_path: Path) -> None:
    app = _app(tmp_path, 1, Clock())
    async with _client(app) as client:
        assert (await client.get("/v1/models", headers=auth("guess"))).status_code == 401
        refused = await client.get("/v1/models", headers=auth("sub"))
        assert refused.status_code == 429
        assert refused.json()["error"] == {
            "message": "too many unknown tokens from this address: try again in 60 s "
            "(the token was not checked)",
            "type": "rate_limit_error",
            "param": "Authorization",
            "code": "too_many_unknown_tokens",
        }
        assert refused.headers["Retry-After"] == "60"
        assert refused.headers["x-should-retry"] == "false"


# -- the login form -----------------------------------------------------------------------


async def _log_in(client: httpx.AsyncClient, token: str) -> httpx.Response:
    form = await client.get("/review/login")
    return await client.post("/review/login", data={"token": token, "csrf": csrf_of(form.text)})


@pytest.mark.anyio
async def test_the_login_form_counts_unknown_tokens_as_bearer_requests_do(tmp_path: Path) -> None:
    clock = Clock()
    app = _app(tmp_path, 2, clock)
    async with _client(app) as client:
        assert (await _log_in(client, "tok-guess")).status_code == 401
        assert (await _log_in(client, "")).status_code == 401  # no token: not counted
        assert (await client.get(RUNS, headers=auth("guess"))).status_code == 401
        refused = await _log_in(client, "tok-rev")
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "60"
        assert "too many unknown tokens from this address" in refused.text
        assert "session" not in refused.cookies
        clock.now += 60
        assert (await _log_in(client, "tok-rev")).status_code == 303


def test_the_command_line_takes_the_limit() -> None:
    from typer.testing import CliRunner

    from dissensus.cli.app import app

    result = CliRunner().invoke(app, ["serve", "--login-failures", "-1"])
    assert result.exit_code == 2 and "--login-failures" in result.output


def test_the_peer_is_the_protocol_s_and_a_name_is_cut() -> None:
    from dissensus.serve.throttle import PEER_KEY, peer_of

    # the protocol's record wins over a client rewritten from X-Forwarded-For
    assert peer_of({PEER_KEY: "127.0.0.1", "client": ("10.9.9.9", 1)}) == "127.0.0.1"
    assert peer_of({"client": ("10.0.0.1", 1)}) == "10.0.0.1"
    assert peer_of({}) is None and peer_of({PEER_KEY: None}) is None
    assert len(address_key("x" * 60_000)) == 64
