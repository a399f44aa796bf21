"""Shared helpers of the service tests: tokens, policies, panels, an in-process client."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx

from dissensus.serve import ServeSettings, create_app
from dissensus.serve.auth import hash_token
from gc_helpers import heap_frozen as heap_frozen
from pipeline_cases import panel, write_policy

TOKENS = {"sub": "submit", "rev": "review", "rev2": "review", "adm": "admin"}
"""Token value -> role; the token's name is ``<token>-name``."""


def write_tokens(path: Path) -> Path:
    lines = ["# test tokens"] + [
        f"{hash_token('tok-' + t)} {t}-name {role}" for t, role in TOKENS.items()
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer tok-{token}"}


def escalating(pid: str, text: str = "Option 1 is right.") -> dict[str, Any]:
    """A value conflict: escalated to a human under the test policy."""
    return panel(
        pid, ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}], reasoning=[text] * 3
    )


def settings(tmp: Path, **extra: Any) -> ServeSettings:
    policy = write_policy(tmp / "policy.yaml")
    data: dict[str, Any] = {
        "journal": str(tmp / "journal.sqlite"),
        "policy": str(policy),
        "tokens": str(write_tokens(tmp / "tokens.txt")),
    }
    data.update(extra)
    return ServeSettings(**data)


def client_for(s: ServeSettings, **kwargs: Any) -> httpx.AsyncClient:
    app = create_app(s, **kwargs)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def jsonl(rows: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a review page."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, html[:500]
    return found.group(1)


async def login(client: httpx.AsyncClient, token: str) -> httpx.Response:
    """Sign in to the review page with ``tok-<token>``; the sign-in's response."""
    form = await client.get("/review/login")
    assert form.status_code == 200
    return await client.post(
        "/review/login", data={"token": f"tok-{token}", "csrf": csrf_of(form.text)}
    )


def journal_events(path: str | Path) -> int:
    """Events in every run of the journal at ``path`` (to check that nothing was written)."""
    from dissensus.store import Journal

    with Journal(str(path)) as journal:
        return sum(i.n_events for i in journal.runs())


async def decide_automatic(client: httpx.AsyncClient, panels: list[dict[str, Any]]) -> list[str]:
    """``POST /v1/decide`` of panels that all commit automatically; their ``run.line`` refs."""
    run = (await client.post("/v1/decide", json=panels, headers=auth("sub"))).json()
    assert all(r["auto"] for r in run["records"]), run
    return [f"{run['run_id']}.{r['line']}" for r in run["records"]]
