"""The review page in a real browser when things go wrong: a busy journal, a server that is
gone or restarted, refused forms, claims held by others and given up.

Each test runs a server of its own (it stops, restarts or locks it); the browser is the
module's. Like ``test_serve_browser.py`` (whose helpers this reuses), nothing waits a
fixed time: every step waits for the page to reach a state.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

import test_serve_load
from serve_helpers import escalating
from test_serve_browser import CHROMIUM_ARGS, SETTLED, SUB, WAIT_MS, _chromium
from test_serve_load import PLAIN, spawn_server, stop_server, wait_ready

pytestmark = pytest.mark.slow


@dataclass
class Server:
    tmp: Path
    proc: Any
    base: str
    extra_args: tuple[str, ...]

    @property
    def journal(self) -> Path:
        return self.tmp / "journal.sqlite"

    def submit(self, n: int) -> tuple[str, list[str]]:
        panels = [escalating(f"f{i}") for i in range(n)]
        run = httpx.post(
            self.base + "/v1/decide", json=panels, headers=SUB, timeout=120, **PLAIN
        ).json()
        return run["run_id"], [r["review_id"] for r in run["records"]]

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {token}"}, timeout=60, **PLAIN
        )

    def restart(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Start the server again on the same port (its sessions are gone)."""
        port = int(self.base.rsplit(":", 1)[1])
        monkeypatch.setattr(test_serve_load, "_free_port", lambda: port)
        self.proc, base = spawn_server(
            self.tmp, str(self.journal), extra_env=BUSY, extra_args=self.extra_args
        )
        assert base == self.base
        wait_ready(self.tmp, self.proc, self.base)


BUSY = {"DISSENSUS_JOURNAL_BUSY_TIMEOUT": "1"}
"""A write waits at most a second for the journal's lock (then 503)."""


@pytest.fixture(scope="module")
def browser() -> Iterator[tuple[Any, Any]]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e .[dev])"
    )
    executable = _chromium()
    pw = sync_api.sync_playwright().start()
    try:
        chromium = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium, sync_api
        finally:
            chromium.close()
    finally:
        pw.stop()


def _server(tmp: Path, *extra_args: str) -> Server:
    proc, base = spawn_server(
        tmp,
        str(tmp / "journal.sqlite"),
        extra_env=BUSY,
        extra_args=extra_args,
        policy={"acceptance": {"audit_rate": 0.0}},
    )
    wait_ready(tmp, proc, base)
    return Server(tmp, proc, base, extra_args)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = _server(tmp_path)
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            stop_server(srv.proc)


@pytest.fixture
def strict_server(tmp_path: Path) -> Iterator[Server]:
    srv = _server(tmp_path, "--max-field-chars", "100")
    try:
        yield srv
    finally:
        stop_server(srv.proc)


def _page(browser: Any, base: str, token: str = "tok-r0") -> Any:
    chromium, _ = browser
    page = chromium.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.set_default_timeout(WAIT_MS)
    page.goto(base + "/review/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(base + "/review")
    return page


def _settled(page: Any, expect: Any, review_id: str) -> None:
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", review_id)
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    page.wait_for_function(SETTLED)


def test_busy_gone_and_restarted_servers_are_shown_and_nothing_typed_is_lost(
    browser: tuple[Any, Any], server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    expect = browser[1].expect
    run, (rid,) = server.submit(1)
    where = f"{server.base}/review/case/{rid}?run={run}"
    page = _page(browser, server.base)
    # The route that answers 500 is laid before the case is loaded, and switched on later:
    # laid on a page already loaded, it takes hold only some moments after page.route
    # returns, and an Enter pressed at once could reach the server instead.
    answer_500 = False

    def resolve(route: Any) -> None:
        if answer_500:
            route.fulfill(
                status=500, content_type="application/json", body='{"error": "internal error"}'
            )
        else:
            route.continue_()

    page.route("**/resolve*", resolve)
    page.goto(where)
    _settled(page, expect, rid)
    radio = page.locator("input[name=decision][data-key='2']")

    # The journal's write lock is held elsewhere: 503, and the server's reason is shown.
    lock = sqlite3.connect(server.journal, isolation_level=None)
    try:
        lock.execute("BEGIN IMMEDIATE")
        page.keyboard.press("2")
        page.keyboard.press("n")
        page.keyboard.type("a note that took ten minutes")
        page.keyboard.press("Enter")
        expect(page.locator("#case-error")).to_contain_text("the journal is busy")
        _settled(page, expect, rid)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    expect(radio).to_be_checked()
    expect(page.locator("#note")).to_have_value("a note that took ten minutes")
    assert page.url == where
    page.screenshot(path=str(tmp_path / "busy.png"))

    # An error answer that is no page (JSON) is said in an alert; nothing is swapped.
    answer_500 = True
    page.keyboard.press("Enter")
    expect(page.locator("#page-alert")).to_have_text(
        "not saved: the server answered 500 (internal error); try again"
    )
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    expect(page.locator("#note")).to_have_value("a note that took ten minutes")
    answer_500 = False

    # The server is gone: the page says so and keeps the form as it was.
    stop_server(server.proc)
    page.keyboard.press("Enter")
    expect(page.locator("#page-alert")).to_have_text(
        "not saved: the server could not be reached; try again"
    )
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    expect(radio).to_be_checked()
    expect(page.locator("#note")).to_have_value("a note that took ten minutes")
    page.screenshot(path=str(tmp_path / "gone.png"))

    # Back, restarted: the session is gone (401), the address stays the case page's.
    server.restart(monkeypatch)
    page.keyboard.press("Enter")
    expect(page.locator("#message-link")).to_be_visible()
    expect(page.locator("main")).to_contain_text("session has ended")
    assert page.url == where
    # Reloading goes through the login and back to the case, the work restored.
    page.reload()
    page.wait_for_url(f"{server.base}/review/login?next=**")
    page.fill("#token", "tok-r0")
    page.click("button[type=submit]")
    page.wait_for_url(where)
    _settled(page, expect, rid)
    expect(radio).to_be_checked()
    expect(page.locator("#note")).to_have_value("a note that took ten minutes")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{server.base}/review?run={run}")
    kept = "() => Object.keys(sessionStorage).filter((k) => k.startsWith('dissensus-draft:'))"
    assert page.evaluate(kept) == []  # resolved: nothing kept any more
    page.context.close()
    with server.api("tok-r1") as api:
        done = api.get(f"/v1/review/{rid}").json()["resolution"]
    assert done["decision"] == "2" and done["note"] == "a note that took ten minutes"


def test_refused_forms_keep_the_work_and_claims_are_given_up(
    browser: tuple[Any, Any], strict_server: Server, tmp_path: Path
) -> None:
    expect = browser[1].expect
    server = strict_server
    run, (rid, _) = server.submit(2)
    where = f"{server.base}/review/case/{rid}?run={run}"
    page = _page(browser, server.base)
    page.goto(where)
    _settled(page, expect, rid)
    other, note = page.locator("#other-decision"), page.locator("#note")
    one = page.locator("input[name=decision][data-key='1']")

    # An answer of one's own without the note it needs: refused, the answer kept.
    page.keyboard.press("o")
    page.keyboard.type("a carefully typed answer")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    expect(page.locator("#case-error")).to_contain_text("write a note")
    _settled(page, expect, rid)
    expect(other).to_have_value("a carefully typed answer")
    assert page.url == where

    # A note over --max-field-chars: refused, the note and the pick kept.
    other.fill("")
    page.keyboard.press("Escape")
    page.keyboard.press("1")
    page.evaluate("() => { document.getElementById('note').value = 'x'.repeat(150); }")
    page.keyboard.press("Enter")
    expect(page.locator("#case-error")).to_contain_text("at most 100 per field")
    _settled(page, expect, rid)
    expect(note).to_have_value("x" * 150)
    expect(one).to_be_checked()

    # A stale CSRF token: refused at the case page's address, so reloading works and the
    # work comes back from the browser.
    note.fill("short and kept")
    page.keyboard.press("Escape")
    page.evaluate(
        "() => { document.querySelector('#resolve-form input[name=csrf]').value = 'stale'; }"
    )
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_contain_text("CSRF")
    assert page.url == where
    page.reload()
    _settled(page, expect, rid)
    expect(note).to_have_value("short and kept")
    expect(one).to_be_checked()

    # Another reviewer holds the case: the resolve is refused naming them, the time in
    # the reader's local time, the form kept.
    with server.api("tok-r1") as api:
        until = api.post(f"/v1/review/{rid}/claim").json()["expires"]
    page.keyboard.press("Enter")
    expect(page.locator("#case-error")).to_contain_text("claimed by reviewer1 until")
    _settled(page, expect, rid)
    shown = page.locator("#case-error time")
    expect(shown).to_have_attribute("datetime", until)
    expect(shown).not_to_have_text(until)
    expect(note).to_have_value("short and kept")
    expect(one).to_be_checked()
    page.screenshot(path=str(tmp_path / "claimed.png"))

    # Once given up (the API), the case is ours to claim; r gives it up from the page.
    with server.api("tok-r1") as api:
        assert api.delete(f"/v1/review/{rid}/claim").json()["released"] is True
    page.keyboard.press("c")
    expect(page.locator("#case-status")).to_contain_text("claimed by reviewer0")
    _settled(page, expect, rid)
    expect(page.locator("#release-form")).to_contain_text("give up claim")
    page.keyboard.press("r")
    expect(page.locator("#case-status")).to_contain_text("open")
    _settled(page, expect, rid)
    expect(page.locator("#release-form")).to_have_count(0)

    # A stale "give up" of a claim another reviewer holds now: 409 naming them.
    page.keyboard.press("c")
    expect(page.locator("#release-form")).to_be_visible()
    _settled(page, expect, rid)
    with server.api("tok-r0") as mine, server.api("tok-r1") as theirs:
        assert mine.delete(f"/v1/review/{rid}/claim").json()["released"] is True
        assert theirs.post(f"/v1/review/{rid}/claim").status_code == 200
    page.keyboard.press("r")
    expect(page.locator("#case-error")).to_contain_text("claimed by reviewer1")
    page.context.close()
    with server.api("tok-r1") as api:
        assert api.get(f"/v1/review/{rid}").json()["claim"]["reviewer"] == "reviewer1"
