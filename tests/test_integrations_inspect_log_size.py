"""The Inspect reducer given a ``RunSpec`` records it in the eval log without the content
of the files it loaded.

Inspect records a reducer's creation parameters in the eval log's header and in every
sample's score. A ``RunSpec`` built from the LLMBar policy holds its learned acceptance
file, calibration vectors and all (150 kB): an eval of 20 samples logged 14.6 MB where
the same eval given the policy file's path logged 0.3 MB. The spec is now recorded with
its files named by path and sha256 (``files``), not copied, and each loaded content by
the sha256 of its canonical JSON (and the acceptance file's own ``sha256``): a spec made
with the content and no file recorded ``files: []`` and nothing of the acceptance file
that judged its samples.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dissensus.canonical import canonical, sha256_text

ROOT = Path(__file__).resolve().parents[1]
POLICY = ROOT / "examples" / "llmbar-policy.yaml"


def _spec() -> Any:
    from dissensus.pipeline import RunSpec

    return RunSpec.from_policy(str(POLICY))


@pytest.mark.parametrize("name", ["dissensus", "dissensus/dissensus"])
def test_a_run_spec_is_recorded_by_its_files_not_their_content(name: str) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai._util.registry import registry_params

    from dissensus.integrations.inspect import _namespaced_reducer, dissensus_reducer

    spec = _spec()
    make = dissensus_reducer if name == "dissensus" else _namespaced_reducer
    recorded = registry_params(make(graders=["g1", "g2"], policy=spec))["policy"]
    assert len(json.dumps(recorded)) < 10_000
    assert recorded["policy"] == spec.policy.model_dump(mode="json")
    assert recorded["files"] == [f.model_dump(mode="json") for f in spec.files]
    assert {f["role"] for f in recorded["files"]} == {"policy", "acceptance.model"}
    assert recorded["acceptance"] == {
        "content_sha256": sha256_text(canonical(spec.acceptance)),
        "format": spec.acceptance["format"],
        "sha256": spec.acceptance["sha256"],
    }
    assert recorded["calibration"] is None and recorded["guard_calibration"] is None


def _recorded(spec: Any) -> Any:
    pytest.importorskip("inspect_ai")
    from inspect_ai._util.registry import registry_params

    from dissensus.integrations.inspect import dissensus_reducer

    return registry_params(dissensus_reducer(graders=["g1", "g2"], policy=spec))["policy"]


def test_a_run_spec_made_without_files_is_named_by_what_it_loaded() -> None:
    """Built from the content, the spec has no ``files``: the log named nothing of the
    acceptance file (``files: []``, no ``sha256``); each loaded content is named by its
    figures, and two acceptance files are told apart."""
    from dissensus.pipeline import RunSpec

    built = _spec()
    bare = RunSpec(policy=built.policy, acceptance=built.acceptance)
    recorded = _recorded(bare)
    assert recorded["files"] == []
    assert recorded["acceptance"]["sha256"] == built.acceptance["sha256"]
    assert recorded["acceptance"] == _recorded(built)["acceptance"]
    other = RunSpec(policy=built.policy, acceptance={**built.acceptance, "threshold": 0.5})
    assert (
        _recorded(other)["acceptance"]["content_sha256"] != recorded["acceptance"]["content_sha256"]
    )
    assert len(json.dumps(recorded)) < 10_000


def test_calibrations_are_named_by_the_sha256_of_their_content() -> None:
    """The reliability calibration has no sha256 of its own: the log names it by the
    sha256 of its canonical JSON, as ``run.started`` journals it."""
    from dissensus.pipeline import RunSpec
    from dissensus.pipeline.trust_regions import CalibrationFile

    names = set()
    for description in ("one fit", "another fit"):
        bare = RunSpec(calibration=CalibrationFile(description=description))
        recorded = _recorded(bare)
        assert recorded["calibration"] == {
            "content_sha256": sha256_text(canonical(bare.started_fields()["calibration"])),
            "format": "dissensus.reliability/1",
        }
        assert recorded["acceptance"] is None and recorded["guard_calibration"] is None
        names.add(recorded["calibration"]["content_sha256"])
    assert len(names) == 2


def test_an_eval_log_stays_small_with_a_run_spec(tmp_path: Path) -> None:
    pytest.importorskip("inspect_ai")
    from inspect_ai import Task, eval
    from inspect_ai.dataset import Sample
    from inspect_ai.model import ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import Score, Scorer, accuracy, multi_scorer, scorer
    from inspect_ai.solver import generate

    from dissensus.integrations.inspect import dissensus_reducer

    def grader(i: int) -> Scorer:
        @scorer(metrics=[accuracy()], name=f"g{i}")
        def make() -> Scorer:
            async def score(state: Any, target: Any) -> Score:
                return Score(value="C" if i else "I", explanation=f"g{i} looked", metadata={"grader": f"g{i}"})  # fmt: skip

            return score

        return make()

    def reply(*_: Any) -> ModelOutput:
        out = ModelOutput.from_content(model="mockllm/model", content="4")
        out.usage = ModelUsage(input_tokens=1, output_tokens=1, total_tokens=2)
        return out

    reducer = dissensus_reducer(policy=_spec())
    task = Task(
        dataset=[Sample(id=i, input="2 + 2 = ?", target="4") for i in range(3)],
        solver=generate(),
        scorer=multi_scorer([grader(i) for i in range(3)], reducer=reducer),
    )
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=reply),
        log_dir=str(tmp_path),
        log_format="json",
        display="none",
    )
    assert log.status == "success", log.error
    (written,) = tmp_path.glob("*.json")
    data = json.loads(written.read_text(encoding="utf-8"))
    assert "shift_reference" not in written.read_text(encoding="utf-8")
    # The log names the acceptance file that judged the samples.
    assert _spec().acceptance["sha256"] in written.read_text(encoding="utf-8")
    for sample in data["samples"]:
        assert len(json.dumps(sample)) < 60_000
    assert written.stat().st_size < 400_000
