"""The shared workspace: tensions are never dropped while open; compacted prompts stay small."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dissensus.dci.acts import ACTS, RawAct, check_act
from dissensus.dci.workspace import Workspace, render_view

SPEAKERS = ["p1", "p2", "p3"]

act_steps = st.lists(
    st.tuples(
        st.sampled_from(SPEAKERS),
        st.sampled_from(sorted(ACTS)),
        st.integers(0, 6),
        st.sampled_from(["o", "t", "a"]),
        st.booleans(),
        st.booleans(),
    ),
    max_size=40,
)


def _run(steps: list[tuple[str, str, int, str, bool, bool]]) -> tuple[Workspace, set[str]]:
    ws = Workspace(question="q?")
    ws.add_option("first option", proposer="task")
    ws.add_option("second option", proposer="task")
    resolved: set[str] = set()
    for speaker, act, num, prefix, blocking, resolves in steps:
        raw = RawAct(
            act=act,
            target=f"{prefix}{num}",
            text=f"{speaker} {act}",
            option="new option" if act in ("propose", "spawn") else None,
            blocking=blocking and act == "challenge",
            resolves=resolves,
            scores={o: 0.5 for o in ws.live_options()} if act == "recommend" else None,
        )
        if check_act(
            raw,
            allowed=frozenset(ACTS),
            known_targets=ws.known_targets(),
            live_options=frozenset(ws.live_options()),
        ):
            continue
        before = {t.id: t.status for t in ws.tensions.values()}
        record = ws.apply(speaker, raw, stage="s", round_=1)
        for tid, status in before.items():
            now = ws.tensions[tid]
            if status == "open" and now.status == "resolved":
                # Only an update/bridge with resolves=true on that tension, by its holder if blocking.
                assert record.target == tid and raw.resolves and act in ("update", "bridge")
                assert not now.blocking or speaker == now.holder
                resolved.add(tid)
    return ws, resolved


@given(act_steps)
def test_no_open_tension_is_ever_dropped(
    steps: list[tuple[str, str, int, str, bool, bool]],
) -> None:
    ws, resolved = _run(steps)
    opened = {t.id for t in ws.open_tensions()}
    assert opened == set(ws.tensions) - resolved
    view = render_view(ws, participants=len(SPEAKERS))
    for tid in opened:
        assert f"- {tid} " in view
    # Every challenge and ask left a trace in some tension.
    points = sum(len(t.points) for t in ws.tensions.values())
    assert points == sum(1 for a in ws.acts if a.act in ("challenge", "ask"))


def test_repeated_challenge_by_the_same_holder_joins_its_open_tension() -> None:
    ws = Workspace(question="q?")
    ws.add_option("x", proposer="task")
    ws.apply("p1", RawAct(act="challenge", target="o1", text="first"), stage="s", round_=1)
    ws.apply(
        "p1", RawAct(act="challenge", target="o1", text="again", blocking=True), stage="s", round_=2
    )
    assert list(ws.tensions) == ["t1"]
    assert ws.tensions["t1"].points == ["first", "again"] and ws.tensions["t1"].blocking
    # Somebody else cannot settle a blocking tension; its holder can.
    ws.apply(
        "p2", RawAct(act="bridge", target="t1", text="settled?", resolves=True), stage="s", round_=2
    )
    assert ws.tensions["t1"].status == "open"
    ws.apply(
        "p1", RawAct(act="update", target="t1", text="yes", resolves=True), stage="s", round_=2
    )
    assert ws.tensions["t1"].status == "resolved"


def _simulate(participants: int, rounds: int, *, full: bool) -> int:
    """Largest view a participant sees after ``rounds`` of challenge/revise/score acts."""
    long = "word " * 80
    ws = Workspace(question="Which option?")
    ws.apply("p0", RawAct(act="frame", target="a0", text=long), stage="frame", round_=0)
    for i in range(participants):
        ws.apply(
            f"p{i}",
            RawAct(act="propose", target="a0", text=long, option=f"option {i} {long}"),
            stage="propose",
            round_=0,
        )
    largest = 0
    live = ws.live_options()[:5]
    for r in range(1, rounds + 1):
        for i in range(participants):
            target = live[(i + r) % len(live)]
            ws.apply(
                f"p{i}",
                RawAct(act="challenge", target=target, text=long),
                stage="challenge",
                round_=r,
            )
        for i in range(participants):
            ws.apply(
                f"p{i}",
                RawAct(act="update", target=live[i % len(live)], text=long),
                stage="revise",
                round_=r,
            )
        for i in range(participants):
            largest = max(
                largest,
                len(
                    render_view(ws, participants=participants, viewer=f"p{i}", full_transcript=full)
                ),
            )
    return largest


def test_compacted_view_is_bounded_in_rounds_and_linear_in_participants() -> None:
    by_rounds = [_simulate(4, r, full=False) for r in (1, 8, 12)]
    full_by_rounds = [_simulate(4, r, full=True) for r in (1, 8, 12)]
    # Tensions of a holder on a target merge, so once every (holder, target) pair exists the
    # compacted view stops growing; the transcript keeps growing with every round.
    assert by_rounds[2] <= by_rounds[1] * 1.05
    assert (
        full_by_rounds[1] >= full_by_rounds[0] * 3 and full_by_rounds[2] > full_by_rounds[1] * 1.2
    )
    assert by_rounds[2] < full_by_rounds[2] / 5
    by_n = {n: _simulate(n, 2, full=False) for n in (2, 4, 8, 16)}
    per_extra = [(by_n[b] - by_n[a]) / (b - a) for a, b in ((2, 4), (4, 8), (8, 16))]
    # Linear: the cost of one more participant does not itself grow with the number of participants.
    assert max(per_extra) <= 1.5 * min(per_extra)
