"""A target precision is worded alike wherever a suspension or the monitor's promise
names it: two decimals when they show it exactly, else as many digits as it takes, so a
target of 0.999 never reads as 1.00 (a precision no audits can fall below) or 100 %."""

from __future__ import annotations

from pathlib import Path

import pytest

from dissensus.acceptance.monitor import confseq_available, target_words
from dissensus.cli.run_summary import audit_words
from dissensus.serve import pages

TEMPLATES = Path(pages.__file__).parent / "templates"


@pytest.mark.parametrize(
    ("target", "said"), [(0.9, "0.90"), (0.95, "0.95"), (0.975, "0.975"), (0.999, "0.999")]
)
def test_the_run_summary_names_the_target_as_the_monitor_does(target: float, said: str) -> None:
    if not confseq_available():
        pytest.skip("the monitor extra (confseq) is not installed")
    words = audit_words((0.05, 3), target, "dissensus review list --audits")
    assert words.endswith(f"precision below {said}.")
    assert target_words(target) == said


def test_the_review_page_words_the_target_with_the_same_function() -> None:
    shown = pages._env.from_string("{{ t|target }}").render(t=0.999)
    assert shown == "0.999"
    queue = (TEMPLATES / "queue.html").read_text(encoding="utf-8")
    assert "format(r.target)" not in queue
    assert queue.count("r.target|target") == 2
