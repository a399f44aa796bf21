"""`verify` accepts every produced certificate and rejects every perturbed one."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from concord_helpers import IDEAL, REJECTED, HashAgent
from dissensus.concord import negotiate_sync, verify


@st.composite
def certificates(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 4))
    seed = draw(st.integers(0, 5000))
    agents = [
        HashAgent(
            f"a{i}",
            seed,
            *draw(st.sampled_from([(0.0, 10.0), (50.0, -50.0)])),
            bias=draw(st.sampled_from([0.0, 0.5])),
        )
        for i in range(n)
    ]
    cert = negotiate_sync(
        agents,
        rejected=REJECTED,
        ideal=IDEAL,
        floor=draw(st.sampled_from([0.4, 0.6, 0.7, 0.9])),
        margin=draw(st.sampled_from([0.0, 0.01, 0.1])),
        rounds=draw(st.integers(0, 5)),
    )
    return cert.model_dump(mode="json")


@given(certificates(), st.data())
def test_any_altered_score_is_rejected(cert: dict[str, Any], data: st.DataObject) -> None:
    assert verify(cert).valid
    bad = copy.deepcopy(cert)
    cand = data.draw(st.sampled_from(bad["candidates"]))
    agent = data.draw(st.sampled_from(sorted(cand["scores"])))
    ev = cand["scores"][agent]
    field = data.draw(st.sampled_from(["raw", "calibrated"]))
    delta = data.draw(st.sampled_from([0.001, -0.001, 0.25, -0.25]))
    if ev[field] is None:
        ev["raw"] = 1.0
    else:
        ev[field] = ev[field] + delta
    verdict = verify(bad)
    assert not verdict.valid
    assert verdict.violated is not None


@given(certificates(), st.sampled_from([-0.1, -0.01, 0.01, 0.1, 0.3]))
def test_an_altered_floor_is_rejected(cert: dict[str, Any], delta: float) -> None:
    bad = copy.deepcopy(cert)
    bad["floor"] = round(bad["floor"] + delta, 6)
    assert not verify(bad).valid


@given(certificates(), st.data())
def test_an_altered_candidate_is_rejected(cert: dict[str, Any], data: st.DataObject) -> None:
    bad = copy.deepcopy(cert)
    how = data.draw(st.sampled_from(["text", "drop", "author", "id"]))
    i = data.draw(st.integers(0, len(bad["candidates"]) - 1))
    if how == "text":
        bad["candidates"][i]["text"] += " (edited)"
    elif how == "drop":
        del bad["candidates"][i]
    elif how == "author":
        bad["candidates"][i]["author"] = "someone else"
    else:
        bad["candidates"][i]["id"] = "X" + bad["candidates"][i]["id"]
    assert not verify(bad).valid


def test_the_first_violated_property_is_named() -> None:
    agents = [HashAgent(f"a{i}", 11, bias=0.5) for i in range(3)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.9, rounds=3).model_dump(
        mode="json"
    )
    assert verify(cert).valid
    bad = copy.deepcopy(cert)
    first = bad["candidates"][0]["scores"]["a0"]
    first["raw"] = (first["raw"] or 0) + 0.5
    assert verify(bad).violated == "calibration"
    bad = copy.deepcopy(cert)
    bad["spent"]["evaluations"] += 1
    assert verify(bad).violated == "bound"
    bad = copy.deepcopy(cert)
    bad["status"] = "certified" if cert["status"] == "best_effort" else "best_effort"
    assert verify(bad).violated == "status"
    bad = copy.deepcopy(cert)
    bad["digest"] = "sha256:" + "0" * 64
    assert verify(bad).violated == "digest"
    bad = copy.deepcopy(cert)
    bad["extra"] = 1
    assert verify(bad).violated == "schema"


def _resealed(cert: dict[str, Any]) -> dict[str, Any]:
    """The certificate with its digest recomputed, as a forger would."""
    from dissensus.concord.record import canonical_digest

    body = {k: v for k, v in cert.items() if k != "digest"}
    return {**body, "digest": canonical_digest(body)}


@given(certificates(), st.data())
def test_a_resealed_edit_of_a_derived_field_is_rejected(
    cert: dict[str, Any], data: st.DataObject
) -> None:
    assert verify(_resealed(cert)).valid
    bad = copy.deepcopy(cert)
    how = data.draw(st.sampled_from(["improvement", "author"]))
    if how == "improvement":
        step = data.draw(st.sampled_from(bad["trajectory"]))
        step["improvement"] = (step["improvement"] or 0.0) + 0.125
    else:
        cand = data.draw(st.sampled_from(bad["candidates"]))
        cand["author"] = "someone else"
    verdict = verify(_resealed(bad))
    assert not verdict.valid
    assert verdict.violated in {"selection", "margin"}


def test_two_opening_proposals_by_one_agent_are_rejected() -> None:
    agents = [HashAgent(f"a{i}", 11, bias=0.5) for i in range(3)]
    cert = negotiate_sync(agents, rejected=REJECTED, ideal=IDEAL, floor=0.9, rounds=2).model_dump(
        mode="json"
    )
    opening = [c for c in cert["candidates"] if c["round"] == 1]
    assert len(opening) >= 2
    bad = copy.deepcopy(cert)
    second = next(c for c in bad["candidates"] if c["id"] == opening[1]["id"])
    second["author"] = opening[0]["author"]
    verdict = verify(_resealed(bad))
    assert verdict.violated == "selection"


def test_resealed_inconsistent_controls_and_spend_are_rejected() -> None:
    agents = [HashAgent(f"a{i}", 7, bias=0.5) for i in range(3)]
    cert = negotiate_sync(
        agents,
        rejected=REJECTED,
        ideal=IDEAL,
        floor=0.9,
        rounds=2,
        edges=[("a0", "a1"), ("a1", "a2")],
    ).model_dump(mode="json")
    assert verify(_resealed(cert)).valid
    edits: list[tuple[str, str]] = [
        ("edges_dropped", "covered"),
        ("edge_arity", "covered"),
        ("opening_bottleneck", "selection"),
        ("anchor_fault", "calibration"),
        ("negative_spend", "bound"),
    ]
    for how, prop in edits:
        bad = copy.deepcopy(cert)
        if how == "edges_dropped":
            bad["budget"]["edges"] = None
        elif how == "edge_arity":
            bad["budget"]["edges"][0] = ["a0"]
        elif how == "opening_bottleneck":
            bad["trajectory"][0]["bottleneck"] = "a0"
        elif how == "anchor_fault":
            bad["scores"]["a0"]["fault"] = "invented"
        else:
            bad["spent"]["messages"] = -1
        verdict = verify(_resealed(bad))
        assert verdict.violated == prop, (how, verdict)
