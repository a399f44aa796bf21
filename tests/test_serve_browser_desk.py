"""The review page in a real browser, at the desk: drafts kept per reviewer, type-ahead
that never sends the next case's form unseen, another answer replacing a pick, and
``j`` / ``k`` from a page opened earlier.

The server and browser are ``test_serve_browser.py``'s fixture (one per module); as
there, nothing waits a fixed time: every step waits for the page to reach a state.
"""

from __future__ import annotations

from typing import Any

import pytest

from serve_helpers import escalating
from test_serve_browser import Desk, _on_case
from test_serve_browser import desk as desk  # the module's server and browser

pytestmark = pytest.mark.slow


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
