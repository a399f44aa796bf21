"""VariErrNLI converter: real files, explanation mapping, multi-label annotators, skips."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.convert.skips import ConvertError, Skipped
from dissensus.convert.varierrnli import item_to_panel, iter_varierrnli_panels
from dissensus.types import Panel

LABELS = ("contradiction", "entailment", "neutral")


def _item(annotations: dict[str, str], annotators: str, explanations: list[str]) -> dict[str, Any]:
    return {
        "text": {"context": "ctx", "statement": "stmt"},
        "annotators": annotators,
        "annotations": annotations,
        "soft_label": {"neutral": {"0": 0.5, "1": 0.5}},
        "split": "dev",
        "other_info": {"explanations": explanations},
    }


def test_real_files(shared_data: Path) -> None:
    folder = shared_data / "varierrnli"
    sizes = {}
    for split in ("dev", "test", "train"):
        skipped: list[Skipped] = []
        panels = list(
            iter_varierrnli_panels(folder / f"VariErrNLI_{split}.json", on_skip=skipped.append)
        )
        raw = json.loads((folder / f"VariErrNLI_{split}.json").read_text())
        sizes[split] = len(panels)
        assert len(panels) + len(skipped) == len(raw)
        # Only single-annotator items are skipped, each named by file and item id.
        for skip in skipped:
            assert len(raw[skip.item]["annotations"]) == 1
            assert skip.file.endswith(f"VariErrNLI_{split}.json")
        for panel in panels:
            source = raw[panel.id]
            assert panel.meta["split"] == split
            assert panel.meta["soft_label"] == source["soft_label"]
            assert panel.meta["context"] == source["text"]["context"]
            assert [o.agent for o in panel.outputs] == list(source["annotations"])
            for out in panel.outputs:
                labels = source["annotations"][out.agent].split(",")
                assert out.decision == labels[0]
                assert out.model_extra is not None
                assert out.model_extra["labels"] == labels
                assert len(out.model_extra["explanations"]) == len(labels)
    assert sizes == {"dev": 50, "test": 50, "train": 385}


def test_real_explanation_mapping_worked_example(shared_data: Path) -> None:
    """Item 49807: Ann2 gave entailment then neutral; explanations 2 and 3 are hers, in order."""
    panels = {
        p.id: p for p in iter_varierrnli_panels(shared_data / "varierrnli" / "VariErrNLI_dev.json")
    }
    ann2 = next(o for o in panels["49807"].outputs if o.agent == "Ann2")
    assert ann2.decision == "entailment"
    assert ann2.model_extra is not None
    assert ann2.model_extra["labels"] == ["entailment", "neutral"]
    assert "concluded in the same year" in ann2.model_extra["explanations"][0]
    assert "started in the next year" in ann2.model_extra["explanations"][1]
    assert panels["49807"].meta["label_counts"] == {"entailment": 2, "neutral": 3}


def test_mismatched_counts_are_malformed(tmp_path: Path) -> None:
    data = {
        "ok": _item({"A": "neutral", "B": "entailment"}, "A,B", ["x", "y"]),
        "short": _item({"A": "neutral", "B": "entailment"}, "A,B", ["x"]),
        "count": _item({"A": "neutral,entailment", "B": "entailment"}, "A,B", ["x", "y"]),
        "stranger": _item({"A": "neutral", "B": "entailment"}, "A,B,C", ["x", "y", "z"]),
        "single": _item({"A": "neutral"}, "A", ["x"]),
        "notext": {
            "annotations": {"A": "neutral", "B": "neutral"},
            "annotators": "A,B",
            "other_info": {"explanations": ["x", "y"]},
        },
    }
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    skipped: list[Skipped] = []
    panels = list(iter_varierrnli_panels(path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["ok"]
    fields = {s.item: s.field for s in skipped}
    assert fields == {
        "short": "other_info.explanations",
        "count": "annotators",
        "stranger": "annotators",
        "single": "annotations",
        "notext": "text.context",
    }
    with pytest.raises(ConvertError, match="item short"):
        list(iter_varierrnli_panels(path))


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match="cannot read"):
        iter_varierrnli_panels(tmp_path / "missing.json")
    (tmp_path / "list.json").write_text("[]")
    with pytest.raises(ConvertError, match="JSON object"):
        iter_varierrnli_panels(tmp_path / "list.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConvertError, match="invalid JSON"):
        iter_varierrnli_panels(tmp_path / "bad.json")


@st.composite
def _annotated_item(draw: st.DrawFn) -> tuple[dict[str, list[str]], list[str]]:
    names = draw(
        st.lists(
            st.sampled_from(["Ann1", "Ann2", "Ann3", "Ann4"]), min_size=2, max_size=4, unique=True
        )
    )
    labels = {
        n: draw(st.lists(st.sampled_from(LABELS), min_size=1, max_size=3, unique=True))
        for n in names
    }
    occurrences = [n for n in names for _ in labels[n]]
    order = draw(st.permutations(occurrences))
    return labels, list(order)


@given(_annotated_item())
def test_explanations_follow_annotator_occurrence(
    case: tuple[dict[str, list[str]], list[str]],
) -> None:
    """However the ``annotators`` string interleaves, the k-th occurrence explains the k-th label."""
    labels, order = case
    seen: Counter[str] = Counter()
    explanations = []
    for name in order:
        explanations.append(f"{name} explains {labels[name][seen[name]]}")
        seen[name] += 1
    item = _item({n: ",".join(ls) for n, ls in labels.items()}, ",".join(order), explanations)
    panel = item_to_panel("k", item)
    assert isinstance(panel, Panel)
    for out in panel.outputs:
        assert out.decision == labels[out.agent][0]
        assert out.model_extra is not None
        assert out.model_extra["explanations"] == [
            f"{out.agent} explains {lab}" for lab in labels[out.agent]
        ]
        assert out.reasoning == "\n\n".join(out.model_extra["explanations"])
    assert sum(panel.meta["label_counts"].values()) == len(order)
