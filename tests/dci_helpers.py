"""Rule-based DCI participants for tests: acts chosen from the request text alone."""

from __future__ import annotations

import re
from collections.abc import Sequence

from dissensus.dci.acts import RawAct
from dissensus.dci.participant import ActReply, ActRequest, ParticipantFailure
from dissensus.types import Usage

_OPTION = re.compile(r"^- (o\d+) \[(live|finalist|selected)", re.M)
_SELECTED = re.compile(r"^- (o\d+) \[selected", re.M)
_TENSION = re.compile(r"^- (t\d+) (BLOCKING )?\w+ by (\S+) on", re.M)


def live_options(prompt: str) -> list[str]:
    return [m[0] for m in _OPTION.findall(prompt)]


def open_tensions(prompt: str) -> list[tuple[str, bool, str]]:
    return [(t, bool(b), h) for t, b, h in _TENSION.findall(prompt)]


def valid_act(
    pid: str, req: ActRequest, scores: dict[str, float], *, block: bool, resolve: bool
) -> RawAct:
    opts = live_options(req.prompt)
    text = f"{pid} speaks in {req.stage} round {req.round}"
    if req.stage == "frame":
        return RawAct(act="frame", target="a0", text=text)
    if req.stage == "propose":
        return RawAct(act="propose", target="a0", text=text, option=f"option from {pid}")
    if req.stage == "challenge":
        return RawAct(act="challenge", target=opts[0], text=text, blocking=block)
    if req.stage == "revise":
        mine = [t for t, _, h in open_tensions(req.prompt) if h == pid]
        if mine and resolve:
            return RawAct(act="update", target=mine[0], text=text, resolves=True)
        return RawAct(act="extend", target=opts[0], text=text, option="amendment")
    if req.stage == "score":
        row = {o: scores.get(o, 0.5) for o in opts}
        best = max(opts, key=lambda o: row[o])
        return RawAct(act="recommend", target=best, text=text, scores=row, confidence=0.7)
    if req.stage == "synthesize":
        sel = _SELECTED.findall(req.prompt)
        return RawAct(
            act="synthesize",
            target=sel[0],
            text=text,
            reopen_conditions=["if x"],
            next_actions=["do y"],
        )
    return RawAct(act="clarify", target="a0", text=text)


class ScriptedParticipant:
    """Plays ``moves`` in order (cycled): ``valid``, ``invalid``, ``invalid_output``, ``model``, ``budget``."""

    def __init__(
        self,
        id: str,
        moves: Sequence[str] = ("valid",),
        scores: dict[str, float] | None = None,
        *,
        block: bool = False,
        resolve: bool = True,
    ) -> None:
        self.id = id
        self.moves = list(moves) or ["valid"]
        self.scores = scores or {}
        self.block = block
        self.resolve = resolve
        self.calls = 0
        self.requests: list[ActRequest] = []

    async def speak(self, request: ActRequest) -> ActReply:
        move = self.moves[self.calls % len(self.moves)]
        self.calls += 1
        self.requests.append(request)
        usage = Usage(
            calls=1,
            attempts=1,
            prompt_tokens=(len(request.system) + len(request.prompt)) // 4,
            completion_tokens=50,
        )
        if move == "budget":
            raise ParticipantFailure("budget_exhausted", "budget of 10 calls exhausted")
        if move == "model":
            raise ParticipantFailure("model_failure", "HTTP 503 after 4 attempts", usage=usage)
        if move == "invalid_output":
            raise ParticipantFailure("invalid_output", "not JSON", usage=usage)
        if move == "invalid":
            return ActReply(act=RawAct(act="shout", target="o99", text="!!!"), usage=usage)
        return ActReply(
            act=valid_act(self.id, request, self.scores, block=self.block, resolve=self.resolve),
            usage=usage,
        )


PANEL = ("framer", "explorer", "challenger", "integrator")


def panel(
    scores: dict[str, float] | None = None, **moves: Sequence[str]
) -> list[ScriptedParticipant]:
    return [ScriptedParticipant(p, moves.get(p, ("valid",)), scores) for p in PANEL]
