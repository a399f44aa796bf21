"""A running server uses its tokens file as it is now: a deleted line revokes its token
(and ends the review-page sessions opened with it), an added line grants one, and a
version of the file that does not load refuses every token, without a restart."""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.serve import auth as auth_module
from dissensus.serve.auth import (
    TOKENS_UNAVAILABLE,
    SessionStore,
    TokenFile,
    hash_token,
)
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import (
    TOKENS,
    auth,
    client_for,
    csrf_of,
    decide_automatic,
    escalating,
    heap_frozen,
    journal_events,
    login,
    settings,
)

RUNS = "/v1/runs?limit=1"
READS = {"submit": RUNS, "review": "/v1/review?limit=1", "admin": RUNS}
"""A read each role may make."""


async def _read(client: httpx.AsyncClient, token: str) -> httpx.Response:
    """A read of ``tok-<token>``'s role (``TOKENS``), with that token."""
    return await client.get(READS[TOKENS[token]], headers=auth(token))


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    """The per-test garbage collection walks only this module's objects (see serve_helpers)."""
    yield from heap_frozen()


def _lines(tokens: dict[str, str]) -> str:
    """A tokens file of ``tok-<t>`` tokens (name ``<t>-name``, ``role``)."""
    rows = [f"{hash_token('tok-' + t)} {t}-name {role}" for t, role in tokens.items()]
    return "# test tokens\n" + "".join(row + "\n" for row in rows)


def _write(path: Path, tokens: dict[str, str]) -> None:
    path.write_text(_lines(tokens), encoding="utf-8")


def _without(*names: str) -> dict[str, str]:
    return {t: role for t, role in TOKENS.items() if t not in names}


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "dissensus.serve"]


def _no_secret(text: str) -> None:
    """Nothing of a token or its hash in ``text``."""
    for t in TOKENS:
        assert f"tok-{t}" not in text and hash_token(f"tok-{t}") not in text


# -- the API ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_deleted_line_revokes_its_token_and_an_added_line_grants_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "dissensus.serve")
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 200
        _write(path, _without("sub"))  # grep -v " sub-name " tokens.bak > tokens.txt
        gone = await client.get(RUNS, headers=auth("sub"))
        assert gone.status_code == 401 and gone.json()["error"] == "unknown token"
        assert (await client.get(RUNS, headers=auth("adm"))).status_code == 200
        assert (await client.get(RUNS, headers=auth("new"))).status_code == 401
        _write(path, {**_without("sub"), "new": "submit"})
        assert (await client.get(RUNS, headers=auth("new"))).status_code == 200
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 401
    logged = _logged(caplog)
    assert logged == [
        f"tokens file {path} reloaded: 3 token(s), 0 added, 1 removed",
        f"tokens file {path} reloaded: 4 token(s), 1 added, 0 removed",
    ]
    _no_secret("\n".join(logged))


def _half_written(path: Path) -> None:
    text = _lines(TOKENS)
    path.write_text(text[: text.index("\n", 20) + 30], encoding="utf-8")  # cut in a hash


def _typo(path: Path) -> None:
    path.write_text(_lines(TOKENS).replace(" review\n", " reveiw\n", 1), encoding="utf-8")


def _truncated(path: Path) -> None:
    path.write_text("", encoding="utf-8")  # "> tokens.txt" before the first line is written


def _missing(path: Path) -> None:
    path.unlink()


def _everyone_writes(path: Path) -> None:
    path.chmod(path.stat().st_mode | stat.S_IWOTH)


BREAKS = [_half_written, _typo, _truncated, _missing]
if os.name == "posix":
    BREAKS.append(_everyone_writes)


@pytest.mark.anyio
@pytest.mark.parametrize("breaks", BREAKS, ids=lambda f: f.__name__.strip("_"))
async def test_a_file_that_does_not_load_refuses_every_token_until_it_loads_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, breaks: Callable[[Path], None]
) -> None:
    caplog.set_level(logging.WARNING, "dissensus.serve")
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await client.get(RUNS, headers=auth("adm"))).status_code == 200
        breaks(path)
        for _ in range(3):
            for t in TOKENS:
                refused = await _read(client, t)
                assert refused.status_code == 503, refused.text
                assert refused.headers["retry-after"] == "1"
                assert refused.json() == {"error": TOKENS_UNAVAILABLE, "field": "Authorization"}
                assert str(tmp_path) not in refused.text and "tokens.txt" not in refused.text
                _no_secret(refused.text)
        assert (await client.get(RUNS)).status_code == 401  # no token: as ever
        assert (await client.get("/healthz")).status_code == 200  # the server stays up
        failing = _logged(caplog)
        assert len(failing) == 1, failing  # once per version of the file, not per request
        assert str(path) in failing[0] and "every token is refused" in failing[0]
        path.unlink(missing_ok=True)
        _write(path, TOKENS)  # restored
        for t in TOKENS:
            assert (await _read(client, t)).status_code == 200
    logged = _logged(caplog)
    assert logged[1:] == [f"tokens file {path} loads again: 4 token(s)"]
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    _no_secret("\n".join(logged))


@pytest.mark.anyio
async def test_the_chat_door_says_the_tokens_are_unavailable_as_openai_does(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path, tokens_check_s=0)
    async with client_for(s) as client:
        assert (await client.get("/v1/models", headers=auth("sub"))).status_code == 200
        _truncated(Path(str(s.tokens)))
        refused = await client.get("/v1/models", headers=auth("sub"))
        assert refused.status_code == 503
        assert refused.json()["error"] == {
            "message": TOKENS_UNAVAILABLE,
            "type": "server_error",
            "param": "Authorization",
            "code": "tokens_unavailable",
        }
        # An SDK is asked to retry: the file is usually whole again within a second.
        assert refused.headers["x-should-retry"] == "true"
        assert refused.headers["Retry-After"] == "1"


@pytest.mark.anyio
async def test_a_broken_edit_neither_undoes_a_revocation_nor_grants_a_token(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        _write(path, _without("sub"))
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 401
        # sub's line back and a new token, in a file with a bad line: neither is let in
        broken = _lines({**TOKENS, "new": "submit"}) + "not a line\n"
        path.write_text(broken, encoding="utf-8")
        for t in [*TOKENS, "new"]:
            assert (await client.get(READS["admin"], headers=auth(t))).status_code == 503
        _write(path, _without("sub"))  # fixed as meant
        assert (await client.get(RUNS, headers=auth("sub"))).status_code == 401
        assert (await client.get(RUNS, headers=auth("new"))).status_code == 401
        assert (await client.get(RUNS, headers=auth("adm"))).status_code == 200


@pytest.mark.anyio
async def test_a_file_not_loading_at_start_is_still_a_configuration_error(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    Path(str(s.tokens)).write_text("# nothing\nplain kim review\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tokens\.txt:2: field 'token_sha256'"):
        client_for(s)


# -- review-page sessions -----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_session_ends_with_its_token(tmp_path: Path) -> None:
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await login(client, "rev")).status_code == 303
        page = await client.get("/review")
        assert page.status_code == 200
        csrf = csrf_of(page.text)
        _write(path, _without("rev"))
        sent_away = await client.get("/review")
        assert sent_away.status_code == 303
        assert sent_away.headers["location"].startswith("/review/login")
        claimed = await client.post("/review/case/r.1/claim", data={"csrf": csrf})
        assert claimed.status_code == 401 and "session has ended" in claimed.text
        # the line put back grants the token again, not the session the removal ended
        _write(path, TOKENS)
        assert (await client.get("/review")).status_code == 303
        assert (await login(client, "rev")).status_code == 303
        assert (await client.get("/review")).status_code == 200


@pytest.mark.anyio
async def test_sessions_are_refused_while_the_file_does_not_load_and_go_on_after(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await login(client, "rev")).status_code == 303
        session = client.cookies["dissensus_session"]
        _truncated(path)
        assert (await client.get("/review")).status_code == 303
        form = await client.get("/review/login")
        refused = await client.post(
            "/review/login", data={"token": "tok-rev", "csrf": csrf_of(form.text)}
        )
        assert refused.status_code == 503 and "tokens file does not load" in refused.text
        assert "dissensus_session" not in refused.cookies
        _write(path, TOKENS)
        client.cookies.set("dissensus_session", session, path="/review")
        assert (await client.get("/review")).status_code == 200


@pytest.mark.anyio
async def test_a_session_takes_its_lines_new_role(tmp_path: Path) -> None:
    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await login(client, "rev")).status_code == 303
        _write(path, {**TOKENS, "rev": "submit"})
        assert (await client.get("/review")).status_code == 303
        assert (await client.get(RUNS, headers=auth("rev"))).status_code == 200


OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]


def _agreeing(pid: str) -> dict[str, object]:
    """A panel that commits automatically (audited when the policy's rate says so)."""
    meta = {"question": "Which policy is stated?", "options": OPTIONS}
    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"], meta=meta)


async def _case_form(client: httpx.AsyncClient, review_id: str) -> tuple[str, str]:
    """The CSRF token and the content hash of a case page's form."""
    page = await client.get(f"/review/case/{review_id}")
    sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page.text)
    assert sha is not None, page.text[:500]
    return csrf_of(page.text), sha.group(1)


async def _refused_once_demoted(
    client: httpx.AsyncClient, path: Path, journal: str, posts: list[tuple[str, dict[str, str]]]
) -> None:
    """Each of ``posts`` (the session's CSRF token in its fields) refused with 403 once
    ``rev``'s line has role ``submit``, nothing journalled."""
    _write(path, {**TOKENS, "rev": "submit"})
    before = journal_events(journal)
    for url, data in posts:
        refused = await client.post(url, data=data)
        assert refused.status_code == 403, (url, refused.status_code)
        assert "this needs the review role" in refused.text, url
    assert journal_events(journal) == before


def _held_by_rev(journal: str, *refs: str) -> None:
    """The claims ``rev`` took as a reviewer still stand, given up by nothing it posted."""
    with Journal(journal) as j:
        for ref in refs:
            held = j.current_claim(ref)
            assert held is not None and held.who == "rev-name", ref


@pytest.mark.anyio
async def test_a_session_whose_line_loses_the_review_role_saves_nothing_from_the_case_pages(
    tmp_path: Path,
) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy), tokens_check_s=0)
    async with client_for(s) as client:
        run = await client.post(
            "/v1/decide", json=[escalating("a"), escalating("b")], headers=auth("sub")
        )
        rid, done = (r["review_id"] for r in run.json()["records"])
        (audited,) = await decide_automatic(client, [_agreeing("c")])
        assert (await login(client, "rev")).status_code == 303
        csrf, sha = await _case_form(client, rid)
        _, done_sha = await _case_form(client, done)
        resolve = {"decision": "1", "note": "n", "content_sha256": done_sha, "csrf": csrf}
        resolved = await client.post(f"/review/case/{done}/resolve", data=resolve)
        assert resolved.status_code == 303  # as a reviewer: undone below once demoted
        for held in (f"/review/case/{rid}/claim", f"/review/audit/{audited}/claim"):
            assert (await client.post(held, data={"csrf": csrf})).status_code == 303
        answer = {"decision": "1", "note": "n", "csrf": csrf}
        posts = [
            (
                f"/review/case/{rid}/resolve",
                {"decision": "1", "note": "n", "content_sha256": sha, "csrf": csrf},
            ),
            (f"/review/case/{rid}/claim", {"csrf": csrf}),
            (f"/review/case/{rid}/release", {"csrf": csrf}),
            ("/review/undo", {"review_id": done, "csrf": csrf}),
            (f"/review/audit/{audited}/answer", answer),
            (f"/review/audit/{audited}/claim", {"csrf": csrf}),
            (f"/review/audit/{audited}/release", {"csrf": csrf}),
            (f"/review/auto/{audited}/confirm", answer),
        ]
        await _refused_once_demoted(client, Path(str(s.tokens)), s.journal, posts)
    _held_by_rev(s.journal, rid, audited)


@pytest.mark.anyio
async def test_a_session_whose_line_loses_the_review_role_confirms_no_automatic_decision(
    tmp_path: Path,
) -> None:
    policy = write_policy(tmp_path / "quiet.yaml", {"acceptance": {"audit_rate": 0.0}})
    s = settings(tmp_path, policy=str(policy), tokens_check_s=0)
    async with client_for(s) as client:
        (ref,) = await decide_automatic(client, [_agreeing("a")])
        assert (await login(client, "rev")).status_code == 303
        csrf = csrf_of((await client.get(f"/review/auto/{ref}")).text)
        held = await client.post(f"/review/auto/{ref}/claim", data={"csrf": csrf})
        assert held.status_code == 303
        posts = [
            (f"/review/auto/{ref}/confirm", {"decision": "2", "note": "n", "csrf": csrf}),
            (f"/review/auto/{ref}/claim", {"csrf": csrf}),
            (f"/review/auto/{ref}/release", {"csrf": csrf}),
        ]
        await _refused_once_demoted(client, Path(str(s.tokens)), s.journal, posts)
    _held_by_rev(s.journal, ref)


# -- the interval and the stamp -----------------------------------------------------------


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths :func:`~dissensus.serve.auth._stamp` is asked for, in order."""
    seen: list[str] = []
    real = auth_module._stamp

    def counting(path: str) -> object:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(auth_module, "_stamp", counting)
    return seen


def test_the_file_is_looked_at_at_most_once_per_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "tokens.txt"
    _write(path, TOKENS)
    now = [100.0]
    tokens = TokenFile(path, check_s=1.0, clock=lambda: now[0])
    stamps = _counted(monkeypatch)
    _write(path, _without("sub"))
    now[0] += 0.5
    assert all(tokens.authenticate("tok-sub") is not None for _ in range(100))
    assert stamps == []  # within the interval: not even a stat
    now[0] += 0.5
    assert tokens.authenticate("tok-sub") is None
    assert [tokens.authenticate("tok-adm") is not None for _ in range(100)] == [True] * 100
    assert len(stamps) == 1


def test_an_unchanged_stamp_is_trusted_only_once_the_file_is_old_enough(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rewrite keeping size, inode and timestamps (within the file system's timestamp
    granularity) is still seen while the file is recent; an old file is not read again."""
    path = tmp_path / "tokens.txt"
    _write(path, TOKENS)
    real = auth_module._stamp(str(path))
    assert real is not None
    monkeypatch.setattr(auth_module, "_stamp", lambda _: real)
    tokens = TokenFile(path, check_s=0)
    _write(path, {**_without("sub"), "sux": "submit"})  # same size
    assert auth_module._stamp(str(path)) == real
    assert tokens.authenticate("tok-sub") is None and tokens.authenticate("tok-sux") is not None
    old = auth_module._Stamp(**{**vars(real), "mtime_ns": 0, "ctime_ns": 0})
    monkeypatch.setattr(auth_module, "_stamp", lambda _: old)
    tokens = TokenFile(path, check_s=0)
    reads = []
    monkeypatch.setattr(auth_module, "load_tokens", lambda p: reads.append(p))
    assert tokens.authenticate("tok-sux") is not None and reads == []


# -- the guarantee ------------------------------------------------------------------------

POOL = {"a": "review", "b": "submit", "c": "admin", "d": "review"}
Version = frozenset[str] | None  # the tokens of a version of the file, or a broken one

versions = st.lists(
    st.tuples(
        st.one_of(st.none(), st.frozensets(st.sampled_from(sorted(POOL)), min_size=1)),
        st.frozensets(st.sampled_from(sorted(POOL))),  # tokens logging in after it
        st.booleans(),  # whether the sessions make a request then
    ),
    max_size=8,
)


@given(versions)
def test_tokens_and_sessions_follow_every_version_of_the_file(
    steps: list[tuple[Version, frozenset[str], bool]],
) -> None:
    """Whatever versions follow each other: a token is accepted iff the file as it is
    now loads and holds its line; a session lives iff its token's line is in the file
    now and was in every version that loaded since it opened, whether or not the
    session made a request while its line was gone."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokens.txt"
        _write(path, POOL)
        tokens = TokenFile(path, check_s=0)
        sessions = SessionStore(3600.0, tokens=tokens)
        alive: dict[str, str] = {}  # session id -> token it was opened with
        for version, logins, look in steps:
            if version is None:
                path.write_text(_lines(POOL) + "broken\n", encoding="utf-8")
            else:
                _write(path, {t: POOL[t] for t in sorted(version)})
                alive = {sid: t for sid, t in alive.items() if t in version}
            for t in POOL:
                principal = tokens.authenticate(f"tok-{t}")
                accepted = version is not None and t in version
                assert (principal is not None) == accepted, (version, t)
                if accepted and t in logins:
                    assert principal is not None
                    alive[sessions.open(principal)] = t
            for sid in list(sessions._sessions) if look else []:
                got = sessions.get(sid)
                if version is None or sid not in alive:
                    assert got is None, (version, sid in alive)
                else:
                    assert got is not None and got.name == f"{alive[sid]}-name"


@pytest.mark.anyio
async def test_a_pipe_in_place_of_the_tokens_file_is_a_file_that_does_not_load(
    tmp_path: Path,
) -> None:
    """A FIFO put where the tokens file was hung the whole server: opening it for
    reading waits for a writer, on the event loop, and stayed blocked after the file
    was put back. It is now refused as a file that does not load, and never opened to
    wait on."""
    import asyncio

    s = settings(tmp_path, tokens_check_s=0)
    path = Path(str(s.tokens))
    async with client_for(s) as client:
        assert (await _read(client, "sub")).status_code == 200
        path.unlink()
        os.mkfifo(path, 0o600)
        refused = await asyncio.wait_for(_read(client, "sub"), 10)
        assert refused.status_code == 503
        path.unlink()
        _write(path, TOKENS)
        assert (await asyncio.wait_for(_read(client, "sub"), 10)).status_code == 200


def test_a_tokens_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tokens.txt"
    path.write_bytes(b"\xff\xfe not text\n")
    path.chmod(0o600)
    with pytest.raises(ConfigError, match="not UTF-8"):
        auth_module.load_tokens(path)


def test_a_tokens_file_saved_with_a_byte_order_mark_loads(tmp_path: Path) -> None:
    """An editor that saves UTF-8 with a byte order mark (Notepad) made the first line
    unreadable: the server refused to start, calling its first hash (or its ``#``
    comment) "not a sha256". The mark is dropped, as a request body's is."""
    path = tmp_path / "tokens.txt"
    line = auth_module.token_line("kim", "review")[1]
    path.write_bytes(("\ufeff# reviewers\n" + line + "\n").encode())
    path.chmod(0o600)
    store = auth_module.load_tokens(path)
    assert len(store) == 1
    path.write_bytes(("\ufeff" + line + "\n").encode())
    assert len(auth_module.load_tokens(path)) == 1
