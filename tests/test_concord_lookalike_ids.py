"""CONCORD agent and option ids a reader cannot tell apart are refused, naming the field
(and, in a problem file, its line): the record, its shortfall and ``negotiate``'s tables
name agents by their ids, so ``x`` and ``x\\u200b`` (or fullwidth ``ｘ``, or ``é`` and
``e`` with a combining accent) would be two agents no one reading it can tell apart, and
an id that shows as nothing names no one."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.concord import TableAgent, negotiate_sync
from dissensus.concord.agent import Outcome
from dissensus.concord.problem import load_problem, parse_problem
from dissensus.errors import ConfigError

INVISIBLE = ["\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad", "\u202e", "\ufe0f", "\u2800"]


def _problem(first: str, second: str) -> dict[str, object]:
    return {
        "floor": 0.7,
        "anchors": {"rejected": {"id": "R0", "text": "no"}, "ideal": {"id": "I0", "text": "yes"}},
        "options": [{"id": "A", "text": "plan a"}],
        "agents": [
            {"id": first, "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 8}},
            {"id": second, "kind": "table", "scores": {"R0": 0, "I0": 10, "A": 6}},
        ],
    }


def _alike(name: str, how: str, mark: str, at: int) -> str:
    if how == "invisible":
        at %= len(name) + 1
        return name[:at] + mark + name[at:]
    if how == "fullwidth":
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in name)
    return unicodedata.normalize("NFD" if how == "nfd" else "NFC", name)


@given(
    st.text(alphabet="abcxyzé-_0123456789", min_size=1, max_size=8),
    st.sampled_from(["invisible", "fullwidth", "nfd"]),
    st.sampled_from(INVISIBLE),
    st.integers(0, 8),
)
def test_an_agent_id_that_reads_as_another_is_refused(
    name: str, how: str, mark: str, at: int
) -> None:
    other = _alike(name, how, mark, at)
    if other == name:  # nothing to fold (NFD of a name without an accent)
        return
    with pytest.raises(ConfigError) as caught:
        parse_problem(_problem(name, other))
    assert caught.value.field == "agents.1.id" and "reads as" in caught.value.message


@pytest.mark.parametrize("blank", [" ", "\u200b", "\u3000", "\u200b \ufeff", "\u2800"])
def test_an_agent_id_that_shows_as_nothing_is_refused(blank: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_problem(_problem("x", blank))
    assert caught.value.field == "agents.1.id" and "shows as nothing" in caught.value.message
    # the Python API refuses it too, before any agent is asked
    agents = [TableAgent("x", {"R0": 0, "I0": 10}), TableAgent(blank, {"R0": 0, "I0": 10})]
    with pytest.raises(ConfigError) as api:
        negotiate_sync(
            agents,
            rejected=Outcome(id="R0", text="no"),
            ideal=Outcome(id="I0", text="yes"),
            floor=0.5,
        )
    assert api.value.field == "agents.1.id"


def test_distinct_ids_and_other_scripts_still_negotiate() -> None:
    """Ids a reader tells apart pass; letters of two scripts that look alike (Latin x,
    Cyrillic х) are not folded by NFKC and are not refused."""
    for first, second in (("x", "y"), ("x", "\u0445"), ("x2", "x 2"), ("é", "e")):
        parse_problem(_problem(first, second))


def test_an_option_id_that_reads_as_another_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "floor: 0.7\n"
        "anchors:\n"
        '  rejected: {id: R0, text: "no"}\n'
        '  ideal: {id: I0, text: "yes"}\n'
        "options:\n"
        '  - {id: A, text: "plan a"}\n'
        '  - {id: "\\uff21", text: "plan b"}\n'
        "agents:\n"
        "  - {id: x, kind: table, scores: {R0: 0, I0: 10, A: 8}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_problem(path)
    assert (caught.value.field, caught.value.line) == ("options.1.id", 7)
    path.write_text(
        path.read_text(encoding="utf-8").replace("\\uff21", "R0\\u200b"), encoding="utf-8"
    )
    with pytest.raises(ConfigError) as anchor:
        load_problem(path)
    assert anchor.value.field == "options.1.id" and "anchors.rejected" in anchor.value.message


@pytest.mark.parametrize("alike", ["\uff21", "A\u200b", "A\u2800"])
def test_a_proposed_id_that_reads_as_a_tabled_one_is_not_a_second_plan_of_that_name(
    alike: str,
) -> None:
    """An id an agent proposes at run time that reads as a tabled candidate's (fullwidth
    ``Ａ``, ``A`` with an invisible mark) is that candidate's: the same text merges into
    it, another text is renamed ``C<k>``; no certificate names two plans alike."""
    from dissensus.concord import FunctionAgent
    from dissensus.concord.controls import same_name

    def score(outcome: Outcome, view: object) -> float:
        return {"R0": 0.0, "I0": 10.0}.get(outcome.id or "", 9.0)

    for text, merged in (("plan a", True), ("plan b", False)):
        proposal = Outcome(id=alike, text=text)
        agents = [
            TableAgent("x", {"R0": 0, "I0": 10, "A": 8}),
            FunctionAgent("y", score, propose=lambda view, p=proposal: p),
        ]
        cert = negotiate_sync(
            agents,
            rejected=Outcome(id="R0", text="no"),
            ideal=Outcome(id="I0", text="yes"),
            options=[Outcome(id="A", text="plan a")],
            floor=0.5,
        )
        ids = [c.id for c in cert.candidates]
        assert len({same_name(i) for i in ids}) == len(ids), ids
        assert alike not in ids
        assert (len(ids) == 1) is merged, ids
