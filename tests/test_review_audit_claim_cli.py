"""``review claim`` of a blind audit item claims the audit, as the service does: ``review
confirm`` by anyone else is refused until the claim expires or is released.

Before, ``review claim RUN.LINE`` of a blind audit answered that it is no review item,
so an auditor on the command line could not hold an audit, though ``review confirm``
honours the claims the service takes on them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from cli_helpers import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture(scope="module")
def audited_journal(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A journal of the LLMBar example run (blind audits among its automatic decisions)
    and the review id of its first open audit."""
    tmp = tmp_path_factory.mktemp("audits")
    journal = tmp / "j.sqlite"
    res = cli(
        "decide", EXAMPLES / "llmbar-swap.jsonl", "--policy", EXAMPLES / "llmbar-policy.yaml",
        "--journal", journal, "--run-id", "A", "--output", tmp / "out.jsonl",
    )  # fmt: skip
    assert res.code == 0, res.err
    listed = cli("review", "audits", "--journal", journal, "--json")
    audits = json.loads(listed.out)["audits"]
    assert audits, listed.out
    return journal, str(audits[0]["review_id"])


def test_an_audit_claimed_on_the_command_line_is_honoured(
    audited_journal: tuple[Path, str], tmp_path: Path
) -> None:
    source, ref = audited_journal
    journal = tmp_path / "j.sqlite"
    shutil.copy(source, journal)
    on = ("--journal", journal)

    held = cli("review", "claim", ref, *on, "--reviewer", "ann", "--json")
    assert held.code == 0, held.err
    assert json.loads(held.out)["who"] == "ann"

    other = cli(
        "review", "confirm", ref, *on, "--decision", "1", "--note", "n", "--reviewer", "bob"
    )
    assert other.code == 1, (other.out, other.err)
    assert "claimed by ann" in other.err

    steal = cli("review", "claim", ref, *on, "--reviewer", "bob")
    assert steal.code == 1 and "claimed by ann" in steal.err
    not_his = cli("review", "claim", ref, *on, "--reviewer", "bob", "--release")
    assert not_his.code == 1 and "only ann can release it" in not_his.err

    gone = cli("review", "claim", ref, *on, "--reviewer", "ann", "--release")
    assert gone.code == 0 and "released" in gone.out, gone.err
    done = cli("review", "confirm", ref, *on, "--decision", "1", "--note", "n", "--reviewer", "bob")
    assert done.code == 0, done.err

    late = cli("review", "claim", ref, *on, "--reviewer", "ann")
    assert late.code == 1 and "already audited by bob" in late.err, late.err


def test_the_holder_audits_it(audited_journal: tuple[Path, str], tmp_path: Path) -> None:
    source, ref = audited_journal
    journal = tmp_path / "j.sqlite"
    shutil.copy(source, journal)
    assert cli("review", "claim", ref, "--journal", journal, "--reviewer", "ann").code == 0
    mine = cli(
        "review", "confirm", ref, "--journal", journal, "--decision", "2", "--note", "n",
        "--reviewer", "ann", "--json",
    )  # fmt: skip
    assert mine.code == 0, mine.err
    assert json.loads(mine.out)["reviewer"] == "ann"
