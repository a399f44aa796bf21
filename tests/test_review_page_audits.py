"""Blind audits on the review page, and the acceptance monitor on the page and the API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from cli_helpers import cli
from dissensus.acceptance.monitor import confseq_available
from dissensus.pipeline.audit import monitor_status
from dissensus.pipeline.confirm import Confirmation, confirm
from dissensus.pipeline.records import CaseRecord
from dissensus.pipeline.review import final_records
from dissensus.serve import ServeSettings
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, heap_frozen, login, settings, write_tokens

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "examples" / "llmbar-swap.jsonl"
EVIL = "<script>alert('x')</script> & <b>bold</b>"
OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]
NEEDS_CONFSEQ = pytest.mark.skipif(
    not confseq_available(),
    reason="confseq is not installed (pip install 'dissensus[monitor]'; it builds against "
    "libboost-dev, see the Makefile)",
)


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


async def _login(client: httpx.AsyncClient, token: str) -> None:
    assert (await login(client, token)).status_code == 303


def _agreeing(pid: str) -> dict[str, Any]:
    return panel(
        pid,
        ["1", "1", "1"],
        swap=["1", "1", "1"],
        reasoning=[EVIL] * 3,
        meta={"question": EVIL, "gold": "secret-gold-label", "options": OPTIONS},
    )


async def test_a_blind_audit_hides_the_answer_and_journals_as_review_confirm(
    tmp_path: Path,
) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy))
    async with client_for(s) as client:
        run = (
            await client.post(
                "/v1/decide", json=[_agreeing("b1"), _agreeing("b2")], headers=auth("sub")
            )
        ).json()
        assert all(r["auto"] and r["decision"] == "1" for r in run["records"]), run
        first, second = (f"{run['run_id']}.{r['line']}" for r in run["records"])
        await _login(client, "rev")

        listed = await client.get("/review", params={"status": "audits"})
        assert f"/review/audit/{first}" in listed.text and f"/review/audit/{second}" in listed.text
        automatic = await client.get("/review", params={"status": "automatic"})
        assert f"/review/auto/{first}" not in automatic.text  # waits for its blind audit
        moved = await client.get(f"/review/auto/{first}")
        assert moved.status_code == 303 and moved.headers["location"] == f"/review/audit/{first}"

        page = await client.get(f"/review/audit/{first}")
        assert page.status_code == 200 and 'id="resolve-form"' in page.text
        text = page.text
        assert "secret-gold-label" not in text and "<script>alert" not in text
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in text
        # Neither the committed answer nor a suggestion, and no option picked in advance.
        assert 'id="committed"' not in text and 'class="tag"' not in text
        assert "checked" not in text and "No refunds." in text
        assert 'data-key="1"' in text and 'data-key="2"' in text
        csrf = csrf_of(text)

        with Journal(s.journal) as journal:
            before = sum(i.n_events for i in journal.runs())
        refused = {
            "no decision": {"note": "x", "csrf": csrf},
            "no note": {"decision": "2", "note": " ", "csrf": csrf},
            "both": {"decision": "2", "other": "3", "note": "x", "csrf": csrf},
        }
        for why, data in refused.items():
            got = await client.post(f"/review/audit/{first}/answer", data=data)
            assert got.status_code == 422, why
        forged = await client.post(
            f"/review/audit/{first}/answer", data={"decision": "2", "note": "x", "csrf": "no"}
        )
        assert forged.status_code == 403
        unblind = await client.post(
            f"/review/auto/{first}/confirm", data={"note": "looks right", "csrf": csrf}
        )
        assert unblind.status_code == 409 and f"/review/audit/{first}" in unblind.text
        with Journal(s.journal) as journal:
            assert sum(i.n_events for i in journal.runs()) == before

        done = await client.post(
            f"/review/audit/{first}/answer",
            data={"decision": "2", "note": "the <b>second</b>", "csrf": csrf, "reviewer": "forged"},
        )
        assert done.status_code == 303 and done.headers["location"] == f"/review/audit/{second}"
        answered = await client.get(f"/review/audit/{first}")
        assert 'id="audit-outcome">corrected<' in answered.text
        assert "the &lt;b&gt;second&lt;/b&gt;" in answered.text and 'id="resolve-form"' not in (
            answered.text
        )
        twice = await client.post(
            f"/review/audit/{first}/answer", data={"decision": "1", "note": "x", "csrf": csrf}
        )
        assert twice.status_code == 409 and "already audited by rev-name" in twice.text

        # Another answer than the options listed, on the last open audit: back to the list.
        last = await client.post(
            f"/review/audit/{second}/answer",
            data={"other": "1", "note": "checked blind", "csrf": csrf},
        )
        assert last.status_code == 303 and last.headers["location"] == "/review?status=audits"
        assert (
            "No blind audit is open here."
            in (await client.get("/review", params={"status": "audits"})).text
        )
        assert (await client.get("/review/audit/nope.1")).status_code == 404
        line = run["records"][0]["line"]
        assert (await client.get(f"/review/audit/{run['run_id']}.{line + 7}")).status_code == 404

    with Journal(s.journal) as journal:
        run_id = run["run_id"]
        lines = [r["line"] for r in run["records"]]
        got = [journal.get(run_id, f"confirm/{n}") for n in lines]
        assert all(e is not None and e.type == "review.confirmed" for e in got)
        # Journalled exactly as `dissensus review confirm` journals it.
        assert got[0] is not None and got[0].payload == Confirmation(
            case_ref=first,
            id="b1",
            committed="1",
            decision="2",
            agrees=False,
            note="the <b>second</b>",
            reviewer="rev-name",
        ).model_dump(mode="json")
        assert got[1] is not None and got[1].payload["agrees"] is True
        corrected = journal.get(run_id, f"case/{lines[0]}/resolved")
        assert corrected is not None and corrected.payload["decision"] == "2"
        assert journal.get(run_id, f"case/{lines[1]}/resolved") is None
        assert journal.verify(run_id).ok


@pytest.fixture(scope="module")
def suspended(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[CaseRecord]]:
    """A journal whose audits (every automatic commit, all answered wrong) suspend the file."""
    root = tmp_path_factory.mktemp("monitor")
    fast = {"audit_rate": 1.0}
    base: dict[str, Any] = {"reading": {"similarity": "tfidf"}, "acceptance": fast}
    plain = root / "plain.yaml"
    plain.write_text(yaml.safe_dump(base), encoding="utf-8")
    accept = root / "A.json"
    made = cli(
        "calibrate-acceptance", SRC, "--policy", plain, "--out", accept, "--target-precision", "0.8"
    )
    assert made.code == 0, made.out
    policy = root / "with-file.yaml"
    base["acceptance"] = {**fast, "model": "A.json"}
    policy.write_text(yaml.safe_dump(base), encoding="utf-8")
    cases = root / "cases.jsonl"
    cases.write_text("".join(SRC.read_text().splitlines(keepends=True)[:40]))
    journal = root / "j.sqlite"
    done = cli("decide", cases, "--policy", policy, "--journal", journal, "--run-id", "r1")
    assert done.code == 0, done.out
    with Journal(str(journal)) as jr:
        records = final_records(jr, "r1")
        for r in records:
            if r.auto and r.decision is not None:
                other = "B" if r.decision != "B" else "A"
                confirm(jr, f"r1.{r.line}", decision=other, note="the other one", reviewer="x")
    return journal, policy, records


@NEEDS_CONFSEQ
def test_the_monitor_is_one_account_on_the_cli_the_api_and_the_page(
    suspended: tuple[Path, Path, list[CaseRecord]], tmp_path: Path
) -> None:
    import asyncio

    journal, policy, records = suspended
    with Journal(str(journal)) as jr:
        rows = monitor_status(jr)
        (row,) = rows
        assert row.suspended and row.suspended_after is not None
        audits = sorted((e for e in jr.events("r1", type="review.confirmed")), key=lambda e: e.seq)
        assert row.suspended_at == audits[row.suspended_after - 1].at
    assert row.audits == sum(1 for r in records if r.auto) and row.correct == 0
    assert row.precision == 0.0 and row.upper < row.target == 0.8

    shown = cli("acceptance", "status", "--journal", journal, "--json")
    assert shown.code == 0
    cli_rows = json.loads(shown.out)["strata"]
    assert cli_rows == [r.model_dump(mode="json") for r in rows]

    async def ask() -> tuple[dict[str, Any], str]:
        s = ServeSettings(
            journal=str(journal),
            policy=str(policy),
            tokens=str(write_tokens(tmp_path / "tokens.txt")),
        )
        async with client_for(s) as client:
            doc = (await client.get("/v1/acceptance", headers=auth("sub"))).json()
            await _login(client, "rev")
            page = (await client.get("/review")).text
            return doc, page

    doc, page = asyncio.run(ask())
    assert doc["monitor"] == cli_rows and doc["monitor_error"] is None
    assert doc["monitor"][0]["acceptance_sha256"] == doc["file"]["sha256"]
    assert 'id="monitor-table"' in page and "(this server's)" in page
    assert f"after {row.suspended_after} audits, since" in page
    assert f'<time datetime="{row.suspended_at}">' in page
    assert "Automatic decisions are suspended" in page


async def test_without_audits_or_a_file_the_page_shows_no_monitor(tmp_path: Path) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        doc = (await client.get("/v1/acceptance", headers=auth("sub"))).json()
        assert doc["file"] is None and doc["monitor"] is None
        await _login(client, "rev")
        page = await client.get("/review")
        assert page.status_code == 200 and 'id="monitor"' not in page.text
