"""Which acts each DCI-CF stage admits, the request bound, and the no-typed-grammar mapping.

Choices this module makes: the acts each stage admits (below); in the no-typed-grammar
ablation an utterance's effect is decided by the stage, the kind of its target and, in
stage 2, whether it carries option text (then it is a new option).
"""

from __future__ import annotations

from dissensus.dci.acts import ACTS, RawAct, TargetKind, parse_target
from dissensus.dci.task import DCIConfig

__all__ = ["STAGE_ACTS", "request_bound", "untyped_act"]

STAGE_ACTS: dict[str, frozenset[str]] = {
    "frame": frozenset({"frame"}),
    "propose": frozenset({"propose", "spawn", "extend"}),
    "challenge": frozenset({"challenge", "ask", "ground", "clarify"}),
    "revise": frozenset({"update", "extend", "bridge", "reframe", "recall", "ground", "clarify"}),
    "score": frozenset({"recommend"}),
    "synthesize": frozenset({"synthesize"}),
    "discuss": frozenset(ACTS) - {"recommend", "synthesize", "frame"},
}


def request_bound(participants: int, config: DCIConfig) -> int:
    """Most requests a run can make: ``(1 + reasks) * (2 + n + 3 n R)``.

    Requests are logical model calls (``usage.calls``); a budget of attempts
    (``--max-calls``) must allow for the model client's re-asks and retries of each
    (``docs/dci.md``)."""
    return (1 + config.reasks) * (2 + participants + 3 * participants * config.max_rounds)


def untyped_act(stage: str, raw: RawAct) -> str:
    """The act an untyped utterance performs: decided by the stage, the target kind and
    whether it carries option text (in stage 2, option text on an option is a new option)."""
    parsed = parse_target(raw.target)
    kind = parsed[0] if parsed is not None else TargetKind.ACT
    on_option = "spawn" if (raw.option or "").strip() else "extend"
    by_kind = {
        "propose": {
            TargetKind.OPTION: on_option,
            TargetKind.TENSION: "propose",
            TargetKind.ACT: "propose",
        },
        "challenge": {
            TargetKind.OPTION: "challenge",
            TargetKind.TENSION: "ask",
            TargetKind.ACT: "challenge",
        },
        "revise": {
            TargetKind.OPTION: "extend",
            TargetKind.TENSION: "update",
            TargetKind.ACT: "update",
        },
        "discuss": {
            TargetKind.OPTION: "clarify",
            TargetKind.TENSION: "update",
            TargetKind.ACT: "clarify",
        },
    }
    fixed = {"frame": "frame", "score": "recommend", "synthesize": "synthesize"}
    return fixed.get(stage) or by_kind[stage][kind]
