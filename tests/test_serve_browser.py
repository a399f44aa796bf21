"""The review page in a real browser: log in, open the queue, resolve with the keyboard.

Playwright drives the distribution's Chromium (``$DISSENSUS_CHROMIUM``, else
``/usr/bin/chromium``); the test skips, naming the reason, when neither Playwright nor
a Chromium binary is there. Screenshots of the queue and of a case page are saved in
the test's output folder (``tmp_path``). The API documentation page (/docs) is rendered in
the same browser, which must fetch nothing from any other host.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest

from pipeline_cases import panel
from serve_helpers import escalating
from test_serve_load import PLAIN, spawn_server, stop_server, wait_ready

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def _chromium() -> str:
    path = os.environ.get("DISSENSUS_CHROMIUM") or "/usr/bin/chromium"
    if not Path(path).exists() and shutil.which(path) is None:
        pytest.skip(f"no Chromium at {path} (set DISSENSUS_CHROMIUM to a chromium binary)")
    return path


@pytest.mark.slow
def test_resolve_with_the_keyboard_in_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed")
    executable = _chromium()
    # The server starts while the browser does (each takes a few seconds).
    proc, base = spawn_server(tmp_path, str(tmp_path / "journal.sqlite"))
    pw = sync_api.sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS, headless=True)
        wait_ready(tmp_path, proc, base)
        sub = {"Authorization": "Bearer tok-sub"}
        hostile = panel(
            "refund-policy",
            ["1", "2", "1"],
            values=[
                {"accuracy": 0.9, "tone": 0.1},
                {"accuracy": 0.2, "tone": 0.8},
                {"accuracy": 0.7, "tone": 0.3},
            ],
            reasoning=[
                "Option 1 states the 30-day refund window the user asked about.",
                "Option 2 is friendlier; <b>tone</b> matters more here than the exact window.",
                "Option 1 answers the question; option 2 does not mention any window.",
            ],
            meta={"question": "What is the refund policy? <script>document.title='pwned'</script>"},
        )
        run = httpx.post(
            base + "/v1/decide",
            json=[hostile, escalating("second-case"), escalating("third-case")],
            headers=sub,
            timeout=60,
            **PLAIN,
        ).json()
        first, second, _ = (r["review_id"] for r in run["records"])

        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(base + "/review")
            assert page.url.endswith("/review/login")
            page.fill("#token", "tok-r0")
            page.click("button[type=submit]")
            page.wait_for_selector("#queue")
            assert page.locator("a.case-link").count() == 3
            page.screenshot(path=str(tmp_path / "review-queue.png"), full_page=True)

            page.click(f"a.case-link[href='/review/case/{first}']")
            page.wait_for_selector(f"#case-title[data-review-id='{first}']")
            assert "<script>" in page.inner_text("#question") and page.title() != "pwned"
            page.screenshot(path=str(tmp_path / "review-case.png"), full_page=True)

            page.keyboard.press("?")
            assert page.locator("#keys-help").is_visible()
            page.keyboard.press("Escape")
            page.keyboard.press("1")
            assert page.is_checked("input[name=decision][data-key='1']")
            page.keyboard.press("n")
            page.keyboard.type("states the window; checked in the browser")
            page.keyboard.press("Enter")
            page.wait_for_selector(f"#case-title[data-review-id='{second}']")

            page.keyboard.press("k")
            page.wait_for_selector(f"#case-title[data-review-id='{first}']")
            assert page.inner_text("#resolved-by") == "reviewer0"
            page.keyboard.press("j")
            page.wait_for_selector(f"#case-title[data-review-id='{second}']")

            # The API documentation renders from this server's files alone (in the same
            # tab: a new page would start another renderer process).
            requested: list[str] = []
            docs = page
            docs.on("request", lambda req: requested.append(req.url))
            docs.goto(base + "/docs")
            docs.wait_for_selector(".opblock-summary-path", timeout=30_000)
            assert "/v1/decide" in docs.inner_text("#swagger-ui")
            assert requested and all(url.startswith(base + "/") for url in requested), [
                u for u in requested if not u.startswith(base + "/")
            ]
            # ReDoc too, under its Content-Security-Policy (no framing, own scripts only).
            docs.goto(base + "/redoc")
            docs.wait_for_selector('text="/v1/decide"', timeout=30_000)
        finally:
            browser.close()

        with httpx.Client(base_url=base, timeout=30, **PLAIN) as client:
            r1 = {"Authorization": "Bearer tok-r1"}
            shown = client.get(f"/v1/review/{first}", headers=r1).json()
            assert shown["resolution"]["reviewer"] == "reviewer0"
            assert shown["resolution"]["decision"] == "1"
            assert shown["resolution"]["note"] == "states the window; checked in the browser"
            still_open = client.get(f"/v1/review/{second}", headers=r1).json()
            assert still_open["status"] == "open"
            assert client.get(f"/v1/runs/{run['run_id']}/verify", headers=sub).json()["ok"]
    finally:
        pw.stop()
        stop_server(proc)
    assert (tmp_path / "review-queue.png").stat().st_size > 10_000
    assert (tmp_path / "review-case.png").stat().st_size > 10_000
