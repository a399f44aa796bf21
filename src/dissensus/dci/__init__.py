"""DCI: structured deliberation with typed epistemic acts ending in a decision packet (``docs/dci.md``).

Four archetypes (:mod:`~dissensus.dci.archetypes`), 14 typed acts in 6 families
(:mod:`~dissensus.dci.acts`), a shared workspace with a compaction policy
(:mod:`~dissensus.dci.workspace`), the eight-stage convergent flow DCI-CF
(:mod:`~dissensus.dci.flow`) with its deterministic fallback cascade
(:mod:`~dissensus.dci.outranking`), and the decision packet with a published JSON schema
(:mod:`~dissensus.dci.packet`). DCI talks to participants through a protocol
(:mod:`~dissensus.dci.participant`); LLM participants live in
:mod:`dissensus.agents.deliberator`.

>>> from dissensus.dci import ACTS, ARCHETYPES
>>> len(ACTS), sorted(ARCHETYPES)
(14, ['Challenger', 'Explorer', 'Framer', 'Integrator'])
"""

from dissensus.dci.acts import ACTS, ActFamily, ActSpec, RawAct, TargetKind, check_act
from dissensus.dci.archetypes import ARCHETYPES, Archetype, archetype
from dissensus.dci.flow import (
    CallTrace,
    DeliberationResult,
    deliberate,
    deliberate_sync,
    request_bound,
)
from dissensus.dci.output import METHODS, DeliberationOutput, packet_text
from dissensus.dci.outranking import CascadeResult, cascade
from dissensus.dci.packet import DecisionPacket, packet_schema
from dissensus.dci.participant import (
    ActReply,
    ActRequest,
    FunctionParticipant,
    Participant,
    ParticipantFailure,
)
from dissensus.dci.task import DCIConfig, ParticipantSpec, Task, TaskOption, load_task, parse_task
from dissensus.dci.workspace import CompactionPolicy, Tension, Workspace, render_view

__all__ = [
    "ACTS",
    "ARCHETYPES",
    "METHODS",
    "ActFamily",
    "ActReply",
    "ActRequest",
    "ActSpec",
    "Archetype",
    "CallTrace",
    "CascadeResult",
    "CompactionPolicy",
    "DCIConfig",
    "DecisionPacket",
    "DeliberationOutput",
    "DeliberationResult",
    "FunctionParticipant",
    "Participant",
    "ParticipantFailure",
    "ParticipantSpec",
    "RawAct",
    "TargetKind",
    "Task",
    "TaskOption",
    "Tension",
    "Workspace",
    "archetype",
    "cascade",
    "check_act",
    "deliberate",
    "deliberate_sync",
    "load_task",
    "packet_schema",
    "packet_text",
    "parse_task",
    "render_view",
    "request_bound",
]
