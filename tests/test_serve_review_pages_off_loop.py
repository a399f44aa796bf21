"""The review pages of one case read the journal in worker threads, never on the loop.

A case page (``/review/case/{id}``), an automatic decision's page (``/review/auto/{ref}``)
and a blind audit's (``/review/audit/{ref}``), their ``j`` / ``k`` links, and what their
forms read besides the write (the checks before it, the page a refusal shows again, the
next case after it) read the journal on the event loop: a case page of 185K characters
held a ``/healthz`` sent with it for 0.05 s, and a journal that does not answer (a SQLite
write lock held by another process, a PostgreSQL behind a silent network) held
``/healthz``, the chat door and every page as long. Here the journal's read is made to block until the test lets it go:
``/healthz`` must be answered while it blocks, and the page must then be the one it was.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from pipeline_cases import panel, write_policy
from serve_helpers import (
    auth,
    client_for,
    csrf_of,
    decide_automatic,
    escalating,
    heap_frozen,
    login,
    settings,
)
from test_serve_journal_reads_off_loop import _blocking, healthz_while_blocked

pytestmark = pytest.mark.anyio

Send = Coroutine[Any, Any, httpx.Response]


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


@dataclass(frozen=True)
class Ids:
    """What a case's requests name: the escalated case, the automatic decision (with a
    blind audit open on it when the server audits every one), and the page's tokens."""

    case: str
    auto: str
    csrf: str
    sha: str


def _get(path: Callable[[Ids], str]) -> Callable[[httpx.AsyncClient, Ids], Send]:
    return lambda client, ids: client.get(path(ids))


def _post(path: Callable[[Ids], str], **fields: str) -> Callable[[httpx.AsyncClient, Ids], Send]:
    def send(client: httpx.AsyncClient, ids: Ids) -> Send:
        data = {"csrf": ids.csrf, "content_sha256": ids.sha, **fields}
        return client.post(path(ids), data={k: v.format(ids=ids) for k, v in data.items()})

    return send


@dataclass(frozen=True)
class Case:
    owner: str
    """What is made to block: ``"journal"`` or ``"desk"``."""
    method: str
    send: Callable[[httpx.AsyncClient, Ids], Send]
    status: int
    blind: bool = False
    """Whether the server audits every automatic decision blind."""
    held: str = ""
    """What another reviewer holds the claim on: ``"case"`` or ``"auto"`` (none)."""


CASES: dict[str, Case] = {
    "case page": Case("desk", "status", _get(lambda i: f"/review/case/{i.case}"), 200),
    "case page, j": Case("desk", "order", _get(lambda i: f"/review/case/{i.case}/next"), 303),
    "case page, k": Case("desk", "order", _get(lambda i: f"/review/case/{i.case}/previous"), 303),
    # After a resolve, the next open case of the queue.
    "resolve's next case": Case(
        "desk", "order", _post(lambda i: f"/review/case/{i.case}/resolve", decision="1"), 303
    ),
    # A refused form shows the case page again.
    "refused resolve's page": Case(
        "desk",
        "history",
        _post(lambda i: f"/review/case/{i.case}/resolve", decision="1", content_sha256="0"),
        409,
    ),
    "refused claim's page": Case(
        "desk", "history", _post(lambda i: f"/review/case/{i.case}/claim"), 409, held="case"
    ),
    "refused undo's page": Case(
        "desk", "history", _post(lambda i: "/review/undo", review_id="{ids.case}"), 409
    ),
    "automatic decision page": Case(
        "desk", "auto_case", _get(lambda i: f"/review/auto/{i.auto}"), 200
    ),
    "automatic decision page, its blind audit looked for": Case(
        "journal", "run", _get(lambda i: f"/review/auto/{i.auto}"), 200
    ),
    "automatic decision audited": Case(
        "journal",
        "run",
        _post(lambda i: f"/review/auto/{i.auto}/confirm", note="checked"),
        303,
    ),
    "automatic decision audited, the next one": Case(
        "desk",
        "auto_cases",
        _post(lambda i: f"/review/auto/{i.auto}/confirm", note="checked"),
        303,
    ),
    "automatic decision claimed": Case(
        "journal", "run", _post(lambda i: f"/review/auto/{i.auto}/claim"), 303
    ),
    "automatic decision claimed, checked": Case(
        "desk", "auto_case", _post(lambda i: f"/review/auto/{i.auto}/claim"), 303
    ),
    "automatic decision's refused claim's page": Case(
        "desk", "live_claim", _post(lambda i: f"/review/auto/{i.auto}/claim"), 409, held="auto"
    ),
    "automatic decision given up": Case(
        "journal", "run", _post(lambda i: f"/review/auto/{i.auto}/release"), 303
    ),
    "blind audit page": Case(
        "journal", "get", _get(lambda i: f"/review/audit/{i.auto}"), 200, blind=True
    ),
    "blind audit, j": Case(
        "journal",
        "events_of_type",
        _get(lambda i: f"/review/audit/{i.auto}/next"),
        303,
        blind=True,
    ),
    "blind audit, k": Case(
        "journal",
        "events_of_type",
        _get(lambda i: f"/review/audit/{i.auto}/previous"),
        303,
        blind=True,
    ),
    "blind audit answered": Case(
        "journal",
        "events_of_type",
        _post(lambda i: f"/review/audit/{i.auto}/answer", decision="1", note="checked"),
        303,
        blind=True,
    ),
    "blind audit claimed": Case(
        "journal", "run", _post(lambda i: f"/review/audit/{i.auto}/claim"), 303, blind=True
    ),
    "blind audit's refused claim's page": Case(
        "desk",
        "live_claim",
        _post(lambda i: f"/review/audit/{i.auto}/claim"),
        409,
        blind=True,
        held="auto",
    ),
    "blind audit given up": Case(
        "journal", "run", _post(lambda i: f"/review/audit/{i.auto}/release"), 303, blind=True
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_healthz_is_answered_while_a_review_page_reads_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    case = CASES[name]
    rate = 1.0 if case.blind else 0.0
    policy = write_policy(tmp_path / "audits.yaml", {"acceptance": {"audit_rate": rate}})
    async with client_for(settings(tmp_path, policy=str(policy))) as client:
        run = await client.post("/v1/decide", json=[escalating("p0")], headers=auth("sub"))
        review_id = f"{run.json()['run_id']}.1"
        [auto] = await decide_automatic(client, [panel("a", ["1", "1", "1"], swap=["1"] * 3)])
        if case.held:
            held = review_id if case.held == "case" else auto
            taken = await client.post(f"/v1/review/{held}/claim", headers=auth("rev2"))
            assert taken.status_code == 200, taken.text
        await login(client, "rev")
        shown = await client.get(f"/review/case/{review_id}")
        sha = re.search(r'name="content_sha256" value="([^"]+)"', shown.text)
        assert sha is not None, shown.text[:300]
        ids = Ids(review_id, auto, csrf_of(shown.text), sha.group(1))
        service = client._transport.app.state.service  # type: ignore[attr-defined]
        target = service.journal if case.owner == "journal" else service.desk
        gates = {gate: threading.Event() for gate in ("entered", "release", "left")}
        monkeypatch.setattr(target, case.method, _blocking(getattr(target, case.method), gates))
        answer = await healthz_while_blocked(
            client, case.send(client, ids), gates, f"the {name}'s read"
        )
        assert answer.status_code == case.status, answer.text[:300]
