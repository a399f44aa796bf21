"""Claims racing resolutions: a claim is never granted on a case resolved before it.

``claim`` reads the case's status, then takes the claim; a resolution committed in
between (by another process) used to leave the claim granted on a resolved case. The
store now checks the resolution again inside the claim's transaction, under the run's
write lock that a resolution also holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.pipeline import review as queue
from dissensus.pipeline.review import AlreadyResolved, find_item, resolve
from dissensus.store import CaseClosed, Journal
from test_review_queue import _escalated


def test_a_claim_after_a_resolution_it_did_not_see_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "run1")
        seen_open = find_item(journal, review_id)
        resolve(journal, review_id, decision="1", note="done", reviewer="kim")
        # the claimant read the case while it was still open
        monkeypatch.setattr(queue, "find_item", lambda *_: seen_open)
        with pytest.raises(AlreadyResolved) as refused:
            queue.claim(journal, review_id, "lee", ttl=60)
        assert refused.value.reviewer == "kim"
        assert journal.current_claim(review_id) is None


def test_the_store_refuses_a_claim_on_a_closed_case(tmp_path: Path) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "run1")
        line = review_id.rpartition(".")[2]
        resolve(journal, review_id, decision="1", note="done", reviewer="kim")
        with pytest.raises(CaseClosed):
            journal.claim(review_id, "lee", 60, run_id="run1", closed_by=f"review/{line}/resolved")
        assert journal.current_claim(review_id) is None


def test_a_claim_after_a_resolution_anew_it_did_not_see_is_refused(
    journal_target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an undo the closing event is the next resolution (``review/<line>/resolved/1``),
    read under the run's lock: one committed between the claimant's read and its claim
    still refuses it."""
    with Journal(journal_target) as journal:
        review_id = _escalated(journal, "run1")
        resolve(journal, review_id, decision="1", note="done", reviewer="kim")
        queue.reopen(journal, review_id, reviewer="kim", within_s=300)
        seen_open = find_item(journal, review_id)
        resolve(journal, review_id, decision="2", note="again", reviewer="kim")
        monkeypatch.setattr(queue, "find_item", lambda *_: seen_open)
        with pytest.raises(AlreadyResolved) as refused:
            queue.claim(journal, review_id, "lee", ttl=60)
        assert refused.value.decision == "2"
        assert journal.current_claim(review_id) is None
