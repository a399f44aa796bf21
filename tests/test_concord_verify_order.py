"""CONCORD ``verify``: the candidates are listed as the protocol tabled them.

The earliest tabled candidate wins a tie, so the order of ``candidates`` is part of the
replay: the opening proposals in the order of their authors in ``covered``, then the
repairs round by round. A resealed certificate listing them otherwise is refused; and
the protocol never names a candidate ``C<k>`` when an earlier proposal's id reads as
that name (``Ｃ2`` and ``C2``).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.concord import TableAgent, negotiate_sync, verify
from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.concord.controls import same_name
from dissensus.concord.record import canonical_digest
from dissensus.types import JsonObject


def _reseal(doc: JsonObject) -> JsonObject:
    doc["digest"] = canonical_digest({k: v for k, v in doc.items() if k != "digest"})
    return doc


def _refused(doc: JsonObject, message: str) -> None:
    verdict = verify(_reseal(doc))
    assert not verdict.valid and verdict.violated == "selection", verdict
    assert verdict.message is not None and message in verdict.message, verdict


def _region() -> JsonObject:
    """The region example's three table agents: two opening proposals and a repair."""
    options = [
        Outcome(id="A", text="fail over to the standby region"),
        Outcome(id="B", text="restore the primary from the last snapshot"),
        Outcome(id="C", text="fail over reads only; queue writes"),
        Outcome(id="D", text="scale the standby region and replay the write log"),
    ]
    agents = [
        TableAgent("security", {"R0": 0, "I0": 10, "A": 6, "B": 9, "C": 7, "D": 8}),
        TableAgent("cost", {"R0": -100, "I0": 0, "A": -60, "B": -10, "C": -25, "D": -20}),
        TableAgent("latency", {"R0": 5000, "I0": 80, "A": 150, "B": 3000, "C": 400, "D": 900}),
    ]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.7, options=options)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    assert [(c["id"], c["author"], c["round"]) for c in doc["candidates"]] == [
        ("B", "security", 1),
        ("A", "latency", 1),
        ("C", "latency", 2),
    ]
    return doc


def test_candidates_listed_out_of_tabling_order_are_refused() -> None:
    doc = _region()
    doc["candidates"].reverse()  # the round-2 repair first
    _refused(doc, "order of their rounds")
    doc = _region()
    doc["candidates"][:2] = doc["candidates"][1::-1]  # latency's proposal before security's
    _refused(doc, "order of their authors")
    doc = _region()
    doc["covered"].reverse()  # the agents' order, which ties are broken by
    _refused(doc, "order of their authors")


class _Proposer(TableAgent):
    """Proposes a fixed outcome, scores every plan 5 of 10, never repairs."""

    def __init__(self, agent_id: str, proposal: Outcome) -> None:
        super().__init__(agent_id, {"R0": 0, "I0": 10})
        self._proposal = proposal

    async def propose(self, view: NegotiationView) -> Outcome | None:
        return self._proposal

    async def repair(self, view: NegotiationView) -> Outcome | None:
        return None

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> list[float]:
        return [{"R0": 0.0, "I0": 10.0}.get(o.id or "", 5.0) for o in outcomes]


def test_an_automatic_id_never_reads_as_a_proposed_one() -> None:
    agents = [
        _Proposer("a", Outcome(id="\uff232", text="plan x")),  # fullwidth "C2"
        _Proposer("b", Outcome(text="plan y")),  # no id: named C<k>
    ]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.9, rounds=1)
    ids = [c.id for c in cert.candidates]
    assert len({same_name(i) for i in ids}) == len(ids) == 2, ids
    assert verify(cert.model_dump(mode="json")).valid


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 4), seed=st.integers(0, 10_000), rounds=st.integers(0, 3))
def test_every_other_order_of_the_candidates_is_refused(n: int, seed: int, rounds: int) -> None:
    agents = [HashAgent(f"a{i}", seed + i) for i in range(n)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.95, rounds=rounds)
    doc = cert.model_dump(mode="json")
    assert verify(doc).valid
    order = list(range(len(doc["candidates"])))
    for perm in itertools.islice(itertools.permutations(order), 1, 25):
        tampered = copy.deepcopy(doc)
        tampered["candidates"] = [doc["candidates"][k] for k in perm]
        verdict = verify(_reseal(tampered))
        assert not verdict.valid, (perm, verdict)
