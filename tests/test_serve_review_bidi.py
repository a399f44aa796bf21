"""Bidi controls in agent text cannot reorder the review pages: every agent-supplied
string (agent names, option labels and ids, decisions, case ids, the question, the
reasoning) is set apart in an isolating element, HTML-escaped, and its bidi controls are
shown escaped (``\\u202e``), as the command line shows them: ``alpha`` and ``alpha`` +
U+202E would otherwise look the same."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from dissensus.serve.case_view import OptionView, plain_reasons
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, csrf_of, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

RLO, LRI = "\u202e", "\u2066"
BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
VOID = frozenset(
    [
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "source",
        "track",
        "wbr",
    ]
)
ISOLATING = frozenset({"bdi", "pre", "title", "option", "textarea"})


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


class _Texts(HTMLParser):
    """Every text node of a page with the open elements around it."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, str]] = []
        self.found: list[tuple[str, list[tuple[str, str]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in VOID:
            self.stack.append((tag, dict(attrs).get("class") or ""))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.found.append((data, list(self.stack)))


def _unisolated(html: str) -> list[str]:
    """The text nodes holding a bidi control outside any isolating element."""
    parser = _Texts()
    parser.feed(html)
    out = []
    for text, stack in parser.found:
        if not BIDI & set(text):
            continue
        isolated = any(tag in ISOLATING for tag, _ in stack) or any(
            "diff" in cls.split() for _, cls in stack
        )
        if not isolated:
            out.append(f"{text!r} in {'>'.join(t for t, _ in stack)}")
    return out


def _hostile(pid: str, decisions: list[str], **extra: Any) -> dict[str, Any]:
    data = panel(
        pid,
        decisions,
        meta={
            "question": f"Which is right? {RLO}evil text",
            "options": {"1": "yes", "2": "no"},
            "option_labels": {"1": f"Accept{RLO}<i>x</i>", "2": f"Reject{LRI}"},
        },
        reasoning=[f"I pick {RLO}yes"] * len(decisions),
        **extra,
    )
    for out, name in zip(data["outputs"], [f"alpha{RLO}", f"beta{LRI}", "gamma"], strict=False):
        out["agent"] = name
    return data


def test_plain_reasons_isolate_and_escape_the_labels() -> None:
    options = [
        OptionView("1", f"Accept{RLO}<i>", "1", "", ["a", "b"], True),
        OptionView("2", "Reject", "2", "", ["c"], False),
    ]
    (split,) = plain_reasons("", options, 0)
    assert split == (
        "The agents split: 2 chose <bdi>Accept\\u202e&lt;i&gt;</bdi>, 1 chose <bdi>Reject</bdi>."
    )
    (one,) = plain_reasons("", options[1:], 0)
    assert one == "Only one agent answered (<bdi>Reject</bdi>)."


async def test_bidi_controls_are_isolated_on_every_page(tmp_path: Path) -> None:
    policy = write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})
    s = settings(tmp_path, policy=str(policy))
    split = _hostile(f"rtl{RLO}case", ["1", "2", "1"], values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}])
    agree = _hostile(f"rtl{LRI}auto", ["1", "1", "1"], swap=["1", "1", "1"])
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[split, agree], headers=auth("sub"))).json()
        escalated, auto = run["records"]
        assert escalated["review_id"] and auto["auto"], run
        ref = f"{run['run_id']}.{auto['line']}"
        await login(client, "rev")

        pages = {
            "queue": await client.get("/review"),
            "case": await client.get(f"/review/case/{escalated['review_id']}"),
            "audits": await client.get("/review", params={"status": "audits"}),
            "audit": await client.get(f"/review/audit/{ref}"),
        }
        case = pages["case"].text
        assert "alpha\\u202e" in case and "Reject\\u2066" in case
        assert "<bdi>alpha\\u202e</bdi> → <bdi>Accept\\u202e&lt;i&gt;x&lt;/i&gt;</bdi>" in case
        assert "I pick \\u202eyes" in case  # in the reasoning too
        assert "2 chose <bdi>Accept" in case
        answered = await client.post(
            f"/review/audit/{ref}/answer",
            data={"decision": "2", "note": f"no{RLO}", "csrf": csrf_of(pages["audit"].text)},
        )
        assert answered.status_code == 303, answered.text[:2000]
        pages["auto"] = await client.get(f"/review/auto/{ref}")
        pages["automatic"] = await client.get(
            "/review", params={"status": "automatic", "run": run["run_id"]}
        )
        pages["audit-answered"] = await client.get(f"/review/audit/{ref}")
        for name, page in pages.items():
            assert page.status_code == 200, (name, page.text[:500])
            assert "<i>x</i>" not in page.text, name
            assert not _unisolated(page.text), (name, _unisolated(page.text))
        shown = "".join(page.text for page in pages.values())
        assert "alpha\\u202e" in pages["auto"].text and "no\\u202e" in pages["audit-answered"].text
        # Every bidi control is shown escaped; the only ones left are the values a form
        # posts back (an option id, a kept field), attributes that show nothing.
        text_only = re.sub(r'(value|data-[a-z-]+)="[^"]*"', "", shown)
        assert not BIDI & set(text_only), sorted(BIDI & set(text_only))
