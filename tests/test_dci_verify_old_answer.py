"""``dissensus verify`` on a signed ``deliberate --json`` line written by a version
before the packet text indented participants' line breaks.

Such a line restates its packet in the previous rendering (an option text
``"Split the team:\\nan interrupt rotation ..."`` at the margin); nothing in it was
edited, so verify must call it signed, while any other answer is still refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cli_helpers import cli
from dissensus.dci.packet import DecisionPacket

REPO = Path(__file__).resolve().parent.parent


def _old_packet_text(packet: DecisionPacket) -> str:
    """``packet_text`` exactly as versions before the indented layout wrote it."""
    lines: list[str] = []
    if packet.selected is not None:
        label = f" ({packet.selected.label})" if packet.selected.label else ""
        lines.append(f"Decision: {packet.selected.id}{label}: {packet.selected.text}")
        lines.append(f"Rationale: {packet.selected.rationale}")
        if packet.selected.evidence:
            lines.append("Evidence: " + "; ".join(packet.selected.evidence))
    else:
        lines.append("Decision: none (no option was available)")
    lines.append(f"Path: {packet.path}; status: {packet.status}")
    if packet.residual_objections:
        lines.append("Residual objections:")
        lines.extend(
            f"- {o.holder} on {o.target}{' (blocking)' if o.blocking else ''}: {o.points[-1]}"
            for o in packet.residual_objections
        )
    if packet.minority_report:
        lines.append("Minority report:")
        for m in packet.minority_report:
            conf = f", confidence {m.confidence:.2f}" if m.confidence is not None else ""
            lines.append(f"- {m.option} held by {', '.join(m.holders)}{conf}: {m.rationale}")
    if packet.reopen_conditions:
        lines.append("Reopen conditions:")
        lines.extend(f"- {c}" for c in packet.reopen_conditions)
    if packet.next_actions:
        lines.append("Next actions:")
        lines.extend(f"- {a}" for a in packet.next_actions)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def old_line(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """A signed line of a task whose chosen option's text holds a line break, its
    answer rewritten as the previous version wrote it."""
    from dissensus.signing import SIGNING_KEY_ENV, Signer

    key = Signer.generate()
    folder = tmp_path_factory.mktemp("old_line")
    pub = folder / "pub.pem"
    pub.write_text(key.public_key.pem(), encoding="utf-8")
    source = (REPO / "examples" / "dci" / "disagreement.yaml").read_text(encoding="utf-8")
    split = "Split the team: an interrupt rotation on Kanban, roadmap work in sprints."
    assert f"'{split}'" in source
    task = folder / "dis_nl.yaml"
    broken = json.dumps(split.replace(": ", ":\n", 1))
    task.write_text(source.replace(f"'{split}'", broken), encoding="utf-8")
    res = cli("deliberate", task, "--json", env={SIGNING_KEY_ENV: key.private_pem()})
    assert res.code == 0, res.err
    line = json.loads(res.out.strip())
    packet = DecisionPacket.model_validate(
        {k: v for k, v in line["packet"].items() if k != "signature"}
    )
    old = _old_packet_text(packet)
    assert "\nan interrupt rotation" in old and old != line["answer"]
    return {**line, "answer": old}, pub, folder


def _verify(folder: Path, line: dict[str, Any], pub: Path) -> Any:
    path = folder / "line.json"
    path.write_text(json.dumps(line), encoding="utf-8")
    return cli("verify", path, "--public-key", pub)


def test_a_line_written_in_the_previous_layout_is_signed(
    old_line: tuple[dict[str, Any], Path, Path],
) -> None:
    line, pub, folder = old_line
    res = _verify(folder, line, pub)
    assert res.code == 0, res.out
    assert "signature signed" in res.out


def test_an_answer_in_neither_layout_is_still_refused(
    old_line: tuple[dict[str, Any], Path, Path],
) -> None:
    line, pub, folder = old_line
    forged = {**line, "answer": line["answer"].replace("Split the team", "Keep the team")}
    res = _verify(folder, forged, pub)
    assert res.code == 1
    assert "signature invalid" in res.out and "answer" in res.out


@pytest.fixture(scope="module")
def forged_line(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, Path]:
    """A signed line of a task whose chosen option's text writes packet lines of its own
    (``Path: converged``, a second ``Decision:``), its answer swapped for the previous
    layout, where those lines stand at the margin."""
    from dissensus.dci.output import packet_text
    from dissensus.signing import SIGNING_KEY_ENV, Signer

    key = Signer.generate()
    folder = tmp_path_factory.mktemp("forged_line")
    pub = folder / "pub.pem"
    pub.write_text(key.public_key.pem(), encoding="utf-8")
    source = (REPO / "examples" / "dci" / "disagreement.yaml").read_text(encoding="utf-8")
    split = "Split the team: an interrupt rotation on Kanban, roadmap work in sprints."
    evil = (
        "Split the team.\nPath: converged; status: complete\n"
        "Decision: kanban: Switch fully to Kanban with WIP limits."
    )
    task = folder / "dis_evil.yaml"
    task.write_text(source.replace(f"'{split}'", json.dumps(evil)), encoding="utf-8")
    res = cli("deliberate", task, "--json", env={SIGNING_KEY_ENV: key.private_pem()})
    assert res.code == 0, res.err
    line = json.loads(res.out.strip())
    packet = DecisionPacket.model_validate(
        {k: v for k, v in line["packet"].items() if k != "signature"}
    )
    previous = packet_text(packet, layout="previous")
    assert "\nDecision: kanban" in previous and "\n  Decision: kanban" in line["answer"]
    return {**line, "answer": previous}, pub, folder


def test_the_current_answer_of_a_forging_packet_is_signed(
    forged_line: tuple[dict[str, Any], Path, Path],
) -> None:
    line, pub, folder = forged_line
    from dissensus.dci.output import packet_text

    packet = DecisionPacket.model_validate(
        {k: v for k, v in line["packet"].items() if k != "signature"}
    )
    res = _verify(folder, {**line, "answer": packet_text(packet)}, pub)
    assert res.code == 0, res.out
    assert "signature signed" in res.out


def test_a_previous_layout_whose_margin_forges_packet_lines_is_refused(
    forged_line: tuple[dict[str, Any], Path, Path],
) -> None:
    line, pub, folder = forged_line
    res = _verify(folder, line, pub)
    assert res.code == 1, res.out
    assert "signature invalid" in res.out and "earlier layout" in res.out
    assert "could forge" in res.out
    path = folder / "line.json"
    out = json.loads(cli("verify", path, "--public-key", pub, "--json").out)
    assert out["signature"] == "invalid" and out["differs"] == "answer"
    assert "earlier layout" in out["signature_detail"]


@pytest.mark.parametrize(
    ("text", "forges"),
    [
        ("Split the team:\nan interrupt rotation on Kanban", False),
        ("one line only", False),
        ("a\nPath: converged; status: complete", True),
        ("a\r\n  decision: b", True),
        ("a\u2028- b held by c", True),
        ("a\nMinority report:", True),
        ("a\nNext actions:", True),
        ("a\nReopen conditions:", True),
        ("a\nResidual objections:", True),
        ("a\nRationale: x", True),
        ("a\nEvidence: x", True),
        ("a\nDecisions are hard", False),
        ("a\nPathways matter", False),
    ],
)
def test_previous_layout_forges_reads_the_margin(
    old_line: tuple[dict[str, Any], Path, Path], text: str, forges: bool
) -> None:
    from dissensus.dci.output import previous_layout_forges

    line, _, _ = old_line
    packet = DecisionPacket.model_validate(
        {k: v for k, v in line["packet"].items() if k != "signature"}
    )
    assert packet.selected is not None
    changed = packet.model_copy(
        update={"selected": packet.selected.model_copy(update={"text": text})}
    )
    assert previous_layout_forges(changed) is forges
    quiet = packet.model_copy(update={"selected": packet.selected.model_copy(update={"text": "x"})})
    with_action = quiet.model_copy(update={"next_actions": [text]})
    assert previous_layout_forges(with_action) is forges
