"""Panel members answering in-process with the sum of the numbers in the question, for
the journal-fault tests of the chat door (:mod:`test_serve_chat_journal_faults`).

Kept apart from that test module, and light to import: the other process those tests
start on the same journal imports these members and not the test module's service and
test-runner imports."""

from __future__ import annotations

import json
from typing import Any

from dissensus.llm.base import BackendResponse
from dissensus.panels import Members
from dissensus.pipeline.policy import policy_from_dict

NAMES = ["m1", "m2", "m3"]


class Adding:
    """A member answering with the sum of the numbers in the last message."""

    provider = "test"
    model_id = "adding"

    async def send(self, request: Any, *, json_mode: Any) -> BackendResponse:
        total = sum(int(w) for w in request.messages[-1].content.split() if w.isdigit())
        return BackendResponse(
            text=json.dumps({"reasoning": f"Adding gives {total}.", "answer": str(total)}),
            model="adding",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def section(model: str = "scripted:x") -> dict[str, Any]:
    """The ``panel`` section of the policy: the three members, answers numbers."""
    return {
        "answer": "number",
        "members": [{"name": n, "model": model, "family": f"f{n}"} for n in NAMES],
        "max_retries": 0,
    }


def members() -> Members:
    """The three members, each an :class:`Adding`."""
    policy = policy_from_dict({"panel": section()})
    return Members(policy.panel, {n: Adding() for n in NAMES})


def body(question: str = "What is 3 plus 4 ?") -> dict[str, Any]:
    """A chat request asking ``question``."""
    return {"model": "dissensus-panel", "messages": [{"role": "user", "content": question}]}
