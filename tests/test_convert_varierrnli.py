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
        "soft_label": {label: {"0": 0.5, "1": 0.5} for label in LABELS},
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


def _convert(tmp_path: Path, data: dict[str, Any]) -> tuple[list[Panel], list[Skipped]]:
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    skipped: list[Skipped] = []
    return list(iter_varierrnli_panels(path, on_skip=skipped.append)), skipped


def _ok() -> dict[str, Any]:
    return _item({"A": "neutral", "B": "entailment"}, "A,B", ["x", "y"])


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"annotations": {"A": "neutral", "B": "bogus_label"}}, "annotations.B", "'bogus_label'"),
        ({"annotations": {"A": "neutral", "B": "Neutral"}}, "annotations.B", "not one of"),
        ({"soft_label": 1e308}, "soft_label", "expected an object"),
        ({"soft_label": {"maybe": {"0": 1.0}}}, "soft_label", "'maybe' is not one of"),
        ({"soft_label": {"neutral": [0.5, 0.5]}}, "soft_label.neutral", "expected an object"),
        ({"soft_label": {"neutral": {"0": 2}}}, "soft_label.neutral.0", "in [0, 1], got 2"),
        ({"soft_label": {"neutral": {"0": True}}}, "soft_label.neutral.0", "got True"),
        ({"soft_label": {"neutral": {"2": 0.5}}}, "soft_label.neutral", "'2' is not"),
        ({"split": 5}, "split", "expected a string"),
        # An empty or partial soft label was accepted as if the labels it leaves out had
        # no weight; every label needs its {"0": p, "1": p}.
        ({"soft_label": {}}, "soft_label", "no entailment, neutral, contradiction"),
        (
            {"soft_label": {"neutral": {"0": 0.5, "1": 0.5}}},
            "soft_label",
            "no entailment, contradiction: expected every one of",
        ),
        (
            {"soft_label": {label: {"0": 1.0} for label in LABELS}},
            "soft_label.contradiction",
            'no "1"',
        ),
    ],
)
def test_a_label_or_field_of_the_wrong_kind_is_skipped(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    """Labels outside the three NLI labels and mistyped fields were copied into the
    panels; now the item is skipped, naming its field, and the others are converted."""
    panels, skipped = _convert(tmp_path, {"ok": _ok(), "bad": {**_ok(), **change}})
    assert [p.id for p in panels] == ["ok"]
    assert [(s.item, s.field) for s in skipped] == [("bad", field)]
    assert message in skipped[0].message


def test_an_item_without_soft_label_is_still_converted(tmp_path: Path) -> None:
    item = _ok()
    del item["soft_label"]
    panels, skipped = _convert(tmp_path, {"k": item})
    assert not skipped and panels[0].meta["soft_label"] is None


def test_an_empty_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty.json").write_text("{}")
    with pytest.raises(ConvertError, match=r"empty.json: no item \(an empty object"):
        iter_varierrnli_panels(tmp_path / "empty.json")


def test_a_panel_no_reader_takes_is_skipped_naming_its_source_field(tmp_path: Path) -> None:
    """An item id, an annotator's name, an explanation or a context over the 32,768
    characters a field holds: skipped, naming the item's field, and the echo bounded.
    At exactly 32,768 characters the panel is converted and a reader takes it."""
    from dissensus.io.jsonl import parse_line

    long_name = "N" * 40_000
    data = {
        "K" * 50_000: _ok(),
        "name": _item({long_name: "neutral", "B": "entailment"}, f"{long_name},B", ["x", "y"]),
        "explanation": _item({"A": "neutral", "B": "neutral"}, "A,B", ["x", "e" * 32_769]),
        "context": {**_ok(), "text": {"context": "c" * 40_000, "statement": "s"}},
        "edge": _item({"A": "neutral", "B": "neutral"}, "A,B", ["x", "e" * 32_768]),
    }
    panels, skipped = _convert(tmp_path, data)
    assert [p.id for p in panels] == ["edge"]
    line = panels[0].model_dump_json(exclude_defaults=True)
    assert parse_line(Panel, line, file="out", line=1) == panels[0]
    assert [s.field for s in skipped] == [
        "<key>",
        "annotations",
        "other_info.explanations",
        "text.context",
    ]
    assert skipped[0].item.endswith("... (50000 characters)") and len(skipped[0].item) < 250
    assert "40000 characters; at most 32768 per field" in skipped[1].message
    assert "'B'" in skipped[2].message  # the annotator whose explanation it is
    for skip in skipped:
        assert len(skip.describe()) < 600, skip.describe()[:300]


def test_a_long_annotator_name_is_quoted_bounded(tmp_path: Path) -> None:
    long_name = "A" * 40_000
    item = _item({long_name: "neutral", "B": "entailment"}, "A,B", ["x", "y"])
    panels, skipped = _convert(tmp_path, {"k": item})
    assert not panels
    (skip,) = skipped
    assert skip.field == "annotators"
    assert "'AAAA" in skip.message and "(40000 characters)" in skip.message
    assert len(skip.describe()) < 300


def test_a_label_an_annotator_repeats_counts_once(tmp_path: Path) -> None:
    """``neutral,neutral`` from one annotator counted that annotator twice in
    ``label_counts``; it counts annotators, so once. The labels stay as given."""
    item = _item({"A": "neutral,neutral", "B": "neutral"}, "A,A,B", ["x", "y", "z"])
    panels, skipped = _convert(tmp_path, {"k": item})
    assert not skipped
    assert panels[0].meta["label_counts"] == {"neutral": 2}
    extra = panels[0].outputs[0].model_extra
    assert extra is not None and extra["labels"] == ["neutral", "neutral"]


def test_an_annotator_without_explanation_text_keeps_the_item(tmp_path: Path) -> None:
    """An empty explanation skipped the whole item (a reason the docs did not list); the
    annotator's label is kept, with an empty reasoning the reading names as missing."""
    item = _item({"A": "neutral", "B": "entailment", "C": "neutral"}, "A,B,C", ["x", " ", "z"])
    panels, skipped = _convert(tmp_path, {"k": item})
    assert not skipped
    (panel,) = panels
    outputs = {o.agent: o for o in panel.outputs}
    assert outputs["B"].decision == "entailment" and outputs["B"].reasoning == ""
    assert outputs["B"].model_extra is not None
    assert outputs["B"].model_extra["explanations"] == [" "]
    assert panel.meta["label_counts"] == {"entailment": 1, "neutral": 2}
