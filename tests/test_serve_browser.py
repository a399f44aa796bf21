"""The review page in a real browser: log in, work a queue with the keyboard, typing ahead.

Playwright drives the distribution's Chromium (``$DISSENSUS_CHROMIUM``, else
``/usr/bin/chromium``); the tests skip, naming the reason, when neither Playwright nor
a Chromium binary is there. One server and one browser serve the whole module; each test
submits its own run and works the queue of that run (``/review?run=...``), so the tests
do not see each other's cases. Nothing waits a fixed time: every step waits for the
page to reach a state (Playwright's ``expect`` polls until its timeout). Screenshots go
to each test's output folder (``tmp_path``). The API documentation page (/docs) is
rendered in the same browser, which must fetch nothing from any other host.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import escalating
from test_serve_load import PLAIN, spawn_server, stop_server, wait_ready
from test_serve_review_page_lookalikes import LOOKALIKES, NOTHING, SUGGESTED, lookalike_panel

pytestmark = pytest.mark.slow

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 30_000
"""How long a step may take to show on a loaded machine (a bound, not a pause)."""
SUB = {"Authorization": "Bearer tok-sub"}
SETTLED = (
    "() => document.activeElement === document.body"
    " || document.activeElement === document.querySelector('main h1')"
)
"""The focus once a page has settled: on the page (a page load), or on its heading (a
page swapped in over htmx), never in a field. Predicates are functions, not expressions:
the page's CSP (no ``unsafe-eval``) refuses an expression as soon as it must be polled."""


def _chromium() -> str:
    path = os.environ.get("DISSENSUS_CHROMIUM") or "/usr/bin/chromium"
    if not Path(path).exists() and shutil.which(path) is None:
        pytest.skip(
            f"no Chromium at {path} (apt-get install chromium, or set DISSENSUS_CHROMIUM to a chromium binary)"
        )
    return path


@dataclass
class Desk:
    """The module's server and browser."""

    base: str
    browser: Any
    sync_api: Any
    journal: Path
    """The server's journal (a test may decide into it with another policy)."""

    def submit(self, panels: list[dict[str, Any]]) -> tuple[str, list[str]]:
        """Decide ``panels``; the run id and each record's review id (or ``<run>.<line>``)."""
        run = httpx.post(
            self.base + "/v1/decide", json=panels, headers=SUB, timeout=120, **PLAIN
        ).json()
        refs = [r.get("review_id") or f"{run['run_id']}.{r['line']}" for r in run["records"]]
        return run["run_id"], refs

    def page(self, token: str = "tok-r0", width: int = 1280, height: int = 900) -> Any:
        """A new logged-in page (its own cookies), in a window of ``width`` x ``height``."""
        context = self.browser.new_context(viewport={"width": width, "height": height})
        page = context.new_page()
        page.set_default_timeout(WAIT_MS)
        page.goto(self.base + "/review/login")
        page.fill("#token", token)
        page.click("button[type=submit]")
        page.wait_for_url(self.base + "/review")
        return page

    def api(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.base,
            headers={"Authorization": f"Bearer {token}"},
            timeout=60,
            **PLAIN,
        )


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="Playwright is not installed (pip install -e .[dev])"
    )
    executable = _chromium()
    tmp = tmp_path_factory.mktemp("desk")
    # The server starts while the browser does (each takes a few seconds).
    # No blind audits by chance (the default audit share): a test opens them on purpose.
    proc, base = spawn_server(
        tmp, str(tmp / "journal.sqlite"), policy={"acceptance": {"audit_rate": 0.0}}
    )
    pw = sync_api.sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        try:
            wait_ready(tmp, proc, base)
            yield Desk(
                base=base, browser=browser, sync_api=sync_api, journal=tmp / "journal.sqlite"
            )
        finally:
            browser.close()
    finally:
        pw.stop()
        stop_server(proc)


def _on_case(desk: Desk, page: Any, review_id: str) -> None:
    """Wait until ``review_id`` is shown and settled: no request in flight, focus on the
    page or its heading (:data:`SETTLED`)."""
    expect = desk.sync_api.expect
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", review_id)
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    page.wait_for_function(SETTLED)


def test_type_ahead_after_enter_acts_on_the_next_case(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (a, b, c, d) = desk.submit([escalating(f"ta-{i}") for i in range(4)])
    page = desk.page()
    page.goto(f"{desk.base}/review?run={run}")
    page.click(f"a.case-link[href^='/review/case/{a}']")
    _on_case(desk, page, a)

    # Pick, write a note, Enter, and j at once: the j acts on the next case (b -> c),
    # and not a letter reaches a note field.
    page.keyboard.press("1")
    page.keyboard.press("n")
    page.keyboard.type("typed ahead")
    page.keyboard.press("Enter")
    page.keyboard.press("j")
    _on_case(desk, page, c)
    expect(page.locator("#note")).to_have_value("")

    # k goes back to the open b; Enter resolves it without a note (the suggestion), and a
    # digit typed right after picks an option on the next open case.
    page.keyboard.press("k")
    _on_case(desk, page, b)
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.keyboard.press("2")
    _on_case(desk, page, c)
    expect(page.locator("input[name=decision][data-key='2']")).to_be_checked()
    expect(page.locator("#note")).to_have_value("")

    # Enter then k then j: resolved, back to b (resolved), on to c... which is resolved
    # now, so the page shows its resolution; and d is the open case after it.
    page.keyboard.press("Enter")  # 2 overrides the suggestion without a note: refused
    expect(page.locator("#case-error")).to_contain_text("overriding")
    _on_case(desk, page, c)
    page.keyboard.press("n")
    page.keyboard.type("2 is right")
    page.keyboard.press("Escape")  # leaves the field: keys act again
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("2")
    expect(page.locator("#note")).to_have_value("2 is right")
    page.keyboard.press("Enter")
    page.keyboard.press("k")
    page.keyboard.press("j")
    _on_case(desk, page, d)
    expect(page.locator("#note")).to_have_value("")
    page.screenshot(path=str(tmp_path / "after-type-ahead.png"))
    page.context.close()

    with desk.api("tok-r1") as api:
        got = {rid: api.get(f"/v1/review/{rid}").json() for rid in (a, b, c, d)}
    assert got[a]["resolution"]["note"] == "typed ahead"
    assert got[a]["resolution"]["decision"] == "1"
    assert got[b]["resolution"]["decision"] == "1"
    assert got[c]["resolution"] == {**got[c]["resolution"], "decision": "2", "note": "2 is right"}
    assert got[d]["status"] == "open"
    assert {g["resolution"]["reviewer"] for g in (got[a], got[b], got[c])} == {"reviewer0"}


def test_keys_typed_ahead_after_n_are_the_notes_text_not_commands(
    desk: Desk, tmp_path: Path
) -> None:
    """Enter, then at once n and a note holding j, u, c, r, k and digits: once the next
    case has settled, n opens its note and the rest is typed into it: nothing moves on,
    undoes, claims or picks; a queued Enter is dropped, not sent."""
    expect = desk.sync_api.expect
    run, (a, b, c) = desk.submit([escalating(f"tn-{i}") for i in range(3)])
    page = desk.page()
    page.goto(f"{desk.base}/review?run={run}")
    page.click(f"a.case-link[href^='/review/case/{a}']")
    _on_case(desk, page, a)
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    page.keyboard.press("n")
    page.keyboard.type("just unusual: jk ucr 12")
    page.keyboard.press("Enter")
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", b)
    expect(page.locator("html")).not_to_have_attribute("data-busy", "1")
    expect(page.locator("#note")).to_have_value("just unusual: jk ucr 12")
    expect(page.locator("input[name=decision]:checked")).to_have_count(0)
    page.screenshot(path=str(tmp_path / "note-typed-ahead.png"))
    page.context.close()
    with desk.api("tok-r1") as api:
        got = {rid: api.get(f"/v1/review/{rid}").json() for rid in (a, b, c)}
    assert got[a]["resolution"]["decision"] == "1"  # not undone
    assert got[b]["status"] == "open" and got[c]["status"] == "open"
    assert got[b].get("claim") is None


def test_queue_case_escaping_and_api_docs(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    hostile = panel(
        "refund-policy",
        ["1", "2", "1"],
        values=[
            {"accuracy": 0.9, "tone": 0.1},
            {"accuracy": 0.2, "tone": 0.8},
            {"accuracy": 0.7, "tone": 0.3},
        ],
        reasoning=[
            "Output (a) states the 30-day refund window the user asked about.",
            "Output (b) is friendlier; <b>tone</b> matters more here than the exact window.",
            "Output (a) answers the question; Output (b) does not mention any window.",
        ],
        meta={
            "question": "What is the refund policy? <script>document.title='pwned'</script>",
            "options": {
                "1": "Refunds within 30 days of purchase, no questions asked.",
                "2": "We are happy to help with refunds <img src=x onerror=alert(1)> anytime!",
            },
        },
    )
    run, (first, _second) = desk.submit([hostile, escalating("second-case")])
    page = desk.page()
    page.goto(f"{desk.base}/review?run={run}")
    expect(page.locator("a.case-link")).to_have_count(2)
    page.screenshot(path=str(tmp_path / "review-queue.png"), full_page=True)

    page.click(f"a.case-link[href^='/review/case/{first}']")
    _on_case(desk, page, first)
    assert "<script>" in page.inner_text("#question") and page.title() != "pwned"
    assert "<img" in page.inner_text("#options")
    expect(page.locator("li.option[data-option='1'] h3")).to_contain_text("Output (a)")
    expect(page.locator("li.option[data-option='1'] .chosen")).to_contain_text("a1, a3")
    expect(page.locator("#word-diff ins").first).to_be_visible()
    expect(page.locator("#progress")).to_contain_text("1 of 2 open in this queue")
    # The resolve bar stays in view while the reasoning scrolls.
    page.mouse.wheel(0, 3000)
    expect(page.locator("#resolve-form button[type=submit]")).to_be_in_viewport()
    page.screenshot(path=str(tmp_path / "review-case.png"))

    page.keyboard.press("?")
    expect(page.locator("#keys-help")).to_be_visible()
    page.keyboard.press("Escape")
    expect(page.locator("#keys-help")).to_be_hidden()

    # The API documentation renders from this server's files alone.
    requested: list[str] = []
    page.on("request", lambda req: requested.append(req.url))
    page.goto(desk.base + "/docs")
    page.wait_for_selector(".opblock-summary-path")
    assert "/v1/decide" in page.inner_text("#swagger-ui")
    assert requested and all(url.startswith(desk.base + "/") for url in requested), [
        u for u in requested if not u.startswith(desk.base + "/")
    ]
    # ReDoc too, under its Content-Security-Policy (no framing, own scripts only).
    page.goto(desk.base + "/redoc")
    page.wait_for_selector('text="/v1/decide"', timeout=30_000)
    page.context.close()
    with desk.api("tok-sub") as api:
        assert api.get(f"/v1/runs/{run}/verify").json()["ok"]
    assert (tmp_path / "review-queue.png").stat().st_size > 10_000
    assert (tmp_path / "review-case.png").stat().st_size > 10_000


def test_j_k_skip_claimed_cases_c_claims_u_undoes(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (a, b, c) = desk.submit([escalating(f"cl-{i}") for i in range(3)])
    with desk.api("tok-r1") as api:
        assert api.post(f"/v1/review/{b}/claim").status_code == 200
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    page.keyboard.press("j")  # b is reviewer1's: skipped
    _on_case(desk, page, c)
    page.keyboard.press("k")
    _on_case(desk, page, a)
    page.keyboard.press("c")
    expect(page.locator("#case-status")).to_contain_text("claimed by reviewer0")
    _on_case(desk, page, a)
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["claim"]["reviewer"] == "reviewer0"

    # Resolve a (the next open case nobody else holds is c), then undo it with u u: the
    # first u names the case, any other key (Esc) cancels, a second u undoes.
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    _on_case(desk, page, c)
    expect(page.locator("#undo-form")).to_contain_text(a)
    asks = page.locator("#undo-confirm")
    page.keyboard.press("u")
    expect(asks).to_have_text(f"press u again to undo your resolution of {a}")
    expect(asks).to_have_attribute("role", "status")
    page.screenshot(path=str(tmp_path / "review-undo.png"))
    page.keyboard.press("Escape")
    expect(asks).to_have_text("")
    page.keyboard.press("u")
    expect(asks).not_to_have_text("")
    page.keyboard.press("x")  # not a command: still cancels
    expect(asks).to_have_text("")
    page.keyboard.press("u")
    expect(asks).not_to_have_text("")
    page.keyboard.press("n")  # into the note: cancels, and u is the note's text there
    page.keyboard.type("u")
    expect(page.locator("#note")).to_have_value("u")
    expect(asks).to_have_text("")
    page.keyboard.press("Escape")
    page.wait_for_function(SETTLED)
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["status"] == "resolved"
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", c)
    page.keyboard.press("u")
    page.keyboard.press("u")
    _on_case(desk, page, a)
    expect(page.locator("#case-status")).to_contain_text("open")
    expect(page.locator("#resolve-form")).to_be_visible()
    page.context.close()
    with desk.api("tok-r1") as api:
        shown = api.get(f"/v1/review/{a}").json()
    assert shown["status"] == "open"
    assert [h["type"] for h in shown["history"]] == ["review.resolved", "review.reopened"]


def test_a_move_puts_the_focus_on_the_cases_heading(desk: Desk, tmp_path: Path) -> None:
    """After j / k (a page swapped in over htmx) the focus is on the new case's heading,
    so a screen reader reads the case out; keys still act there, and keys typed into a
    field still type."""
    expect = desk.sync_api.expect
    run, (a, b) = desk.submit([escalating(f"fh-{i}") for i in range(2)])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    title = page.locator("#case-title")
    page.keyboard.press("j")
    _on_case(desk, page, b)
    expect(title).to_be_focused()
    expect(title).to_have_attribute("tabindex", "-1")
    page.keyboard.press("k")  # not swallowed by the heading
    _on_case(desk, page, a)
    expect(title).to_be_focused()
    page.keyboard.press("2")
    expect(page.locator("input[name=decision][data-key='2']")).to_be_checked()
    page.keyboard.press("n")
    page.keyboard.type("jk 1")
    expect(page.locator("#note")).to_have_value("jk 1")
    expect(title).to_have_attribute("data-review-id", a)
    expect(page.locator("input[name=decision][data-key='2']")).to_be_checked()
    page.context.close()


def test_while_the_keys_help_is_open_only_its_own_keys_act(desk: Desk, tmp_path: Path) -> None:
    """With the keys dialog open, j, digits, c and n do nothing; ? hides it, Esc closes it,
    and then the keys act again."""
    expect = desk.sync_api.expect
    run, (a, b) = desk.submit([escalating(f"kh-{i}") for i in range(2)])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    dialog = page.locator("#keys-help")
    page.keyboard.press("?")
    expect(dialog).to_be_visible()
    for key in ("j", "2", "c", "n"):
        page.keyboard.press(key)
    expect(dialog).to_be_visible()
    page.keyboard.press("?")
    expect(dialog).to_be_hidden()
    _on_case(desk, page, a)
    expect(page.locator("input[name=decision]:checked")).to_have_count(0)
    expect(page.locator("#note")).not_to_be_focused()
    expect(page.locator("#case-status")).to_contain_text("open")
    page.keyboard.press("?")
    expect(dialog).to_be_visible()
    page.keyboard.press("k")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.keyboard.press("j")
    _on_case(desk, page, b)
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{a}").json()
    assert got["status"] == "open" and got.get("claim") is None


def test_a_opens_the_audit_of_an_automatic_decision(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (ref,) = desk.submit([panel("auto-ok", ["1", "1", "1"], swap=["1", "1", "1"])])
    page = desk.page()
    page.goto(f"{desk.base}/review?status=automatic&run={run}")
    page.click(f"a.auto-link[href^='/review/auto/{ref}']")
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", ref)
    expect(page.locator("#case-title")).to_be_focused()
    expect(page.locator("#audit-note")).to_be_hidden()
    page.keyboard.press("a")
    expect(page.locator("#audit-note")).to_be_focused()
    page.keyboard.type("checked the window")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{desk.base}/review?status=automatic&run={run}")
    expect(page.locator("#auto-queue")).to_have_count(0)
    page.goto(f"{desk.base}/review/auto/{ref}")
    expect(page.locator("#case-status")).to_contain_text("Audited by reviewer0")
    expect(page.locator("#case-status")).to_contain_text("confirmed")
    page.context.close()


def test_digits_n_and_enter_work_the_audit_form(desk: Desk, tmp_path: Path) -> None:
    """On an automatic decision's page, 1-9 pick an option of the audit form (opening it),
    n writes its note and Enter submits it, as on a case page."""
    expect = desk.sync_api.expect
    run, (ref,) = desk.submit([panel("auto-keys", ["1", "1", "1"], swap=["1", "1", "1"])])
    page = desk.page()
    page.goto(f"{desk.base}/review/auto/{ref}?status=automatic&run={run}")
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", ref)
    page.wait_for_function("() => document.activeElement === document.body")
    radio = page.locator("#audit-form input[name=decision][data-key='1']")
    radio.evaluate("r => { r.checked = false; }")  # the committed answer is picked in advance
    expect(page.locator("#audit-note")).to_be_hidden()
    page.keyboard.press("1")
    expect(radio).to_be_checked()
    expect(page.locator("#audit-note")).to_be_visible()
    page.keyboard.press("n")
    expect(page.locator("#audit-note")).to_be_focused()
    page.keyboard.type("the window is right")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{desk.base}/review?status=automatic&run={run}")
    page.context.close()
    from dissensus.store import Journal

    with Journal(desk.journal) as journal:
        audit = journal.get(run, f"confirm/{ref.rsplit('.', 1)[1]}")
    assert audit is not None and audit.payload["agrees"], audit
    assert audit.payload["note"] == "the window is right"


def test_an_audit_forms_draft_is_kept_in_the_browser_until_it_is_sent(
    desk: Desk, tmp_path: Path
) -> None:
    """What was typed on an automatic decision's audit form survives a reload (a session
    that ended, a server restart): the form is unfolded and filled again; once the audit
    is accepted the draft is gone."""
    expect = desk.sync_api.expect
    run, (ref,) = desk.submit([panel("auto-draft", ["1", "1", "1"], swap=["1", "1", "1"])])
    page = desk.page()
    where = f"{desk.base}/review/auto/{ref}?status=automatic&run={run}"
    page.goto(where)
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", ref)
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("o")
    page.keyboard.type("3")
    page.keyboard.press("Escape")
    page.keyboard.press("n")
    page.keyboard.type("kept across a reload")
    page.reload()
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", ref)
    expect(page.locator("#audit-note")).to_be_visible()
    expect(page.locator("#audit-note")).to_have_value("kept across a reload")
    expect(page.locator("#other-decision")).to_have_value("3")
    page.locator("#audit-note").press("Enter")
    page.wait_for_url(f"{desk.base}/review?status=automatic&run={run}")
    kept = page.evaluate(f"sessionStorage.getItem('dissensus-draft:{ref}')")
    page.context.close()
    assert kept is None


def test_o_types_an_audits_answer_no_agent_gave(desk: Desk, tmp_path: Path) -> None:
    """On an automatic decision's page, ``o`` opens the audit form at its typed answer."""
    expect = desk.sync_api.expect
    run, (ref,) = desk.submit([panel("auto-typed", ["1", "1", "1"], swap=["1", "1", "1"])])
    page = desk.page()
    page.goto(f"{desk.base}/review/auto/{ref}")
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", ref)
    page.wait_for_function("() => document.activeElement === document.body")
    expect(page.locator("#other-decision")).to_be_hidden()
    page.keyboard.press("o")
    expect(page.locator("#other-decision")).to_be_focused()
    page.keyboard.type("42")
    page.locator("#audit-note").fill("none of the agents had it")
    page.locator("#audit-note").press("Enter")
    from dissensus.store import Journal

    # The page's own URL already matches "/review**": wait for the journal instead (the
    # answer is journalled before the page moves on), 20 s at most.
    audit = None
    for _ in range(200):
        with Journal(desk.journal) as journal:
            audit = journal.get(run, f"confirm/{ref.rsplit('.', 1)[1]}")
        if audit is not None:
            break
        page.wait_for_timeout(100)
    page.context.close()
    assert audit is not None and audit.payload["decision"] == "42", audit


def test_long_unbroken_strings_do_not_widen_the_pages(desk: Desk, tmp_path: Path) -> None:
    """A 300-character id, 400-character labels and a long agent name wrap: neither the
    queue nor the case page scrolls sideways at 1280 px (nor at 375 to 800 px:
    :func:`test_narrow_windows_scroll_only_down`)."""
    long = panel(
        "long-" + "x" * 300,
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        reasoning=["A" * 3000, "C" * 5000, "x"],
        meta={
            "question": "Q" * 3000,
            "options": {"1": "A" * 3000, "2": "B" * 3000},
            "option_labels": {"1": "L" * 400, "2": "M" * 400},
        },
    )
    long["outputs"][0]["agent"] = "agent" + "Z" * 300
    run, (ref,) = desk.submit([long])
    page = desk.page()
    width = "[document.documentElement.scrollWidth, window.innerWidth]"
    page.goto(f"{desk.base}/review?run={run}")
    desk.sync_api.expect(page.locator("a.case-link")).to_have_count(1)
    scroll, inner = page.evaluate(width)
    assert scroll <= inner, f"queue is {scroll} px wide in a {inner} px window"
    page.goto(f"{desk.base}/review/case/{ref}?run={run}")
    _on_case(desk, page, ref)
    scroll, inner = page.evaluate(width)
    page.screenshot(path=str(tmp_path / "long-case.png"))
    assert scroll <= inner, f"case page is {scroll} px wide in a {inner} px window"
    expect = desk.sync_api.expect
    expect(page.locator("#resolve-form button[type=submit]")).to_be_in_viewport()
    page.context.close()


def _audited(desk: Desk, tmp: Path, panels: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """Decide ``panels`` into the server's journal under a policy auditing every automatic
    commit; the run id and each case's ``<run>.<line>``."""
    import asyncio

    from dissensus.pipeline.batch import execute_run, start_run
    from dissensus.store import Journal

    cases = tmp / "audited.jsonl"
    cases.write_text("".join(json.dumps(p) + "\n" for p in panels), encoding="utf-8")
    policy = write_policy(tmp / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    run = f"blind-{tmp.name}"

    def decide() -> int:
        with Journal(desk.journal) as journal:
            start_run(journal, str(cases), policy, run_id=run)

            async def go() -> int:
                return len([r async for r in execute_run(journal, run)])

            return asyncio.run(go())

    # In a thread of its own: Playwright's event loop runs in this one.
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(decide).result() == len(panels)
    return run, [f"{run}.{i + 1}" for i in range(len(panels))]


BLIND_OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]


def _blind(pid: str) -> dict[str, Any]:
    meta = {"question": "Which policy is stated?", "options": BLIND_OPTIONS}
    return panel(pid, ["1", "1", "1"], swap=["1", "1", "1"], meta=meta)


def test_a_blind_audit_is_answered_with_the_keyboard(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (first, second) = _audited(desk, tmp_path, [_blind("bl-1"), _blind("bl-2")])
    page = desk.page()
    page.goto(f"{desk.base}/review?status=audits&run={run}")
    page.click(f"a.audit-link[href^='/review/audit/{first}']")
    _on_case(desk, page, first)
    expect(page.locator("#committed")).to_have_count(0)
    expect(page.locator("#case-status")).to_contain_text("hidden until you have answered")
    page.keyboard.press("j")
    _on_case(desk, page, second)
    page.keyboard.press("k")
    _on_case(desk, page, first)
    page.keyboard.press("2")
    expect(page.locator('input[name="decision"][value="2"]')).to_be_checked()
    page.keyboard.press("n")
    expect(page.locator("#note")).to_be_focused()
    page.keyboard.type("the second option is stated")
    page.keyboard.press("Enter")
    _on_case(desk, page, second)
    page.screenshot(path=str(tmp_path / "review-blind-audit.png"))
    page.keyboard.press("1")
    page.keyboard.press("n")
    page.keyboard.type("checked blind")
    page.keyboard.press("Enter")
    page.wait_for_url(f"{desk.base}/review?status=audits&run={run}")
    expect(page.locator("#audit-queue")).to_have_count(0)
    page.goto(f"{desk.base}/review/audit/{first}")
    expect(page.locator("#audit-outcome")).to_have_text("corrected")
    expect(page.locator("#committed")).to_contain_text("1")
    page.context.close()
    with desk.api("tok-r1") as api:
        shown = [api.get(f"/v1/audits/{ref}").json()["status"] for ref in (first, second)]
    assert shown == ["audited", "audited"]


def test_c_claims_a_blind_audit_and_j_skips_one_another_holds(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (first, second, third) = _audited(desk, tmp_path, [_blind(f"bc-{i}") for i in range(3)])
    with desk.api("tok-r1") as api:
        assert api.post(f"/v1/review/{second}/claim").status_code == 200
    page = desk.page()
    page.goto(f"{desk.base}/review/audit/{first}?run={run}")
    _on_case(desk, page, first)
    page.keyboard.press("j")  # second is reviewer1's: skipped
    _on_case(desk, page, third)
    page.keyboard.press("c")
    expect(page.locator("#case-status")).to_contain_text("claimed by reviewer0")
    _on_case(desk, page, third)
    # r gives the claim up; c takes it again.
    expect(page.locator("#release-form")).to_contain_text("give up claim")
    page.keyboard.press("r")
    expect(page.locator("#release-form")).to_have_count(0)
    _on_case(desk, page, third)
    expect(page.locator("#case-status")).not_to_contain_text("claimed")
    page.keyboard.press("c")
    expect(page.locator("#release-form")).to_be_visible()
    _on_case(desk, page, third)
    page.keyboard.press("k")
    _on_case(desk, page, first)
    # An answer to the audit reviewer1 holds: refused naming them, the form kept.
    page.goto(f"{desk.base}/review/audit/{second}?run={run}")
    _on_case(desk, page, second)
    expect(page.locator("#release-form")).to_have_count(0)
    page.keyboard.press("2")
    page.keyboard.press("n")
    page.keyboard.type('a "careful" <b>note</b>')
    page.keyboard.press("Enter")
    expect(page.locator("#case-error")).to_contain_text("claimed by reviewer1")
    _on_case(desk, page, second)
    expect(page.locator("#note")).to_have_value('a "careful" <b>note</b>')
    expect(page.locator('input[name="decision"][value="2"]')).to_be_checked()
    page.context.close()
    with desk.api("tok-r1") as api:
        shown = api.get(f"/v1/audits/{third}").json()
        assert shown["claim"]["reviewer"] == "reviewer0"
        refused = api.post(f"/v1/cases/{third}/confirm", json={"note": "mine?"})
        assert refused.status_code == 409 and refused.json()["claimed_by"] == "reviewer0"


ABSTAINED = [
    {"agent": "a", "decision": None, "reasoning": "I cannot tell."},
    {"agent": "b", "decision": None, "reasoning": "Not enough context."},
]


def test_o_types_the_answer_when_no_agent_answered(desk: Desk, tmp_path: Path) -> None:
    expect = desk.sync_api.expect
    run, (empty, after) = desk.submit(
        [{"id": "abstained", "outputs": ABSTAINED}, escalating("after-abstained")]
    )
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{empty}?run={run}")
    _on_case(desk, page, empty)
    expect(page.locator("input[name=decision]")).to_have_count(0)
    page.keyboard.press("o")
    expect(page.locator("#other-decision")).to_be_focused()
    page.keyboard.type("escalate to legal")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("n")
    page.keyboard.type("neither agent answered; the contract says so")
    page.keyboard.press("Enter")
    _on_case(desk, page, after)
    expect(page.locator("#other-decision")).to_have_value("")
    page.screenshot(path=str(tmp_path / "after-typed-answer.png"))
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{empty}").json()
    assert got["status"] == "resolved"
    assert got["resolution"]["decision"] == "escalate to legal"
    assert got["resolution"]["reviewer"] == "reviewer0"


AXE = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"


def _serious_violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page (injected through the
    DevTools protocol, so the page's CSP stays as it is)."""
    if not page.evaluate("() => typeof window.axe !== 'undefined'"):
        page.evaluate("() => {" + AXE.read_text(encoding="utf-8") + "\n}")
    found = page.evaluate(
        "async () => (await window.axe.run(document, {resultTypes: ['violations']})).violations"
        ".map(v => ({id: v.id, impact: v.impact, help: v.help,"
        " nodes: v.nodes.map(n => n.target.join(' ')).slice(0, 5)}))"
    )
    return [v for v in found if v["impact"] in ("serious", "critical")]


def test_queue_case_and_audit_pages_pass_axe(desk: Desk, tmp_path: Path) -> None:
    run, (first, _) = desk.submit([escalating("ax-1"), escalating("ax-2")])
    _, (auto_ref,) = desk.submit([panel("ax-auto", ["1", "1", "1"], swap=["1", "1", "1"])])
    _, (blind_ref,) = _audited(desk, tmp_path, [_blind("ax-blind")])
    page = desk.page()
    for name, url in (
        ("queue", f"/review?run={run}"),
        ("case", f"/review/case/{first}?run={run}"),
        ("automatic", f"/review/auto/{auto_ref}"),
        ("blind audit", f"/review/audit/{blind_ref}"),
    ):
        page.goto(desk.base + url)
        page.wait_for_selector("main h1")
        page.keyboard.press("?")
        assert _serious_violations(page) == [], name
        page.keyboard.press("Escape")
        assert _serious_violations(page) == [], name
        page.screenshot(path=str(tmp_path / f"axe-{name}.png"), full_page=True)
    page.context.close()
    assert all((tmp_path / f"axe-{n}.png").stat().st_size > 5_000 for n in ("queue", "case"))


def test_a_chat_conversation_is_shown_bounded_and_passes_axe(desk: Desk, tmp_path: Path) -> None:
    """A case asked as a chat conversation (``meta.messages``, as the chat door records
    it): the question and every message on the page, escaped, wrapped within the window."""
    expect = desk.sync_api.expect
    unbroken = "x" * 6_000
    chat = escalating("chat-conv")
    del chat["meta"]["question"]
    chat["meta"]["messages"] = [
        {"role": "system", "content": "Be <b>brief</b>. " + "Long system prompt. " * 400},
        {"role": "user", "content": "First turn " + unbroken},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "Which option <script>x</script>?"}]},
    ]
    run, (ref,) = desk.submit([chat])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{ref}?run={run}")
    _on_case(desk, page, ref)
    expect(page.locator("#question")).to_have_text("Which option <script>x</script>?")
    expect(page.locator("#conversation > li")).to_have_count(4)
    roles = page.eval_on_selector_all("#conversation > li", "els => els.map(e => e.dataset.role)")
    assert roles == ["system", "user", "assistant", "user"]
    assert page.inner_text("#conversation li:first-child pre").startswith("Be <b>brief</b>.")
    # Bounded like an agent's reasoning: wrapped within the window, no sideways scroll.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    box = page.locator("#conversation li:nth-child(2) pre").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1280
    page.mouse.wheel(0, 3000)
    expect(page.locator("#resolve-form button[type=submit]")).to_be_in_viewport()
    assert _serious_violations(page) == []
    page.screenshot(path=str(tmp_path / "chat-case.png"), full_page=True)
    page.context.close()


def test_u_asks_then_times_out_without_undoing(desk: Desk) -> None:
    """The first ``u`` waits 5 s for its second: after that the question is gone and one
    more ``u`` asks again instead of undoing (the page's clock is run forward, no wait)."""
    expect = desk.sync_api.expect
    run, (a, b) = desk.submit([escalating(f"ut-{i}") for i in range(2)])
    page = desk.page()
    page.clock.install()
    page.goto(f"{desk.base}/review/case/{a}?run={run}")
    _on_case(desk, page, a)
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    _on_case(desk, page, b)
    asks = page.locator("#undo-confirm")
    page.keyboard.press("u")
    expect(asks).to_have_text(f"press u again to undo your resolution of {a}")
    # The page's clock also runs on in real time between these steps (more than a tenth
    # of a second on a loaded machine): 4 s run forward leaves a second of it.
    page.clock.run_for(4_000)
    expect(asks).not_to_have_text("")  # still asking before the 5 s
    page.clock.run_for(1_100)
    expect(asks).to_have_text("")
    page.keyboard.press("u")  # a new question, not the second u of the old one
    expect(asks).to_have_text(f"press u again to undo your resolution of {a}")
    page.wait_for_function(SETTLED)
    expect(page.locator("#case-title")).to_have_attribute("data-review-id", b)
    with desk.api("tok-r1") as api:
        assert api.get(f"/v1/review/{a}").json()["status"] == "resolved"
    page.context.close()


def test_o_typing_an_options_label_resolves_with_that_option(desk: Desk) -> None:
    """``o``, "Output (a)", Esc, ``n``, a note, Enter: it was saved as a decision outside
    the options that reads "Output (a)"; it is option 1."""
    said = "Output (a) states the refund window."
    run, (typed, after) = desk.submit([escalating("typed-label", said), escalating("after")])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{typed}?run={run}")
    _on_case(desk, page, typed)
    page.keyboard.press("o")
    desk.sync_api.expect(page.locator("#other-decision")).to_be_focused()
    page.keyboard.type("Output (a)")
    page.keyboard.press("Escape")
    page.wait_for_function("() => document.activeElement === document.body")
    page.keyboard.press("n")
    page.keyboard.type("typed as the page shows it")
    page.keyboard.press("Enter")
    _on_case(desk, page, after)
    page.goto(f"{desk.base}/review/case/{typed}?run={run}")
    desk.sync_api.expect(page.locator("#resolved-decision")).to_have_attribute("data-decision", "1")
    assert "(none of the options)" not in page.inner_text("#resolution")
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{typed}").json()
    assert got["resolution"]["decision"] == "1" and not got["resolution"]["outside_options"]


BROKEN_HEADERS = """() => Array.from(document.querySelectorAll('.positions th')).filter(th => {
  const words = th.textContent.trim().split(/\\s+/);
  return th.querySelector('bdi') === null && words.some(word => {
    const probe = document.createElement('span');
    probe.textContent = word;
    probe.style.whiteSpace = 'nowrap';
    th.appendChild(probe);
    const whole = probe.getBoundingClientRect().width;
    probe.remove();
    return whole > th.clientWidth;
  });
}).map(th => th.textContent.trim())"""
"""The positions table's own header cells (no agent-supplied text) narrower than one of
their words: a word cut in two (``famil|y``)."""


def test_the_positions_tables_headers_stay_whole(desk: Desk, tmp_path: Path) -> None:
    """``overflow-wrap: anywhere`` on every ``th`` let a squeezed positions table break its
    own headers mid-word (``famil|y``, ``stabl|e``); only agent-supplied text may."""
    dims = [f"dimension{i}" for i in range(6)]
    wide = panel(
        "wide-table",
        ["1", "2", "1"],
        values=[{d: 0.5 for d in dims}] * 3,
        reasoning=["Output (a) is right."] * 3,
    )
    for i, out in enumerate(wide["outputs"]):
        out["agent"] = f"agent{i}-" + "N" * 60
        out["family"] = "family-" + "F" * 40
    run, (ref,) = desk.submit([wide])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{ref}?run={run}")
    _on_case(desk, page, ref)
    page.locator(".positions table").screenshot(path=str(tmp_path / "positions.png"))
    assert page.evaluate(BROKEN_HEADERS) == []
    scroll, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert scroll <= inner, f"case page is {scroll} px wide in a {inner} px window"
    page.context.close()


OPTION_TEXTS = (
    "() => Array.from(document.querySelectorAll('li.option h3 > bdi')).map(b => b.innerText)"
)
RADIOS = """() => Array.from(document.querySelectorAll('input[name=decision]')).map(i => [i.value, i.dataset.key,
  i.closest('label').innerText.includes('suggested')])"""


def test_lookalike_options_read_apart_and_the_suggestion_resolves(desk: Desk) -> None:
    """Options ``approve``, ``appro`` + ZWJ + ``ve``, ``approve`` + LRM, ... all read
    "approve" in Chromium; they read apart now (the characters that show as nothing
    escaped), and the suggested one's radio posts its own id: picked with its key and
    Enter, it resolves the case as the suggestion, not as an answer no agent gave."""
    run, (case, after) = desk.submit([lookalike_panel("lookalike-browser"), escalating("after")])
    page = desk.page()
    page.goto(f"{desk.base}/review/case/{case}?run={run}")
    _on_case(desk, page, case)
    shown = page.evaluate(OPTION_TEXTS)
    seen = [re.sub(NOTHING, "", text) for text in shown]
    assert len(seen) == len(LOOKALIKES) + 1 and len(set(seen)) == len(seen), shown
    assert "appro\\u200dve" in shown
    radios = page.evaluate(RADIOS)
    assert {value for value, _, _ in radios} == {*LOOKALIKES, "reject"}  # exact ids
    ((key, value),) = [(key, value) for value, key, suggested in radios if suggested]
    assert value == SUGGESTED and key
    agents = page.inner_text(".positions table")
    assert "alice" in agents and "ali\\u200dce" in agents
    page.keyboard.press(key)
    page.keyboard.press("Enter")  # the suggestion needs no note
    _on_case(desk, page, after)
    page.context.close()
    with desk.api("tok-r1") as api:
        got = api.get(f"/v1/review/{case}").json()
    assert got["resolution"]["decision"] == SUGGESTED
    assert not got["resolution"]["outside_options"]


REPO = Path(__file__).resolve().parent.parent
WIDE = "() => [document.documentElement.scrollWidth, window.innerWidth]"
CASE_LAYOUT = """() => {
  const bar = document.querySelector('.resolve-bar');
  const columns = [...document.querySelectorAll('.columns > section')].map(s => s.getBoundingClientRect());
  return {position: getComputedStyle(bar).position, bar: bar.getBoundingClientRect().height,
    lefts: columns.map(c => Math.round(c.left)), widths: columns.map(c => Math.round(c.width)),
    main: (m => m.clientWidth - parseFloat(getComputedStyle(m).paddingLeft)
      - parseFloat(getComputedStyle(m).paddingRight))(document.querySelector('main'))};
}"""
"""How the case page is laid out: the resolve bar's position and height, each column's
left edge and width, and the width of the page's main box inside its padding."""


@pytest.fixture(scope="module")
def monitored(desk: Desk, tmp_path_factory: pytest.TempPathFactory) -> None:
    """The server's queue page with an acceptance monitor (:func:`_monitored`)."""
    with ThreadPoolExecutor(1) as pool:  # Playwright's event loop runs in this thread
        pool.submit(_monitored, desk, tmp_path_factory.mktemp("monitored")).result()


def _monitored(desk: Desk, tmp: Path) -> None:
    """Ten LLMBar cases decided into the server's journal with an acceptance file, every
    automatic commit audited and confirmed (the CLI in a process of its own: it sets
    signal handlers, which only a main thread may)."""
    import subprocess
    import sys

    import yaml

    from dissensus.pipeline.confirm import confirm
    from dissensus.pipeline.review import final_records
    from dissensus.store import Journal

    def dissensus(*args: str | Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
        cmd = [sys.executable, "-m", "dissensus", *map(str, args)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr

    source = REPO / "examples" / "llmbar-swap.jsonl"
    settings: dict[str, Any] = {
        "reading": {"similarity": "tfidf"},
        "acceptance": {"audit_rate": 1.0},
    }
    plain = tmp / "plain.yaml"
    plain.write_text(yaml.safe_dump(settings), encoding="utf-8")
    dissensus("calibrate-acceptance", source, "--policy", plain, "--out", tmp / "A.json")
    settings["acceptance"]["model"] = "A.json"
    policy = tmp / "with-file.yaml"
    policy.write_text(yaml.safe_dump(settings), encoding="utf-8")
    cases = tmp / "cases.jsonl"
    cases.write_text("".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:10]))
    run = f"monitored-{tmp.name}"
    dissensus("decide", cases, "--policy", policy, "--journal", desk.journal, "--run-id", run)
    with Journal(desk.journal) as journal:
        for record in final_records(journal, run):
            if record.auto and record.decision is not None:
                confirm(journal, f"{run}.{record.line}", decision=record.decision, note="right")


@pytest.mark.parametrize("width", [375, 640, 800])
@pytest.mark.usefixtures("monitored")
def test_narrow_windows_scroll_only_down(desk: Desk, tmp_path: Path, width: int) -> None:
    """At 375, 640 and 800 px wide (700 px high) no page scrolls sideways: the acceptance
    monitor and the queue scroll in their own boxes; the case page is one column and its
    resolve bar follows the case instead of covering the window's bottom. No page load
    logs an error (the favicon is served)."""
    from dissensus.acceptance.monitor import confseq_available

    run, (ref, _) = desk.submit([escalating(f"narrow-{width}-1"), escalating(f"narrow-{width}-2")])
    page = desk.page(width=width, height=700)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{desk.base}/review?run={run}")
    desk.sync_api.expect(page.locator("a.case-link")).to_have_count(2)
    scroll, inner = page.evaluate(WIDE)
    page.screenshot(path=str(tmp_path / f"queue-{width}.png"), full_page=True)
    assert scroll <= inner, f"queue is {scroll} px wide in a {inner} px window"
    tables = page.locator(".table-scroll > table.monitor")
    assert tables.count() == (1 if confseq_available() else 0)
    if (
        width == 375 and confseq_available()
    ):  # the monitor is wider than the window: its box scrolls
        box = page.evaluate("() => { const b = document.querySelector('.table-scroll:has(> table.monitor)');"
                            " return [b.scrollWidth, b.clientWidth]; }")  # fmt: skip
        assert box[0] > box[1], box
        assert _serious_violations(page) == []
    page.goto(f"{desk.base}/review/case/{ref}?run={run}")
    _on_case(desk, page, ref)
    scroll, inner = page.evaluate(WIDE)
    layout = page.evaluate(CASE_LAYOUT)
    page.screenshot(path=str(tmp_path / f"case-{width}.png"))
    assert scroll <= inner, f"case page is {scroll} px wide in a {inner} px window"
    assert len(set(layout["lefts"])) == 1 and min(layout["widths"]) >= layout["main"] - 2, layout
    assert layout["position"] == "static", layout
    page.mouse.wheel(0, 5000)
    desk.sync_api.expect(page.locator("#resolve-form button[type=submit]")).to_be_in_viewport()
    page.context.close()
    assert errors == [], errors


def test_a_wide_window_keeps_two_columns_and_a_sticky_bar_of_a_third_at_most(desk: Desk) -> None:
    """At 1280 x 700 the case page keeps its two columns and the resolve bar stays at the
    window's bottom, within a third of its height; a window 600 px high scrolls it with
    the page."""
    run, (ref,) = desk.submit([escalating("wide-sticky")])
    page = desk.page(width=1280, height=700)
    page.goto(f"{desk.base}/review/case/{ref}?run={run}")
    _on_case(desk, page, ref)
    layout = page.evaluate(CASE_LAYOUT)
    assert layout["position"] == "sticky" and layout["bar"] <= 700 / 3, layout
    assert len(set(layout["lefts"])) == 2, layout
    page.set_viewport_size({"width": 1280, "height": 600})
    assert page.evaluate(CASE_LAYOUT)["position"] == "static"
    page.context.close()


def test_the_run_filter_takes_a_typed_run_id_from_the_keyboard(desk: Desk) -> None:
    """The run filter is a text field suggesting the newest runs: a run id typed in it
    and Enter filter the queue on that run; the field keeps it, and its suggestions
    name the run."""
    expect = desk.sync_api.expect
    run, (a, _b) = desk.submit([escalating(f"rf-{i}") for i in range(2)])
    page = desk.page()
    field = page.locator("input[name=run]")
    expect(field).to_have_attribute("list", "run-choices")
    expect(page.locator(f"#run-choices option[value='{run}']")).to_have_count(1)
    field.focus()
    page.keyboard.type(run)
    page.keyboard.press("Enter")
    page.wait_for_url(f"{desk.base}/review?*run={run}*")
    expect(page.locator("input[name=run]")).to_have_value(run)
    expect(page.locator(f"a.case-link[href^='/review/case/{a}']")).to_have_count(1)
    expect(page.locator("a.case-link")).to_have_count(2)
    page.context.close()
