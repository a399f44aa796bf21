"""The review page in a real browser, at the desk: drafts kept per reviewer, type-ahead
that never sends the next case's form unseen, another answer replacing a pick, and
``j`` / ``k`` from a page opened earlier.

The server and browser are ``test_serve_browser.py``'s fixture (one per module); as
there, nothing waits a fixed time: every step waits for the page to reach a state.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from serve_helpers import escalating
from test_serve_browser import WAIT_MS, Desk, _on_case
from test_serve_browser import desk as desk  # the module's server and browser

pytestmark = pytest.mark.slow
RESOLVES = "**/review/case/*/resolve*"


class _Hold:
    """The requests to ``pattern`` sent in a ``with`` block wait for its end: keys pressed
    in it are typed ahead, whatever the server's speed. The block fails unless one was sent
    and held.

    Make it before the page is loaded: its route then stays laid, passing requests on
    outside a block. A route laid on a page already loaded takes hold only some moments
    after ``page.route`` returns (Chromium answers ``Fetch.enable`` before the page's
    loaders are swapped), so a key pressed right after it could send its request unrouted
    and unseen, and nothing was held."""

    def __init__(self, page: Any, pattern: str) -> None:
        self.pattern = pattern
        self.holding = False
        self.held: list[Any] = []
        self.page = page
        page.route(pattern, self._route)

    def _route(self, route: Any) -> None:
        if self.holding:
            self.held.append(route)
        else:
            route.continue_()

    @contextmanager
    def __call__(self) -> Iterator[None]:
        self.holding = True
        try:
            yield
            deadline = time.monotonic() + WAIT_MS / 1000
            while not self.held and time.monotonic() < deadline:
                self.page.wait_for_timeout(10)  # lets Playwright take the request (a bound)
            assert self.held, f"no request to {self.pattern}"
        finally:
            self.holding = False
            held, self.held = self.held, []
            for route in held:
                route.continue_()


def _log_in(desk: Desk, page: Any, token: str) -> None:
    """Log in as ``token`` in ``page`` (the same tab), from the login page."""
    page.goto(desk.base + "/review/login")
    page.fill("#token", token)
    page.click("button[type=submit]")
    page.wait_for_url(desk.base + "/review")


def test_a_draft_is_its_reviewers_and_logging_out_drops_it(desk: Desk) -> None:
    """alice's pick and note on a case never fill bob's form in the same tab (an Enter
    of bob's journalled alice's note under bob's name); alice finds hers again after a
    new login, and logging out drops the tab's drafts."""
    expect = desk.sync_api.expect
    run, (a,) = desk.submit([escalating("dr-0")])
    page = desk.page("tok-r0")
    where = f"{desk.base}/review/case/{a}?run={run}"
    page.goto(where)
    _on_case(desk, page, a)
    page.keyboard.press("2")
    page.keyboard.press("n")
    page.keyboard.type("reviewer0: mine")
    page.keyboard.press("Escape")

    # reviewer1 signs in in the same tab (reviewer0's session left as it was).
    _log_in(desk, page, "tok-r1")
    page.goto(where)
    _on_case(desk, page, a)
    expect(page.locator("#note")).to_have_value("")
    expect(page.locator("input[name=decision]:checked")).to_have_count(0)
    page.keyboard.press("Enter")
    expect(page.locator("#case-error")).to_contain_text("pick an option")
    expect(page.locator("#reviewer")).to_have_attribute("data-reviewer", "reviewer1")

    # reviewer0 again: the draft is back; logging out drops it.
    _log_in(desk, page, "tok-r0")
    page.goto(where)
    _on_case(desk, page, a)
    expect(page.locator("#note")).to_have_value("reviewer0: mine")
    expect(page.locator("input[name=decision][data-key='2']")).to_be_checked()
    page.click("#logout-form button[type=submit]")
    page.wait_for_url(desk.base + "/review/login")
    drafts = "() => Object.keys(sessionStorage).filter(k => k.startsWith('dissensus-draft:'))"
    assert page.evaluate(drafts) == []
    _log_in(desk, page, "tok-r0")
    page.goto(where)
    _on_case(desk, page, a)
    expect(page.locator("#note")).to_have_value("")
    expect(page.locator("input[name=decision]:checked")).to_have_count(0)
    page.context.close()
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["status"] == "open"


def test_an_enter_typed_ahead_never_sends_the_next_cases_form(desk: Desk) -> None:
    """1 on b (a draft), k, then 1, Enter, Enter on a: a is resolved and b, where the
    page goes next, is shown with its draft, not resolved by the second Enter; without a
    draft the second Enter is no "pick an option" refusal of the next case either. j
    typed ahead still moves on."""
    expect = desk.sync_api.expect
    run, (a, b, c, d) = desk.submit([escalating(f"te-{i}") for i in range(4)])
    page = desk.page()
    held = _Hold(page, RESOLVES)
    page.goto(f"{desk.base}/review/case/{b}?run={run}")
    _on_case(desk, page, b)
    page.keyboard.press("1")
    page.keyboard.press("k")
    _on_case(desk, page, a)
    page.keyboard.press("1")
    with held():
        page.keyboard.press("Enter")
        page.keyboard.press("Enter")
    _on_case(desk, page, b)
    expect(page.locator("input[name=decision][data-key='1']")).to_be_checked()
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["status"] == "resolved"
        assert api.get(f"/v1/review/{b}").json()["status"] == "open"

    # b (picked 1): Enter, then c, r, u and Enter typed ahead: none acts on c.
    with held():
        for key in ("Enter", "c", "r", "u", "u", "Enter"):
            page.keyboard.press(key)
    _on_case(desk, page, c)
    expect(page.locator("#case-error")).to_have_count(0)
    expect(page.locator("#case-status")).to_contain_text("open")
    # Enter then j: resolved, and the j moves on from the next case.
    page.keyboard.press("2")
    page.keyboard.press("n")
    page.keyboard.type("2 it is")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    with held():
        page.keyboard.press("Enter")
        page.keyboard.press("j")
    _on_case(desk, page, d)
    page.context.close()
    with desk.api("tok-r1") as api:
        got = {rid: api.get(f"/v1/review/{rid}").json() for rid in (a, b, c, d)}
    assert got[b]["status"] == "resolved" and got[b]["resolution"]["decision"] == "1"
    assert got[c]["status"] == "resolved" and got[c]["resolution"]["note"] == "2 it is"
    assert got[d]["status"] == "open" and got[d].get("claim") is None
    assert [h["type"] for h in got[b]["history"]] == ["review.resolved"]


def test_another_answer_replaces_the_pick_and_0_clears_it(desk: Desk) -> None:
    """1, then o and an answer: the option is unchecked (kept so in the draft over a
    reload), and Enter resolves with the answer, not "pick an option or type another
    answer, not both"; 0 clears a pick, the draft too; the help names 0."""
    expect = desk.sync_api.expect
    run, (a, b) = desk.submit([escalating(f"oa-{i}") for i in range(2)])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    picked = page.locator("input[name=decision]:checked")
    page.keyboard.press("1")
    expect(picked).to_have_count(1)
    page.keyboard.press("o")
    page.keyboard.type("neither: refund half")
    expect(picked).to_have_count(0)
    page.keyboard.press("Escape")
    page.reload()
    _on_case(desk, page, a)
    expect(page.locator("#other-decision")).to_have_value("neither: refund half")
    expect(picked).to_have_count(0)
    page.keyboard.press("n")
    page.keyboard.type("both options are wrong")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("Enter")
    _on_case(desk, page, b)

    # 0 clears the pick, in the draft too.
    page.keyboard.press("2")
    expect(page.locator("input[name=decision][data-key='2']")).to_be_checked()
    page.keyboard.press("0")
    expect(picked).to_have_count(0)
    page.reload()
    _on_case(desk, page, b)
    expect(picked).to_have_count(0)
    page.keyboard.press("?")
    expect(page.locator("#keys-help")).to_contain_text("clear the option picked")
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{a}").json()
    assert got["resolution"]["decision"] == "neither: refund half"
    assert got["resolution"]["note"] == "both options are wrong"


def test_a_pick_replaces_another_answer(desk: Desk) -> None:
    """o and an answer, then 1: the answer is cleared (the draft too), and Enter resolves
    with the option, not "pick an option or type another answer, not both"."""
    expect = desk.sync_api.expect
    run, (a, _) = desk.submit([escalating(f"pa-{i}") for i in range(2)])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    page.keyboard.press("o")
    page.keyboard.type("abc")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("1")
    expect(page.locator("input[name=decision][data-key='1']")).to_be_checked()
    expect(page.locator("#other-decision")).to_have_value("")
    page.reload()
    _on_case(desk, page, a)
    expect(page.locator("#other-decision")).to_have_value("")
    expect(page.locator("input[name=decision][data-key='1']")).to_be_checked()
    chosen = page.locator("input[name=decision][data-key='1']").get_attribute("value")
    page.keyboard.press("n")
    page.keyboard.type("the first is right")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("Enter")
    page.wait_for_url(lambda url: f"/review/case/{a}" not in url)
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{a}").json()
    assert got["resolution"]["decision"] == chosen


def test_j_from_a_page_opened_earlier_steps_over_a_case_resolved_meanwhile(desk: Desk) -> None:
    """The next case was resolved by another reviewer after the page was shown: j goes
    to the one after it, the address bar on that case's page, the queue kept."""
    expect = desk.sync_api.expect
    run, (a, b, c) = desk.submit([escalating(f"js-{i}") for i in range(3)])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    with desk.api("tok-r1") as api:
        sha = api.get(f"/v1/review/{b}").json()["content_sha256"]
        done = api.post(
            f"/v1/review/{b}/resolve",
            json={"decision": "1", "note": "mine", "content_sha256": sha},
        )
        assert done.status_code == 200, done.text
    page.keyboard.press("j")
    _on_case(desk, page, c)
    expect(page.locator("#case-status")).to_contain_text("open")
    assert page.url == f"{desk.base}/review/case/{c}?run={run}"
    page.context.close()


def test_the_undo_button_goes_when_its_window_ends(desk: Desk) -> None:
    """A case page left open past the undo window (300 s, the page's clock run forward)
    no longer offers the undo: the button is gone and ``u u`` undoes nothing, where the
    button stayed and its refusal took the reviewer from the case they were on."""
    expect = desk.sync_api.expect
    run, (a, b) = desk.submit([escalating(f"uw-{i}") for i in range(2)])
    page = desk.page()
    page.clock.install()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    page.keyboard.press("1")
    page.keyboard.press("n")
    page.keyboard.type("checked")
    page.keyboard.press("Escape")
    page.keyboard.press("Enter")
    _on_case(desk, page, b)
    undo = page.locator("#undo-form")
    expect(undo).to_contain_text(a)
    page.clock.run_for(60_000)
    expect(undo).to_be_visible()  # within the window it stays
    page.clock.run_for(241_000)
    expect(undo).to_have_count(0)
    expect(page.locator("#undo-confirm")).to_have_count(0)
    page.keyboard.press("u")
    page.keyboard.press("u")
    page.wait_for_function("() => document.activeElement !== null")
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", b)
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["status"] == "resolved"
    page.context.close()


def test_j_on_the_queue_opens_its_first_case_nobody_else_claimed(desk: Desk) -> None:
    """From the queue page, ``j`` opens the first case of the list shown, stepping over
    one another reviewer claimed, with no mouse and no tabbing past the filters."""
    run, (a, b, _) = desk.submit([escalating(f"jq-{i}") for i in range(3)])
    with desk.api("tok-r1") as api:
        assert api.post(f"/v1/review/{a}/claim").status_code == 200
    page = desk.page()
    page.goto(f"{desk.base}/review?run={run}")
    desk.sync_api.expect(page.locator("a.case-link")).to_have_count(3)
    page.keyboard.press("j")
    _on_case(desk, page, b)
    page.context.close()


def test_a_claim_shown_on_a_case_page_ends_there_when_it_expires(desk: Desk) -> None:
    """A case page left open kept saying "claimed by r1 until ..." after the claim had
    ended, until a reload; the page now says the case is open when the claim expires."""
    expect = desk.sync_api.expect
    run, (a,) = desk.submit([escalating("ce-0")])
    with desk.api("tok-r1") as api:
        assert api.post(f"/v1/review/{a}/claim").status_code == 200
    page = desk.page()
    page.clock.install()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    status = page.locator("#case-status")
    expect(status).to_contain_text("claimed")
    page.clock.run_for(600_000)
    expect(status).to_contain_text("claimed")  # within the claim's 900 s it stays
    page.clock.run_for(301_000)
    expect(status).to_contain_text("open")
    expect(status).not_to_contain_text("claimed")
    page.context.close()
