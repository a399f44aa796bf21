"""``dissensus judge`` reads signed ``deliberate --json`` lines.

With ``DISSENSUS_SIGNING_KEY`` set the packet carries a ``signature``, and judge
rejected every such line (``field 'packet.signature': Extra inputs are not permitted``,
exit 3), though those lines are the JSONL judge reads. Judging sets the signature aside.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_helpers import cli

REPO = Path(__file__).resolve().parent.parent


def test_judge_scores_signed_and_unsigned_lines(tmp_path: Path) -> None:
    from dissensus.signing import SIGNING_KEY_ENV, Signer

    task = REPO / "examples" / "dci" / "hidden_profile.yaml"
    signed = cli(
        "deliberate", task, "--json", env={SIGNING_KEY_ENV: Signer.generate().private_pem()}
    )
    assert signed.code == 0, signed.err
    assert "signature" in json.loads(signed.out)["packet"]
    plain = cli("deliberate", task, "--method", "single", "--json")
    assert plain.code == 0, plain.err
    outs = tmp_path / "outs.jsonl"
    outs.write_text(signed.out.strip() + "\n" + plain.out.strip() + "\n", encoding="utf-8")
    res = cli("judge", outs, "--json")
    assert res.code == 0, res.err
    assert "rejected" not in res.err
    doc = json.loads(res.out)
    assert sorted(s["method"] for s in doc["scores"]) == ["dci", "single"]
