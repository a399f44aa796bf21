"""Test agents and problem generators for the CONCORD tests (no model, deterministic)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence

from pydantic import BaseModel

from dissensus.concord.agent import NegotiationView, Outcome
from dissensus.llm.base import ChatRequest, ChatResponse
from dissensus.types import Usage

REJECTED = Outcome(id="R0", text="reject everything")
IDEAL = Outcome(id="I0", text="the ideal outcome")


def unit(seed: int, agent: str, text: str) -> float:
    """A deterministic pseudo-random number in [0, 1] for (seed, agent, text)."""
    digest = hashlib.sha256(f"{seed}|{agent}|{text}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 0xFFFFFFFF


class HashAgent:
    """Scores any text by a seeded hash on a private scale [lo, hi] (hi may be < lo).

    Repairs write a new text; ``fault`` injects failures: ``raise`` in scoring a given
    call number, ``range`` (an out-of-range score), ``anchors`` (anchor call raises).
    """

    kind = "function"
    uses_model = True  # counted as a model agent so the model-call bound is exercised

    def __init__(
        self,
        agent_id: str,
        seed: int,
        lo: float = 0.0,
        hi: float = 10.0,
        faults: Sequence[str] = (),
        bias: float = 0.0,
    ) -> None:
        self._id = agent_id
        self.seed = seed
        self.lo, self.hi = lo, hi
        self.faults = set(faults)
        self.bias = bias
        self.calls = 0
        self.floors_seen: list[float] = []
        self.timeout: float | None = None

    @property
    def id(self) -> str:
        return self._id

    def attempts(self) -> int:
        return self.calls

    def _raw(self, text: str) -> float:
        u = min(1.0, max(0.0, unit(self.seed, self._id, text) * (1 - self.bias) + self.bias))
        return self.lo + (self.hi - self.lo) * u

    async def score(self, outcomes: Sequence[Outcome], view: NegotiationView) -> Sequence[float]:
        self.calls += 1
        self.floors_seen.append(view.floor)
        if view.phase == "anchors":
            if "anchors" in self.faults:
                raise RuntimeError("anchor scoring failed")
            return [self.lo, self.hi]
        if "raise" in self.faults and self.calls % 3 == 0:
            raise RuntimeError("scoring model crashed")
        out = [self._raw(o.text) for o in outcomes]
        if "range" in self.faults and self.calls % 2 == 0:
            out[0] = self.hi + (self.hi - self.lo)
        return out

    async def propose(self, view: NegotiationView) -> Outcome | None:
        self.calls += 1
        self.floors_seen.append(view.floor)
        return Outcome(text=f"opening plan of {self._id}")

    async def repair(self, view: NegotiationView) -> Outcome | None:
        self.calls += 1
        self.floors_seen.append(view.floor)
        if "pass" in self.faults:
            return None
        return Outcome(text=f"repair by {self._id} in round {view.round}")


class SlowAgent(HashAgent):
    """Repairs slowly (to exercise deadlines and cancellation)."""

    def __init__(self, *args: object, on_repair: object = None, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.on_repair = on_repair

    async def repair(self, view: NegotiationView) -> Outcome | None:
        if callable(self.on_repair):
            self.on_repair()
        await asyncio.sleep(30)
        return None


class TextOnly:
    """A chat client that returns the answer's text only: no parsed value, no validation
    of its own (what reads the answer must check it)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def chat(
        self, request: ChatRequest, *, schema: type[BaseModel] | None = None
    ) -> ChatResponse:
        return ChatResponse(text=self.text, model="m")

    @property
    def usage(self) -> Usage:
        return Usage()

    @property
    def usage_by_agent(self) -> dict[str, Usage]:
        return {}
