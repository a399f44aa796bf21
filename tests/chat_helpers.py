"""Helpers of the chat-door tests: a synthetic arithmetic panel recorded as ``replay:`` members,
a learned acceptance file calibrated on it, and ``dissensus serve`` on a loopback port.

The members answer "How many apples?" questions. On two items in three every member gives
the right number (in several styles: JSON blocks, prose, ``####``); on the others they
split, and the plurality is sometimes wrong, so a learned acceptance has something to
learn. Everything derives from ``random.Random(seed)``.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dissensus.llm.base import Message
from dissensus.panels import Members, recording_line
from dissensus.pipeline.policy import PanelSettings
from dissensus.types import Panel

MEMBERS = {"solver-a": "meta", "solver-b": "mistral", "solver-c": "google", "solver-d": "openai"}
"""Member name -> family."""


@dataclass(frozen=True)
class Item:
    index: int
    question: str
    gold: str
    easy: bool


def items(n: int, seed: int = 7) -> list[Item]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(2, 60), rng.randint(2, 60)
        question = f"Item {i}: Tom has {a} apples and buys {b} more. How many apples does he have?"
        out.append(Item(i, question, str(a + b), easy=i % 3 != 2))
    return out


def _text(rng: random.Random, value: int | None, style: int) -> str:
    if value is None:
        return "I am not sure how to count these apples."
    if style == 0:
        return f'{{"reasoning": "He had some apples and bought more, so we add them: {value}.", "answer": "{value}"}}'
    if style == 1:
        return f"Adding the apples he had to the apples he bought gives {value}. The answer is {value}."
    return f"First count the apples, then add the new ones.\n#### {value}"


def answers(item: Item, seed: int = 7) -> dict[str, str]:
    """Every member's text for ``item``."""
    rng = random.Random(seed * 1000 + item.index)
    gold = int(item.gold)
    out: dict[str, str] = {}
    wrong = gold + rng.choice([-10, -1, 1, 10])
    for k, name in enumerate(MEMBERS):
        if item.easy:
            value: int | None = gold
        else:
            pick = rng.random()
            value = gold if pick < 0.4 else (wrong if pick < 0.9 else None)
        out[name] = _text(rng, value, (k + item.index) % 3)
    return out


def messages(item: Item) -> list[Message]:
    return [Message(role="user", content=item.question)]


def write_members(root: Path, all_items: list[Item], settings: PanelSettings) -> None:
    """One replay file per member answering every item."""
    (root / "members").mkdir(parents=True, exist_ok=True)
    for name in MEMBERS:
        lines = [
            recording_line(name, messages(it), answers(it)[name], settings) for it in all_items
        ]
        (root / "members" / f"{name}.jsonl").write_text("".join(lines), encoding="utf-8")


def panel_section() -> dict[str, Any]:
    return {
        "answer": "number",
        "members": [
            {"name": n, "model": f"replay:members/{n}.jsonl", "family": f}
            for n, f in MEMBERS.items()
        ],
    }


def fanned_panels(root: Path, all_items: list[Item], settings: PanelSettings) -> list[Panel]:
    """The panels the door builds for ``all_items`` (asked through the replay members)."""
    members = Members.open(settings, root)

    async def ask() -> list[Panel]:
        try:
            return [(await members.fan_out(f"p{it.index}", messages(it))).panel for it in all_items]
        finally:
            await members.aclose()

    return asyncio.run(ask())


def write_acceptance(root: Path, panels: list[Panel], golds: list[str]) -> Path:
    from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance
    from dissensus.acceptance.prepare import prepare_cases
    from dissensus.states import get_backend

    fs = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(panels, settings=fs, backend=get_backend("tfidf"))
    path = root / "accept.json"
    save_acceptance(
        calibrate(cases, golds, target=0.8, delta=0.2, min_accepted=20, settings=fs), path
    )
    return path


def write_policy(root: Path, **panel: Any) -> Path:
    data = {
        "reading": {"similarity": "tfidf"},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "acceptance": {"model": "accept.json"},
        "panel": {**panel_section(), **panel},
    }
    path = root / "policy.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@contextmanager
def live_server(factory: Any) -> Iterator[str]:
    """``factory()``'s app served by uvicorn on a free loopback port: yields its base URL."""
    import uvicorn

    config = uvicorn.Config(
        factory, factory=True, host="127.0.0.1", port=0, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    for _ in range(2000):
        if server.started or not thread.is_alive():
            break
        time.sleep(0.01)
    if not server.started:
        raise RuntimeError("the test server did not start")
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


class _Agreeing:
    """A member backend answering every request at once with the same number."""

    provider = "test"
    model_id = "agreeing"

    async def send(self, request: Any, *, json_mode: Any) -> Any:
        from dissensus.llm.base import BackendResponse

        return BackendResponse(
            text='{"reasoning": "3 + 4 = 7.", "answer": "7"}',
            model="agreeing",
            prompt_tokens=5,
            completion_tokens=5,
        )

    async def aclose(self) -> None:
        return None


def escalated_chat_case(journal_path: Path, messages: list[dict[str, Any]]) -> str:
    """Ask the door ``messages`` in-process (three agreeing members, no acceptance file,
    no re-ask model: the case escalates) into the journal at ``journal_path``; the review id."""
    from dissensus.panels import PanelChat
    from dissensus.pipeline.policy import policy_from_dict
    from dissensus.store.journal import Journal

    names = ["m1", "m2", "m3"]
    section = {"answer": "number", "members": [{"name": n, "model": "scripted:x"} for n in names]}
    policy = policy_from_dict({"reading": {"similarity": "tfidf"}, "panel": section})
    members = Members(policy.panel, {n: _Agreeing() for n in names})
    with Journal(str(journal_path)) as journal:
        chat = PanelChat(policy, journal=journal, members=members)
        try:
            done = chat.complete({"model": "dissensus-panel", "messages": messages})
        finally:
            chat.close()
    assert done.dissensus.status == "escalated" and done.dissensus.review_id is not None
    return done.dissensus.review_id
