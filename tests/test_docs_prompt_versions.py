"""A changed prompt makes journalled and recorded calls unusable, and the docs say so.

Journalled model calls (``runs resume``) and ``replay:`` recordings are found by a
digest of the request, prompt text included. This version changed DCI's prompts (the
stage-5 scorers' view, the criteria block), so a run journalled by an earlier version
silently asked its models again on resume and charged the budget twice, and its
recordings missed; nothing in the docs said a version's prompt change does that.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dissensus.llm import ChatRequest, Message
from dissensus.llm.replay import request_key
from dissensus.pipeline.durable import call_digest

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _ask(prompt: str) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=prompt)], agent="a", stage="score")


def test_a_reworded_prompt_is_another_call() -> None:
    """The fact the docs state: the prompt text is part of a call's identity."""
    old, new = _ask("CRITERIA: cost; risk"), _ask('<<<CRITERIA\n["cost", "risk"]\nCRITERIA>>>')
    assert call_digest(old, "S", None) != call_digest(new, "S", None)
    assert request_key(old) != request_key(new)


def _flat(name: str) -> str:
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


@pytest.mark.parametrize("name", ["dci.md", "llm.md", "pipeline.md"])
def test_the_docs_say_a_changed_prompt_is_asked_and_charged_again(name: str) -> None:
    text = _flat(name)
    assert re.search(r"changes a prompt", text), name
    assert re.search(r"charge[sd]? (them|the budget for them)? ?again", text), name
    # this version's changes are named
    assert "stage-5 scorer" in text, name
    assert "<<<CRITERIA" in text or "criteria" in text, name
