"""Converters at their input edges: source files that do not line up, and names no
agent id may hold, are reported one by one, never converted wrong nor a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_helpers import run_cli
from dissensus.convert.llmbar import iter_llmbar_panels, iter_llmbar_votes
from dissensus.convert.skips import ConvertError, Skipped
from dissensus.convert.varierrnli import iter_varierrnli_panels
from dissensus.convert.zeroeval import extract_answer, iter_zeroeval_panels
from test_convert_llmbar import write_subset

# --------------------------------------------------------------------------- LLMBar alignment


def _three_items(tmp_path: Path) -> Path:
    answers = [("1", "judged a"), ("2", "judged b"), ("1", "judged c")]
    return write_subset(tmp_path, "S", {"GPT-4": answers, "ChatGPT": answers, "PaLM2": answers})


def test_a_result_file_with_an_entry_left_out_puts_no_verdict_on_another_item(
    tmp_path: Path,
) -> None:
    """A result file with its middle entry left out gave every later item the verdict the
    judge gave on the item after it, and reported only the last item as missing."""
    base = _three_items(tmp_path)
    path = base / "evaluators" / "GPT-4" / "CoT" / "result.json"
    results = json.loads(path.read_text())
    del results[1]
    path.write_text(json.dumps(results))
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/0"]
    assert [(s.file, s.item, s.field) for s in skipped] == [
        (str(path), "1", "input"),
        (str(path), "2", "<item>"),
    ]
    assert "this result is for another item" in skipped[0].message
    # The vote cases read the same items.
    skipped.clear()
    assert [c.id for c in iter_llmbar_votes(tmp_path, on_skip=skipped.append)] == ["S/0"]
    assert [s.item for s in skipped] == ["1", "2"]


@pytest.mark.parametrize("key", ["input", "output_1", "output_2"])
def test_a_result_entry_of_another_item_is_skipped_naming_the_field(
    tmp_path: Path, key: str
) -> None:
    base = _three_items(tmp_path)
    path = base / "evaluators" / "ChatGPT" / "CoT" / "result.json"
    results = json.loads(path.read_text())
    results[2][key] = "something else"
    path.write_text(json.dumps(results))
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/0", "S/1"]
    assert [(s.file, s.item, s.field) for s in skipped] == [(str(path), "2", key)]


def test_a_result_entry_without_the_item_texts_is_read_by_position(tmp_path: Path) -> None:
    base = _three_items(tmp_path)
    path = base / "evaluators" / "ChatGPT" / "CoT" / "result.json"
    results = [{"results": r["results"]} for r in json.loads(path.read_text())]
    path.write_text(json.dumps(results))
    panels = list(iter_llmbar_panels(tmp_path))
    assert [p.outputs[1].reasoning for p in panels] == ["judged a", "judged b", "judged c"]


# --------------------------------------------------------------------------- names


def test_a_judge_directory_named_with_a_control_character_is_a_layout_error(
    tmp_path: Path,
) -> None:
    """Converting to vote cases was a pydantic traceback; to panels, every item was
    skipped with the same model error."""
    write_subset(tmp_path, "S", {"GPT-4": [("1", "a")], "Bad\x07": [("2", "b")]})
    with pytest.raises(ConvertError, match=r"the judge's name 'Bad\\x07' holds the control"):
        iter_llmbar_votes(tmp_path)
    with pytest.raises(ConvertError, match="U\\+0007"):
        iter_llmbar_panels(tmp_path)
    proc = run_cli("convert", "llmbar", str(tmp_path), "--as", "votes")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "U+0007" in proc.stderr
    assert proc.stdout == ""


def test_a_model_file_named_with_a_control_character_is_a_layout_error(tmp_path: Path) -> None:
    rows = [{"session_id": "s0", "question": "q", "output": ['{"answer": "4"}'], "answer": "# 4"}]
    for model in ("gpt-a", "gemma\x1b"):
        (tmp_path / f"{model}.json").write_text(json.dumps(rows))
    with pytest.raises(ConvertError, match="the model's name 'gemma\\\\x1b' holds the control"):
        iter_zeroeval_panels(tmp_path)
    proc = run_cli("convert", "zeroeval", str(tmp_path))
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "U+001B" in proc.stderr


def test_an_annotator_named_with_a_control_character_skips_that_item(tmp_path: Path) -> None:
    labels = {"soft_label": None, "text": {"context": "c", "statement": "s"}}

    def item(names: list[str]) -> dict[str, object]:
        return {
            **labels,
            "annotators": ",".join(names),
            "annotations": dict.fromkeys(names, "neutral"),
            "other_info": {"explanations": ["why"] * len(names)},
        }

    source = tmp_path / "v.json"
    source.write_text(json.dumps({"1": item(["A", "B\x07"]), "2": item(["A", "B"])}))
    skipped: list[Skipped] = []
    panels = list(iter_varierrnli_panels(source, on_skip=skipped.append))
    assert [p.id for p in panels] == ["2"]
    assert [(s.item, s.field) for s in skipped] == [("1", "annotations.B\x07")]
    assert "U+0007" in skipped[0].message
    proc = run_cli("convert", "varierrnli", str(source))
    assert proc.returncode == 3
    assert "Traceback" not in proc.stderr and "U+0007" in proc.stderr
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ["2"]


# --------------------------------------------------------------------------- ZeroEval text


def test_a_json_block_reasoning_that_decodes_to_a_lone_surrogate_is_no_reasoning(
    tmp_path: Path,
) -> None:
    """The model's text is valid; the reasoning its JSON block decodes to is not (a lone
    surrogate escape): the conversion stopped with a pydantic traceback."""
    bad = '{"reasoning": "\\ud800 so 2 + 2", "answer": "4"}'
    good = '{"reasoning": "2 + 2", "answer": "4"}'
    for model, out in (("m-a", bad), ("m-b", good)):
        rows = [{"session_id": "s0", "question": "q", "output": [out], "answer": "# 4"}]
        (tmp_path / f"{model}.json").write_text(json.dumps(rows))
    (panel,) = iter_zeroeval_panels(tmp_path)
    assert [(o.decision, o.reasoning) for o in panel.outputs] == [("4", bad), ("4", "2 + 2")]
    assert extract_answer(bad) == ("4", bad)
    proc = run_cli("convert", "zeroeval", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["outputs"][0]["reasoning"] == bad


# --------------------------------------------------------------------------- LLMBar layout


def test_subsets_behind_symbolic_links_are_read(tmp_path: Path) -> None:
    """A folder of links to chosen subsets converted only the subsets that were real
    folders in it, exit 0; with only links, 'no LLMBar subset found'."""
    store = tmp_path / "store"
    answers = [("1", "judged a"), ("2", "judged b")]
    write_subset(store, "Natural", {"GPT-4": answers, "PaLM2": answers})
    write_subset(store, "Adversarial/Neighbor", {"GPT-4": answers, "PaLM2": answers})
    farm = tmp_path / "farm"
    (farm / "Adversarial").mkdir(parents=True)
    (farm / "Natural").symlink_to(store / "Natural", target_is_directory=True)
    (farm / "Adversarial" / "Neighbor").symlink_to(
        store / "Adversarial" / "Neighbor", target_is_directory=True
    )
    ids = ["Adversarial/Neighbor/0", "Adversarial/Neighbor/1", "Natural/0", "Natural/1"]
    assert [p.id for p in iter_llmbar_panels(farm)] == ids
    # A link loop ends; a folder reached twice is read once, under its first path.
    (farm / "Adversarial" / "loop").symlink_to(farm, target_is_directory=True)
    (farm / "Natural2").symlink_to(store / "Natural", target_is_directory=True)
    assert [p.id for p in iter_llmbar_panels(farm)] == ids
    proc = run_cli("convert", "llmbar", str(farm))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["id"] for line in proc.stdout.splitlines()] == ids


# --------------------------------------------------------------------------- names not UTF-8


def test_names_whose_bytes_are_not_utf8_are_layout_errors(tmp_path: Path) -> None:
    """A judge directory, a subset or a model file named with bytes that are not UTF-8
    (Python keeps them as lone surrogates) became an agent or panel id no model takes:
    a traceback for vote cases and model files, a skip per item for panels."""
    import os

    judges = tmp_path / "judges"
    write_subset(judges, "S", {"GPT-4": [("1", "a")], "J\udcff": [("2", "b")]})
    with pytest.raises(ConvertError, match=r"the judge's name 'J\\xff' is not UTF-8 text"):
        iter_llmbar_votes(judges)
    subset = tmp_path / "subset"
    write_subset(subset, "N\udcff", {"GPT-4": [("1", "a")], "PaLM2": [("2", "b")]})
    with pytest.raises(ConvertError, match=r"the subset's name 'N\\xff' is not UTF-8 text"):
        iter_llmbar_panels(subset)
    models = tmp_path / "models"
    models.mkdir()
    rows = [{"session_id": "s0", "question": "q", "output": ['{"answer": "4"}'], "answer": "# 4"}]
    for model in ("gpt-a", "Y\udcff"):
        (models / f"{model}.json").write_text(json.dumps(rows))
    with pytest.raises(ConvertError, match=r"the model's name 'Y\\xff' is not UTF-8 text"):
        iter_zeroeval_panels(models)
    for args in (["llmbar", judges, "--as", "votes"], ["llmbar", subset], ["zeroeval", models]):
        proc = run_cli("convert", *(os.fsdecode(a) if isinstance(a, Path) else a for a in args))
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and "is not UTF-8 text" in proc.stderr
        assert proc.stdout == ""
