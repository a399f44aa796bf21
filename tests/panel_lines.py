"""Panel lines for the parsing tiers' properties: an ordinary panel, and values put at
places where each tier must accept or refuse exactly as the models do."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import strategies as st

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(2**63, 2**80)
    | st.floats()
    | st.floats(-2.0, 2.0)
    | st.text(max_size=5)
    | st.sampled_from(["", "1", "a\u00e9", "0.5", "nan", "inf", "true", "1e999"])
)
VALUES = st.recursive(
    SCALARS,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
    max_leaves=6,
)
PLACES = [
    ("id",),
    ("meta",),
    ("meta", "k"),
    ("extra",),
    ("outputs",),
    ("outputs", 0, "agent"),
    ("outputs", 0, "decision"),
    ("outputs", 0, "reasoning"),
    ("outputs", 0, "confidence"),
    ("outputs", 0, "values"),
    ("outputs", 0, "values", "safety"),
    ("outputs", 0, "family"),
    ("outputs", 0, "note"),
    ("outputs", 0, "evidence"),
    ("outputs", 0, "evidence", 0, "source"),
    ("outputs", 0, "evidence", 0, "present"),
    ("outputs", 0, "evidence", 0, "other"),
    ("outputs", 0, "reask"),
    ("outputs", 0, "reask", "decision"),
    ("outputs", 0, "reask", "reasoning"),
    ("outputs", 0, "reask", "other"),
    ("outputs", 1, "agent"),
]


def panel_doc() -> dict[str, Any]:
    return {
        "id": "p",
        "meta": {"k": "x", "n": 1},
        "outputs": [
            {
                "agent": "a",
                "decision": "1",
                "reasoning": "x",
                "confidence": 0.5,
                "values": {"safety": 0.5},
                "evidence": [{"source": "s", "present": True}],
                "reask": {"decision": "1", "reasoning": "z", "perturbation": "swap_order"},
            },
            {"agent": "b", "decision": "2", "reasoning": "y"},
        ],
    }


def put(doc: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        doc = doc[key]
    doc[path[-1]] = value


@st.composite
def damaged_lines(draw: st.DrawFn) -> str:
    """An ordinary panel with one to three values put at random places, as a JSON line
    (ASCII-escaped or not)."""
    doc = panel_doc()
    for _ in range(draw(st.integers(1, 3))):
        with contextlib.suppress(KeyError, IndexError, TypeError):
            put(doc, draw(st.sampled_from(PLACES)), draw(VALUES))
    return json.dumps(doc, ensure_ascii=draw(st.booleans()))
