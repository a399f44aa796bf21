"""Options and agents that differ only by characters that show as nothing never look
alike on the review page, and the page still posts each option's own id.

A panel of ``approve`` and ``approve`` followed (or split) by a zero-width joiner, a bidi
mark, a combining grapheme joiner, a Mongolian vowel separator, a tag, a variation
selector or an Arabic letter mark showed nine options all reading "approve"; two agents
``alice`` and ``ali`` + ZWJ + ``ce`` both read "alice". Every such character is now shown
escaped (``appro\\u200dve``) in every short field, and the radio buttons post the ids as
they are: picking the suggestion resolves the case with it.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dissensus.store import Journal
from serve_helpers import auth, client_for, csrf_of, heap_frozen, login, settings

pytestmark = pytest.mark.anyio

SUGGESTED = "appro\u200dve"  # two agents chose it: the panel's plurality
LOOKALIKES = [
    "approve",
    SUGGESTED,
    "approve\u200e",
    "approve\u200f",
    "appro\u034fve",
    "approve\u180e",
    "approve\U000e0061",
    "approve\ufe0f",
    "appro\u061cve",
]
"""Options that all read "approve" where the characters that show as nothing show nothing."""
AGENTS = ["alice", "ali\u200dce"]
NOTHING = "[\u200d\u200e\u200f\u034f\u180e\U000e0061\ufe0f\u061c]"
"""The characters of :data:`LOOKALIKES` that show as nothing."""


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen() -> Iterator[None]:
    yield from heap_frozen()


def lookalike_panel(pid: str = "lookalike") -> dict[str, Any]:
    """The reviewer's panel, without the control characters its input now refuses: every
    decision of :data:`LOOKALIKES` (the suggestion twice) and one ``reject``."""
    decisions = [*LOOKALIKES, SUGGESTED, "reject"]
    names = [*AGENTS, *(f"agent-{i}" for i in range(len(decisions) - len(AGENTS)))]
    return {
        "id": pid,
        "meta": {"question": "Approve the wire transfer?"},
        "outputs": [
            {"agent": name, "decision": d, "reasoning": "looks fine", "family": f"f{i}"}
            for i, (name, d) in enumerate(zip(names, decisions, strict=True))
        ],
    }


def _text(fragment: str) -> str:
    """What a fragment of the page shows: its tags dropped, its entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment)).strip()


def _options(page: str) -> dict[str, str]:
    """Each option's id (the radio value, as the browser reads it) -> the option as its
    radio button shows it (the key and the "suggested" tag left out)."""
    found = re.findall(
        r'<input type="radio" name="decision" value="([^"]*)"[^>]*> (?:<kbd>\d</kbd> )?<bdi>([^<]*)</bdi>',
        page,
    )
    return {html.unescape(value): _text(label) for value, label in found}


async def test_lookalike_options_and_agents_are_shown_apart_and_post_their_ids(
    tmp_path: Path,
) -> None:
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (
            await client.post("/v1/decide", json=[lookalike_panel()], headers=auth("sub"))
        ).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        review_id = record["review_id"]
        await login(client, "rev")
        page = (await client.get(f"/review/case/{review_id}")).text

    options = _options(page)
    assert set(options) == {*LOOKALIKES, "reject"}  # every radio posts its option's own id
    # What a reader sees of each: the characters that show as nothing show nothing.
    seen = [re.sub(NOTHING, "", shown) for shown in options.values()]
    assert len(set(seen)) == len(seen), seen  # no two options read the same
    assert options[SUGGESTED] == "appro\\u200dve"
    assert options["approve\U000e0061"] == "approve\\U000e0061"
    assert options["approve"] == "approve"
    headings = [
        _text(h) for h in re.findall(r'<li class="option[^"]*"[^>]*>\s*<h3>(.*?)</h3>', page)
    ]
    assert len(headings) == len(LOOKALIKES) + 1 and len(set(headings)) == len(headings)
    assert "<bdi>alice</bdi>" in page and "<bdi>ali\\u200dce</bdi>" in page
    suggested = re.search(
        r'value="([^"]*)"[^>]*>[^<]*<kbd>\d</kbd> <bdi>[^<]*</bdi> <span class="tag">suggested',
        page,
    )
    assert suggested is not None and html.unescape(suggested.group(1)) == SUGGESTED
    # Nothing that shows as nothing is displayed anywhere but in the values sent back.
    displayed = re.sub(r'(value|data-option)="[^"]*"', "", page)
    assert not re.search(NOTHING, displayed)

    async with client_for(s) as client:
        await login(client, "rev")
        page = (await client.get(f"/review/case/{review_id}")).text
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page)
        assert sha is not None
        done = await client.post(
            f"/review/case/{review_id}/resolve",
            data={
                "decision": html.unescape(suggested.group(1)),
                "note": "",
                "csrf": csrf_of(page),
                "content_sha256": sha.group(1),
            },
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run["run_id"], "review/1/resolved")
        assert resolved is not None
        assert resolved.payload["decision"] == SUGGESTED  # the suggestion, not an override
        assert resolved.payload.get("outside_options") in (None, False)


async def test_decisions_that_differ_only_by_blank_ends_are_shown_apart(tmp_path: Path) -> None:
    """``yes`` and ``yes `` (a trailing space), a decision of two spaces and ``yes`` split
    by a no-break space read alike (or as nothing) where whitespace shows as nothing:
    each shows its blanks escaped (``yes\\x20``, ``\\x20\\x20``, ``yes\\xa0no``) in the
    options, the plain-words split and the positions, and each radio still posts its id."""
    decisions = ["yes", "yes", "yes ", "  ", "yes\u00a0no", "yes no"]
    row = {
        "id": "blank-ends",
        "meta": {"question": "Approve?"},
        "outputs": [
            {"agent": f"a{i}", "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, d in enumerate(decisions)
        ],
    }
    async with client_for(settings(tmp_path)) as client:
        run = (await client.post("/v1/decide", json=[row], headers=auth("sub"))).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        await login(client, "rev")
        page = (await client.get(f"/review/case/{record['review_id']}")).text
    options = _options(page)
    assert options == {
        "yes": "yes",
        "yes ": "yes\\x20",
        "  ": "\\x20\\x20",
        "yes\u00a0no": "yes\\xa0no",
        "yes no": "yes no",
    }
    split = _text(re.search(r'<ul class="plain" id="plain-reasons">(.*?)</ul>', page, re.S)[1])
    assert "1 chose yes\\x20" in split and "1 chose \\x20\\x20" in split, split
    assert "<bdi>yes </bdi>" not in page and "<bdi>  </bdi>" not in page


async def test_a_blank_option_picked_is_refused_saying_why(tmp_path: Path) -> None:
    """A decision of white space only (an agent's ``"  "``) is an option the page shows
    (``\\x20\\x20``) but no decision may be blank: picking it read "pick an option (1-9)
    ... first", though one was picked. The page now says what is wrong with it."""
    row = {
        "id": "blank",
        "meta": {"question": "Approve?"},
        "outputs": [
            {"agent": f"a{i}", "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, d in enumerate(["  ", "  ", "no"])
        ],
    }
    async with client_for(settings(tmp_path)) as client:
        run = (await client.post("/v1/decide", json=[row], headers=auth("sub"))).json()
        (record,) = run["records"]
        review_id = record["review_id"]
        await login(client, "rev")
        page = (await client.get(f"/review/case/{review_id}")).text
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page)
        assert sha is not None
        sent = {"decision": "  ", "note": "ok", "csrf": csrf_of(page), "content_sha256": sha[1]}
        refused = await client.post(f"/review/case/{review_id}/resolve", data=sent)
    assert refused.status_code == 422
    assert "white space only" in refused.text and "pick an option (1-9)" not in refused.text


async def test_a_question_keeps_its_no_break_spaces_where_options_escape_them(
    tmp_path: Path,
) -> None:
    """A French question (``remboursement\\u00a0?``) read ``remboursement\\xa0?`` in the
    queue and on the case page; only a decision, an option, an agent or a family shows
    its blanks escaped."""
    question = "Faut-il accorder le remboursement\u00a0?"
    row = {
        "id": "fr-1",
        "meta": {"question": question},
        "outputs": [
            {"agent": f"a{i}", "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, d in enumerate(["oui", "oui", "non\u00a0!", "non\u00a0!"])
        ],
    }
    async with client_for(settings(tmp_path)) as client:
        run = (await client.post("/v1/decide", json=[row], headers=auth("sub"))).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        await login(client, "rev")
        queue = html.unescape((await client.get("/review")).text)
        page = (await client.get(f"/review/case/{record['review_id']}")).text
    assert question in queue and "\\xa0" not in queue
    assert question in html.unescape(page)
    assert _options(page)["non\u00a0!"] == "non\\xa0!"


async def test_an_option_typed_as_the_page_shows_it_is_that_option(tmp_path: Path) -> None:
    """``yes\\x20`` typed into the "other answer" box, as the page shows the option
    ``yes ``, journalled a third answer ``yes\\x20`` outside the options; it is the option
    ``yes `` now."""
    row = {
        "id": "typed-shown",
        "meta": {"question": "Approve?"},
        "outputs": [
            {"agent": f"a{i}", "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, d in enumerate(["yes", "yes", "yes ", "yes "])
        ],
    }
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[row], headers=auth("sub"))).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        await login(client, "rev")
        page = (await client.get(f"/review/case/{record['review_id']}")).text
        assert _options(page)["yes "] == "yes\\x20"
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page)
        assert sha is not None
        done = await client.post(
            f"/review/case/{record['review_id']}/resolve",
            data={
                "other": "yes\\x20",
                "note": "typed as shown",
                "csrf": csrf_of(page),
                "content_sha256": sha.group(1),
            },
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run["run_id"], "review/1/resolved")
        assert resolved is not None
        assert resolved.payload["decision"] == "yes "
        assert resolved.payload.get("outside_options") in (None, False)


def _view(oid: str, label: str | None = None) -> Any:
    from dissensus.serve.case_view import OptionView

    return OptionView(id=oid, label=oid if label is None else label, key="", text="")


def test_a_text_that_is_one_options_id_and_anothers_shown_form_names_both() -> None:
    """The literal option ``yes\\x20`` beside the option ``yes `` (shown ``yes\\x20``):
    typing ``yes\\x20`` as read named the literal one silently; it names both now, and
    each option is still named on its own by a text that is only its own."""
    from dissensus.serve.case_view import options_named

    def named(text: str, views: list[Any]) -> list[str]:
        return options_named(text, views, typed=True)

    options = [_view("yes "), _view("yes\\x20"), _view("no")]
    assert named("yes\\x20", options) == ["yes\\x20", "yes "]
    assert named(" yes\\x20 ", options) == ["yes\\x20", "yes "]
    assert named("yes ", options) == ["yes "]
    assert named("yes\\\\x20", options) == ["yes\\x20"]
    assert named("no", options) == ["no"]
    # a label that is the text, beside an option shown as it
    labelled = [_view("1", "yes\\x20"), _view("yes ")]
    assert named("yes\\x20", labelled) == ["1", "yes "]
    # a plain id and a plain label reading alike stay the id's (nothing escaped)
    assert named("Paris", [_view("Paris"), _view("2", "Paris")]) == ["Paris"]
    # an id not typed (a pick, an API client's) is the option it is
    assert options_named("yes\\x20", options) == ["yes\\x20"]


async def test_typing_a_literal_option_that_reads_as_another_is_refused(tmp_path: Path) -> None:
    """The page's "other answer" ``yes\\x20`` beside options ``yes `` and the literal
    ``yes\\x20`` journalled the literal option; it is refused as naming both, and the
    literal option typed as the page shows it (``yes\\\\x20``) is that option."""
    row = {
        "id": "literal",
        "meta": {"question": "Approve?"},
        "outputs": [
            {"agent": f"a{i}", "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, d in enumerate(["yes ", "yes ", "yes\\x20", "no"])
        ],
    }
    s = settings(tmp_path)
    async with client_for(s) as client:
        run = (await client.post("/v1/decide", json=[row], headers=auth("sub"))).json()
        (record,) = run["records"]
        assert record["action"] == "escalate", record
        await login(client, "rev")
        rid = record["review_id"]
        page = (await client.get(f"/review/case/{rid}")).text
        assert _options(page)["yes "] == "yes\\x20"
        assert _options(page)["yes\\x20"] == "yes\\\\x20"
        sha = re.search(r'name="content_sha256" value="([0-9a-f]{64})"', page)
        assert sha is not None
        form = {"note": "typed as read", "csrf": csrf_of(page), "content_sha256": sha.group(1)}
        refused = await client.post(
            f"/review/case/{rid}/resolve", data={**form, "other": "yes\\x20"}
        )
        assert refused.status_code == 422, refused.status_code
        assert "names more than one option" in html.unescape(refused.text)
        assert "pick the option itself" in html.unescape(refused.text)
        with Journal(s.journal) as journal:
            assert journal.get(run["run_id"], "review/1/resolved") is None
        done = await client.post(
            f"/review/case/{rid}/resolve",
            data={**form, "csrf": csrf_of(refused.text), "other": "yes\\\\x20"},
        )
        assert done.status_code == 303, done.text
    with Journal(s.journal) as journal:
        resolved = journal.get(run["run_id"], "review/1/resolved")
        assert resolved is not None and resolved.payload["decision"] == "yes\\x20"
        assert resolved.payload.get("outside_options") in (None, False)


def _chosen(page: str) -> list[str]:
    """The "chosen by" lines of a page's options, as a reader reads them."""
    return [_text(c) for c in re.findall(r'<p class="chosen">(.*?)</p>', page, re.S)]


def _named_by(panel: dict[str, Any], agents: list[str]) -> dict[str, Any]:
    outputs = [{**o, "agent": a} for o, a in zip(panel["outputs"], agents, strict=True)]
    return {**panel, "outputs": outputs}


async def test_chosen_by_shows_agents_that_differ_in_white_space_apart(tmp_path: Path) -> None:
    """Agents ``bob`` and ``bob `` read alike in an option's "chosen by" line (the case
    page, the automatic decision's page, the blind audit's page); ``bob `` reads
    ``bob\\x20`` there now, as in the positions table."""
    from pipeline_cases import panel, write_policy
    from serve_helpers import decide_automatic

    options = [{"id": "1", "text": "Refunds within 30 days."}, {"id": "2", "text": "No."}]
    meta = {"question": "Which policy is stated?", "options": options}
    agreeing = panel("auto", ["1", "1", "1"], swap=["1", "1", "1"], meta=meta)
    agreeing = _named_by(agreeing, ["bob", "bob ", "al"])
    split = {
        "id": "split",
        "meta": {"question": "Approve?"},
        "outputs": [
            {"agent": a, "decision": d, "reasoning": "r", "family": f"f{i}"}
            for i, (a, d) in enumerate([("bob", "yes"), ("bob ", "yes"), ("al", "no")])
        ],
    }
    pages: dict[str, str] = {}
    for rate, kind in ((1.0, "audit"), (0.0, "auto")):
        where = tmp_path / kind
        where.mkdir()
        policy = write_policy(where / "p.yaml", {"acceptance": {"audit_rate": rate}})
        s = settings(where, policy=str(policy))
        async with client_for(s) as client:
            (ref,) = await decide_automatic(client, [agreeing])
            await login(client, "rev")
            qs = f"?run={ref.rsplit('.', 1)[0]}"
            got = await client.get(f"/review/{kind}/{ref}{qs}")
            assert got.status_code == 200, (kind, got.status_code)
            pages[kind] = got.text
            if kind == "auto":
                run = (await client.post("/v1/decide", json=[split], headers=auth("sub"))).json()
                (record,) = run["records"]
                assert record["action"] == "escalate", record
                pages["case"] = (await client.get(f"/review/case/{record['review_id']}")).text
    case, auto, audit = pages["case"], pages["auto"], pages["audit"]
    assert "chosen by bob, bob\\x20" in _chosen(case), _chosen(case)
    assert "chosen by bob, bob\\x20, al" in _chosen(auto), _chosen(auto)
    assert "chosen by bob, bob\\x20, al" in _chosen(audit), _chosen(audit)
