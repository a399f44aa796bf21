"""What a reviewer sees of an escalated chat case: the question and the conversation.

The chat door records the request's messages as ``meta.messages`` (no ``meta.question``);
the review page, ``dissensus review show``, the queue's text search, the integrations'
review request and the audit pages show the last ``user`` message as the question and,
when there are several messages, every one of them, role by role, in order, verbatim.
Panels without messages (older journals, ``decide`` input) are shown as before.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat_helpers import escalated_chat_case
from cli_helpers import cli
from dissensus.cases import CaseMessage, CaseSpec, asked_question, conversation
from dissensus.integrations._review import review_request
from dissensus.pipeline.review import find_item
from dissensus.serve.case_view import asked_view
from dissensus.store import Journal
from pipeline_cases import panel, write_policy
from serve_helpers import auth, client_for, escalating, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

SYSTEM = "You are <b>terse</b> & exact.\nAnswer with a number."
QUESTION_PARTS = ["Tom has 3 apples and buys 4 more.", "How many <script>x()</script>?\x1b[31m"]
QUESTION = "\n".join(QUESTION_PARTS)
SHOWN = QUESTION.replace("\x1b", "\\x1b")
"""The question as a page shows it: the escape character written as the command line writes it."""
LONG = "word " * 2_000 + "END-OF-LONG"
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "Count my pears first."},
    {"role": "assistant", "content": LONG},
    {"role": "user", "content": [{"type": "text", "text": t} for t in QUESTION_PARTS]},
]


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


async def _login(client: httpx.AsyncClient, token: str = "rev") -> None:
    assert (await login(client, token)).status_code == 303


def _pre(page: str, element_id: str) -> str:
    found = re.search(rf'<pre class="verbatim" id="{element_id}">(.*?)</pre>', page, re.S)
    assert found, page[:2000]
    return html.unescape(found.group(1))


def _conversation(page: str) -> list[tuple[str, str]]:
    """``(role, text)`` of each message of the page's conversation, in order."""
    found = re.search(r'<ol class="conversation" id="conversation"[^>]*>(.*?)</ol>', page, re.S)
    assert found, page[:2000]
    items = re.findall(
        r'<li class="message" data-role="([^"]*)">.*?<pre class="verbatim">(.*?)</pre>',
        found.group(1),
        re.S,
    )
    return [(html.unescape(r), html.unescape(t)) for r, t in items]


# -- the case's question and conversation, parsed once --------------------------------------


def test_the_question_is_the_last_user_message_and_meta_question_still_wins() -> None:
    meta = {"source": "chat", "messages": MESSAGES}
    assert asked_question(meta) == QUESTION
    assert [(m.role, m.text) for m in conversation(meta)] == [
        ("system", SYSTEM),
        ("user", "Count my pears first."),
        ("assistant", LONG),
        ("user", QUESTION),
    ]
    # The case's own question (re-ask prompt, acceptance features) is not changed.
    assert CaseSpec.from_meta(meta).question is None
    assert asked_question({**meta, "question": "Which?"}) == "Which?"
    assert asked_question({"input": "In?"}) == "In?"
    # A trailing assistant message: still the last *user* message.
    trailing = {"messages": [*MESSAGES, {"role": "assistant", "content": "7"}]}
    assert asked_question(trailing) == QUESTION
    assert asked_question({"messages": [{"role": "system", "content": "s"}]}) is None
    assert asked_question({"messages": [{"role": "user", "content": "  "}]}) is None
    assert asked_question(None) is None and conversation(None) == ()


def test_odd_messages_are_left_out_never_an_error() -> None:
    meta = {
        "messages": [
            "not a message",
            {"content": "no role"},
            {"role": "user", "content": 7},
            {"role": "assistant", "content": None},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, "x"]},
        ]
    }
    assert conversation(meta) == (
        CaseMessage(role="assistant", text=""),
        CaseMessage(role="user", text="a"),
    )
    assert asked_question(meta) == "a"
    assert conversation({"messages": "a string"}) == () and asked_question({"messages": 3}) is None


def test_asked_view_lists_several_messages_and_marks_the_question() -> None:
    view = asked_view({"meta": {"messages": MESSAGES}})
    assert view.question == QUESTION and len(view.conversation) == 4 and view.question_at == 3
    one = asked_view({"meta": {"messages": MESSAGES[-1:]}})
    assert one.question == QUESTION and one.conversation == () and one.question_at is None
    old = asked_view({"meta": {"question": "Which refund?"}})
    assert old.question == "Which refund?" and old.conversation == ()
    # A question of its own and a conversation: nothing in the conversation is marked.
    both = asked_view({"meta": {"question": "Which?", "messages": MESSAGES}})
    assert both.question == "Which?" and both.question_at is None


# -- the door's escalation, on the page, the CLI and the API ------------------------------------


@pytest.fixture
def chat_case(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    monkeypatch.delenv("DISSENSUS_MODEL", raising=False)  # nothing to re-ask with
    path = tmp_path / "journal.sqlite"
    return path, escalated_chat_case(path, MESSAGES)


async def test_the_case_page_shows_the_question_and_the_conversation(
    tmp_path: Path, chat_case: tuple[Path, str]
) -> None:
    journal, review_id = chat_case
    async with client_for(settings(tmp_path, journal=str(journal))) as client:
        await _login(client)
        page = (await client.get(f"/review/case/{review_id}")).text
    assert "(no question in the panel)" not in page
    assert _pre(page, "question") == SHOWN
    assert _conversation(page) == [
        ("system", SYSTEM),
        ("user", "Count my pears first."),
        ("assistant", LONG),
        ("user", SHOWN),
    ]
    # Verbatim and escaped: never markup.
    assert "<script>x()" not in page and "<b>terse</b>" not in page
    assert "&lt;script&gt;x()&lt;/script&gt;" in page and "&lt;b&gt;terse&lt;/b&gt;" in page
    # Bounded as agents' reasoning is: wrapped blocks that fold; the question's own
    # message starts folded (it is shown just above).
    assert (
        page.count('<details open><summary><bdi>system</bdi></summary><pre class="verbatim">') == 1
    )
    assert "<details><summary><bdi>user</bdi> <small>(the question, shown above)</small>" in page
    # Why it needs a person: not asked again (no recorded re-ask, no model), not "did
    # not settle it".
    plain = re.search(r'<ul class="plain" id="plain-reasons">(.*?)</ul>', page, re.S)
    assert plain is not None
    assert "no recorded re-ask in the panel and no model configured" in page
    assert "The agents were not asked again" in plain.group(1)
    assert "did not settle it" not in plain.group(1)


async def test_the_queue_searches_and_shows_the_chat_question(
    tmp_path: Path, chat_case: tuple[Path, str]
) -> None:
    journal, review_id = chat_case
    async with client_for(settings(tmp_path, journal=str(journal))) as client:
        await client.post("/v1/decide", json=[escalating("other")], headers=auth("sub"))
        await _login(client)
        found = await client.get("/review", params={"q": "buys 4 more"})
        assert f"/review/case/{review_id}" in found.text and "Tom has 3 apples" in found.text
        assert found.text.count('class="case-link"') == 1
        missed = await client.get("/review", params={"q": "no such words"})
        assert f"/review/case/{review_id}" not in missed.text
        # The API gives the item as review show --json does: the whole conversation.
        item = (await client.get(f"/v1/review/{review_id}", headers=auth("rev"))).json()
    recorded = item["item"]["panel"]["meta"]["messages"]
    assert [m["role"] for m in recorded] == ["system", "user", "assistant", "user"]
    assert asked_question(item["item"]["panel"]["meta"]) == QUESTION


def test_review_show_prints_the_question_and_the_conversation(
    chat_case: tuple[Path, str],
) -> None:
    journal, review_id = chat_case
    result = cli("review", "show", review_id, "--journal", str(journal))
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    question = next(line for line in lines if line.startswith("question: "))
    # Control characters escaped, as every agent text is; whitespace flattened.
    assert question == "question: " + " ".join(QUESTION.split()).replace("\x1b", "\\x1b")
    start = lines.index("conversation (4 messages, in order):")
    shown = lines[start + 1 : start + 5]
    assert [line.split(":", 1)[0] for line in shown] == [
        "  system",
        "  user",
        "  assistant",
        "  user",
    ]
    assert shown[0] == "  system: You are <b>terse</b> & exact. Answer with a number."
    assert shown[3] == question.replace("question:", "  user:", 1)
    # A long message is an excerpt, bounded like other long texts.
    assert shown[2].endswith("...") and len(shown[2]) <= len("  assistant: ") + 400
    assert "\x1b" not in result.out


def test_the_integrations_review_request_asks_the_chat_question(
    chat_case: tuple[Path, str],
) -> None:
    journal, review_id = chat_case
    with Journal(str(journal)) as store:
        request = review_request(find_item(store, review_id))
    assert request.question == QUESTION


# -- panels without messages are shown as before ------------------------------------------------


async def test_a_case_without_messages_is_shown_as_before(tmp_path: Path) -> None:
    s = settings(tmp_path)
    asked = panel(
        "old",
        ["1", "2", "1"],
        values=[{"a": 1.0}, {"b": 1.0}, {"a": 0.5}],
        meta={"question": "Which refund window?"},
    )
    bare = escalating("bare")
    del bare["meta"]["question"]
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[asked, bare], headers=auth("sub"))).json()
        first, second = (r["review_id"] for r in run["records"])
        await _login(client)
        page = (await client.get(f"/review/case/{first}")).text
        assert _pre(page, "question") == "Which refund window?"
        assert 'id="conversation"' not in page
        page = (await client.get(f"/review/case/{second}")).text
        assert "(no question in the panel)" in page and 'id="conversation"' not in page
    result = cli("review", "show", first, "--journal", s.journal)
    assert "question: Which refund window?" in result.out
    assert "conversation (" not in result.out


# -- the audit pages ----------------------------------------------------------------------------

OPTIONS = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No refunds."}]


def _agreeing(pid: str) -> dict[str, Any]:
    """A panel committed automatically, asked as a chat conversation (no ``meta.question``)."""
    made = panel(
        pid,
        ["1", "1", "1"],
        swap=["1", "1", "1"],
        meta={"messages": MESSAGES[:2] + MESSAGES[-1:], "options": OPTIONS},
    )
    del made["meta"]["question"]
    return made


async def test_blind_audit_and_automatic_decision_pages_show_the_conversation(
    tmp_path: Path,
) -> None:
    blind = settings(
        tmp_path,
        policy=str(write_policy(tmp_path / "audit.yaml", {"acceptance": {"audit_rate": 1.0}})),
    )
    async with client_for(blind) as client:
        run = (await client.post("/v1/decide", json=[_agreeing("b1")], headers=auth("sub"))).json()
        ref = f"{run['run_id']}.{run['records'][0]['line']}"
        await _login(client)
        page = (await client.get(f"/review/audit/{ref}")).text
        listed = (await client.get("/review", params={"status": "audits", "q": "buys 4"})).text
        audit = (await client.get(f"/v1/audits/{ref}", headers=auth("rev"))).json()
    assert _pre(page, "question") == SHOWN
    assert [r for r, _ in _conversation(page)] == ["system", "user", "user"]
    assert f"/review/audit/{ref}" in listed
    assert audit["item"]["panel"]["meta"]["messages"][0]["content"] == SYSTEM
    result = cli("review", "show", ref, "--journal", blind.journal)
    assert "conversation (3 messages, in order):" in result.out

    other = tmp_path / "auto"
    other.mkdir()
    auto = settings(
        other,
        policy=str(write_policy(other / "auto.yaml", {"acceptance": {"audit_rate": 0.0}})),
    )
    async with client_for(auto) as client:
        run = (await client.post("/v1/decide", json=[_agreeing("a1")], headers=auth("sub"))).json()
        ref = f"{run['run_id']}.{run['records'][0]['line']}"
        await _login(client)
        page = (await client.get(f"/review/auto/{ref}")).text
        listed = (await client.get("/review", params={"status": "automatic", "q": "buys 4"})).text
    assert _pre(page, "question") == SHOWN
    assert [r for r, _ in _conversation(page)] == ["system", "user", "user"]
    assert f"/review/auto/{ref}" in listed
