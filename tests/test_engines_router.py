"""The Ray route worker's block function, run without Ray: its records are the local run's.

The worker routes a block with :func:`dissensus.states.stream.route_stream` itself, so
rules that read the value-profile count (the built-in ``cd-without-values``) route as
they do locally.
"""

from __future__ import annotations

import json
import pickle
from io import StringIO
from pathlib import Path

from dissensus.engines.blocks import plan_blocks
from dissensus.engines.ray.route import _Router
from dissensus.states.reading import Thresholds
from dissensus.states.routing import RuleSet
from dissensus.states.similarity import get_backend
from dissensus.states.stream import route_stream
from dissensus.types import Panel

SAME = "the answer is A because the premise entails it"


def _panel(i: int, values: bool) -> dict[str, object]:
    outputs = [
        {"agent": f"a{k}", "decision": "A" if k % 2 else "B", "reasoning": SAME} for k in range(3)
    ]
    if values:
        outputs[0]["values"] = {"care": 1.0}
    return {"id": f"p{i}", "outputs": outputs}


def test_a_block_routes_as_the_local_stream_with_value_rules(tmp_path: Path) -> None:
    src = tmp_path / "panels.jsonl"
    src.write_text("".join(json.dumps(_panel(i, values=i % 3 == 0)) + "\n" for i in range(12)))
    rules = tmp_path / "rules.yaml"
    rules.write_text("builtins: [cd-without-values]\nrules: []\n")
    spec = {
        "similarity": "tfidf",
        "no_cache": True,
        "theta_s": None,
        "theta_a": None,
        "rules": str(rules),
        "with_matrix": False,
        "keep_rows": 0,
    }
    got: list[str] = []
    for block in plan_blocks(str(src), 5):
        item = json.dumps({"block": block.__dict__ | {"lines": None}, "name": str(src)})
        (raw,) = _Router(spec)({"item": [item]})["result"]
        got += pickle.loads(raw)["lines"]

    backend = get_backend("tfidf", cache=False)
    panels = [
        (n, Panel.model_validate_json(line))
        for n, line in enumerate(src.read_text().splitlines(), start=1)
    ]
    out = StringIO()
    route_stream(
        panels,
        backend,
        Thresholds.for_model(backend.name, None, None),
        RuleSet.load(rules),
        handle=out,
        numbered=True,
    )
    want = out.getvalue().splitlines()
    assert len(got) == 12
    assert got == want
    assert [json.loads(line)["line"] for line in got] == list(range(1, 13))  # block lines
    actions = {json.loads(line)["id"]: json.loads(line)["action"] for line in got}
    assert "seek_context" in actions.values()  # the value rule applied to panels without values
