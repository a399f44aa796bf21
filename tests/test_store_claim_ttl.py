"""A claim's time is bounded: a ttl beyond ten years is refused by name, as a negative
one is, instead of a clock overflow (OverflowError) out of the library's ``claim``."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.errors import DissensusError
from dissensus.pipeline import review as queue
from dissensus.store import Journal
from test_review_queue import _escalated

TEN_YEARS = 315_576_000.0


@pytest.mark.parametrize("ttl", [1e12, TEN_YEARS * 2, 1e308])
def test_a_claim_too_long_is_refused_by_name(tmp_path: Path, ttl: float) -> None:
    with Journal(tmp_path / "j.sqlite") as journal:
        review_id = _escalated(journal, "run1")
        with pytest.raises(DissensusError, match=r"claim time must be .* at most"):
            queue.claim(journal, review_id, "lee", ttl=ttl)
        assert journal.current_claim(review_id) is None
        # the journal is still usable: the refused claim left no transaction open
        held = queue.claim(journal, review_id, "lee", ttl=TEN_YEARS)
        assert held.who == "lee"
        assert journal.current_claim(review_id) is not None
