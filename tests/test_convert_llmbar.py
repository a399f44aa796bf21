"""LLMBar converter: real data counts, abstentions, Swap_CoT fields, votes, layout errors."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dissensus.convert.llmbar import (
    FAMILIES,
    JUDGE_ORDER,
    find_subsets,
    iter_llmbar_items,
    iter_llmbar_panels,
    iter_llmbar_votes,
)
from dissensus.convert.skips import ConvertError, Skipped
from dissensus.types import Panel, VoteCase

SUBSET_SIZES = {"Natural": 100, "Adversarial/Neighbor": 134, "Adversarial/GPTInst": 92}

# --------------------------------------------------------------------------- helpers

_MISSING = object()


def _entry(winner: Any, text: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"completion": [text, "stop"]}
    if winner is not _MISSING:
        entry["winner"] = winner
    return entry


def write_subset(
    root: Path,
    name: str,
    answers: dict[str, list[tuple[Any, str]]],
    *,
    gold: list[int] | None = None,
    strategy: str = "CoT",
    swapped: dict[str, list[tuple[Any, str]]] | None = None,
) -> Path:
    """Write a tiny LLMBar subset: ``answers[judge][i] = (winner, completion text)``."""
    n = len(next(iter(answers.values())))
    gold = gold if gold is not None else [1 + i % 2 for i in range(n)]
    base = root / name
    base.mkdir(parents=True, exist_ok=True)
    items = [
        {
            "input": f"instruction {i}",
            "output_1": f"one {i}",
            "output_2": f"two {i}",
            "label": gold[i],
        }
        for i in range(n)
    ]
    (base / "dataset.json").write_text(json.dumps(items), encoding="utf-8")
    for judge, per_item in answers.items():
        folder = base / "evaluators" / judge / strategy
        folder.mkdir(parents=True, exist_ok=True)
        results = []
        for i, (winner, text) in enumerate(per_item):
            other = swapped[judge][i] if swapped else (winner, text)
            run = {"swap = False": _entry(winner, text), "swap = True": _entry(*other)}
            results.append({**items[i], "results": [run]})
        (folder / "result.json").write_text(json.dumps(results), encoding="utf-8")
    return base


# --------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def cot_panels(shared_data: Path) -> list[Panel]:
    return list(iter_llmbar_panels(shared_data / "llmbar", "CoT"))


def test_real_counts_per_subset(cot_panels: list[Panel]) -> None:
    counts = Counter(p.meta["subset"] for p in cot_panels)
    assert dict(counts) == SUBSET_SIZES
    assert len({p.id for p in cot_panels}) == sum(SUBSET_SIZES.values())


def test_real_panels_have_six_judges_with_families(cot_panels: list[Panel]) -> None:
    for panel in cot_panels:
        agents = [o.agent for o in panel.outputs]
        missing = set(panel.meta.get("judges_without_trace", {}))
        assert sorted(agents + sorted(missing)) == sorted(JUDGE_ORDER)
        assert agents == [j for j in JUDGE_ORDER if j not in missing]
        for out in panel.outputs:
            assert out.family == FAMILIES[out.agent]
            assert out.reasoning.strip()


def test_real_meta_keeps_gold_and_item(cot_panels: list[Panel], shared_data: Path) -> None:
    dataset = json.loads((shared_data / "llmbar" / "Natural" / "dataset.json").read_text())
    natural = {p.id: p for p in cot_panels if p.meta["subset"] == "Natural"}
    for index, raw in enumerate(dataset):
        panel = natural[f"Natural/{index}"]
        assert panel.meta["gold"] == str(raw["label"])
        assert panel.meta["input"] == raw["input"]
        assert panel.meta["options"] == {"1": raw["output_1"], "2": raw["output_2"]}
        assert "output_1" not in panel.meta
        assert panel.meta["strategy"] == "CoT"


def test_real_abstentions_match_null_winners(cot_panels: list[Panel], shared_data: Path) -> None:
    """Every null winner with text is an abstention; the empty PaLM2 answers carry no trace."""
    path = shared_data / "llmbar" / "Natural" / "evaluators" / "ChatGPT" / "CoT" / "result.json"
    results = json.loads(path.read_text())
    null_items = [
        i for i, r in enumerate(results) if r["results"][0]["swap = False"]["winner"] is None
    ]
    assert null_items, "the real data has a null ChatGPT winner in Natural"
    by_id = {p.id: p for p in cot_panels}
    for index in null_items:
        chatgpt = next(o for o in by_id[f"Natural/{index}"].outputs if o.agent == "ChatGPT")
        assert chatgpt.decision is None
    # The empty PaLM2 completion in Natural/54 is an abstention recorded without a trace.
    assert by_id["Natural/54"].meta["judges_without_trace"] == {"PaLM2": None}
    abstentions = sum(o.decision is None for p in cot_panels for o in p.outputs)
    assert abstentions >= len(null_items)


def test_real_swap_cot_keeps_both_orders(shared_data: Path) -> None:
    panels = list(iter_llmbar_panels(shared_data / "llmbar", "Swap_CoT"))
    assert len(panels) == sum(SUBSET_SIZES.values())
    path = (
        shared_data
        / "llmbar"
        / "Adversarial"
        / "Neighbor"
        / "evaluators"
        / "GPT-4"
        / "Swap_CoT"
        / "result.json"
    )
    results = json.loads(path.read_text())
    neighbor = {p.id: p for p in panels}
    flips = 0
    for index, raw in enumerate(results):
        out = next(
            o for o in neighbor[f"Adversarial/Neighbor/{index}"].outputs if o.agent == "GPT-4"
        )
        swapped = raw["results"][0]["swap = True"]
        assert out.reask is not None
        assert out.reask.decision == swapped["winner"]
        assert out.reask.reasoning == swapped["completion"][0]
        assert out.reask.perturbation == "swap_order"
        flips += out.decision != out.reask.decision
    assert 0 < flips < len(results)


def test_cot_has_no_swap_fields(cot_panels: list[Panel]) -> None:
    assert all(not (o.model_extra or {}) and o.reask is None for p in cot_panels for o in p.outputs)


def test_real_votes_format(shared_data: Path) -> None:
    cases = list(iter_llmbar_votes(shared_data / "llmbar", "CoT"))
    assert len(cases) == sum(SUBSET_SIZES.values())
    for case in cases:
        assert case.gold in {"1", "2"}
        voters = {v.agent for v in case.votes}
        assert voters.isdisjoint(case.meta["abstained"])
        assert voters | set(case.meta["abstained"]) == set(JUDGE_ORDER)
        for vote in case.votes:
            assert vote.answer in {"1", "2"}
            assert vote.evidence_present is False
            assert vote.confidence is None
            assert vote.family == FAMILIES[vote.agent]
            assert vote.evidence_source == f"parametric:{FAMILIES[vote.agent]}"


def test_real_majority_accuracy_matches_data_readme(shared_data: Path) -> None:
    """Natural majority-vote accuracy is about 0.83 (data README); adversarial far lower."""
    accuracy: dict[str, list[bool]] = {}
    for case in iter_llmbar_votes(shared_data / "llmbar", "CoT"):
        counts = Counter(v.answer for v in case.votes)
        top = counts.most_common()
        if len(top) > 1 and top[0][1] == top[1][1]:
            continue
        accuracy.setdefault(case.meta["subset"], []).append(top[0][0] == case.gold)
    natural = sum(accuracy["Natural"]) / len(accuracy["Natural"])
    assert 0.78 <= natural <= 0.88
    for name in ("Adversarial/Neighbor", "Adversarial/GPTInst"):
        assert sum(accuracy[name]) / len(accuracy[name]) < 0.6


# --------------------------------------------------------------------------- synthetic


def test_subset_discovery_names_and_order(tmp_path: Path) -> None:
    answers = {"GPT-4": [("1", "a")], "Falcon": [("2", "b")], "Zeta": [("1", "c")]}
    write_subset(tmp_path, "B", answers)
    write_subset(tmp_path, "A/Deep", answers)
    subsets = find_subsets(tmp_path, "CoT")
    assert [s.name for s in subsets] == ["A/Deep", "B"]
    assert subsets[0].judges == ("GPT-4", "Falcon", "Zeta")
    panel = next(iter_llmbar_panels(tmp_path / "B"))
    assert panel.id == "B/0"  # the directory itself is the subset
    unknown = next(o for o in panel.outputs if o.agent == "Zeta")
    assert unknown.family is None
    vote = next(v for v in next(iter_llmbar_votes(tmp_path)).votes if v.agent == "Zeta")
    assert vote.evidence_source == "parametric:Zeta"


def test_layout_errors(tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match="not a directory"):
        iter_llmbar_panels(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConvertError, match="no LLMBar subset"):
        iter_llmbar_panels(tmp_path / "empty")
    write_subset(tmp_path / "cot_only", "S", {"GPT-4": [("1", "a")], "ChatGPT": [("1", "b")]})
    with pytest.raises(ConvertError, match=r"Vanilla/result\.json"):
        iter_llmbar_panels(tmp_path / "cot_only", "Vanilla")
    with pytest.raises(ConvertError, match="unknown strategy"):
        iter_llmbar_panels(tmp_path / "cot_only", "Best")
    bad = write_subset(tmp_path / "badjson", "S", {"GPT-4": [("1", "a")], "ChatGPT": [("1", "b")]})
    (bad / "evaluators" / "GPT-4" / "CoT" / "result.json").write_text("{not json")
    with pytest.raises(ConvertError, match="invalid JSON"):
        list(iter_llmbar_panels(tmp_path / "badjson"))


def _make_odd(path: Path, kind: str) -> None:
    """Put a ``kind`` (not a regular file) at ``path`` in place of what is there."""
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    if kind == "broken symbolic link":
        path.symlink_to(path.parent / "nowhere.json")
    elif kind == "named pipe":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["broken symbolic link", "named pipe", "directory"])
@pytest.mark.parametrize("file", ["result.json", "dataset.json"])
def test_a_source_file_that_is_not_a_regular_file_is_refused(
    tmp_path: Path, kind: str, file: str
) -> None:
    """A judge whose result.json was a broken symbolic link, a named pipe or a directory
    was passed over (the panels had a judge fewer, exit 0, no word); a dataset.json that
    was a directory hid its subset. Both are refused when the layout is checked, before
    any subset is converted."""
    answers = {"GPT-4": [("1", "a")], "ChatGPT": [("1", "b")], "PaLM2": [("2", "c")]}
    write_subset(tmp_path, "A", answers)
    base = write_subset(tmp_path, "B", answers)
    odd = base / "dataset.json" if file == "dataset.json" else base / "evaluators/PaLM2/CoT" / file
    _make_odd(odd, kind)
    pattern = rf"^{re.escape(str(odd))}: cannot read an LLMBar .*{kind}"
    with pytest.raises(ConvertError, match=pattern):
        find_subsets(tmp_path)
    with pytest.raises(ConvertError, match=pattern):
        iter_llmbar_panels(tmp_path, on_skip=lambda s: None)


def test_malformed_items_are_skipped_with_file_and_index(tmp_path: Path) -> None:
    base = write_subset(
        tmp_path,
        "S",
        {
            "GPT-4": [("1", "a"), ("7", "b"), ("1", "c"), ("2", "d")],
            "ChatGPT": [("1", "a"), ("1", "b"), ("2", "c"), ("", "")],
        },
        gold=[1, 1, 3, 2],
    )
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/0"]
    reasons = {s.item: s for s in skipped}
    assert set(reasons) == {"1", "2", "3"}
    assert reasons["1"].file.endswith("GPT-4/CoT/result.json")
    assert reasons["1"].field.endswith("winner")
    assert reasons["2"].file == str(base / "dataset.json")
    assert reasons["2"].field == "label"
    assert reasons["3"].field.endswith("winner")  # "" is not a winner
    # Without a handler the first skipped item raises.
    with pytest.raises(ConvertError, match="item 1"):
        list(iter_llmbar_panels(tmp_path))


def test_shorter_result_file_skips_the_rest(tmp_path: Path) -> None:
    base = write_subset(
        tmp_path, "S", {"GPT-4": [("1", "a"), ("2", "b")], "ChatGPT": [("1", "a"), ("2", "b")]}
    )
    path = base / "evaluators" / "ChatGPT" / "CoT" / "result.json"
    path.write_text(json.dumps(json.loads(path.read_text())[:1]))
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/0"]
    assert [(s.item, s.file) for s in skipped] == [("1", str(path))]


def test_a_dataset_shorter_than_its_results_is_reported(tmp_path: Path) -> None:
    """The files are index-aligned: results beyond the dataset's items mean a dataset cut
    short, which converted in silence (exit 0) before."""
    base = write_subset(
        tmp_path, "S", {"GPT-4": [("1", "a"), ("2", "b")], "ChatGPT": [("1", "a"), ("2", "b")]}
    )
    dataset = base / "dataset.json"
    dataset.write_text(json.dumps(json.loads(dataset.read_text())[:1]))
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/0"]
    assert sorted(Path(s.file).parts[-3] for s in skipped) == ["ChatGPT", "GPT-4"]
    assert all(s.item == "1-1" and "1 results beyond the 1 items" in s.message for s in skipped)
    skipped.clear()
    list(iter_llmbar_panels(tmp_path, on_skip=skipped.append, per_subset=1))
    assert skipped == []  # a sample of each subset is no dataset cut short


def test_too_few_traces_or_voters_is_skipped(tmp_path: Path) -> None:
    write_subset(
        tmp_path, "S", {"GPT-4": [("1", "a"), (None, "x")], "ChatGPT": [("1", ""), (None, "y")]}
    )
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/1"]  # S/0 has one trace only
    assert [(s.item, s.field) for s in skipped] == [("0", "outputs")]
    skipped.clear()
    cases = list(iter_llmbar_votes(tmp_path, on_skip=skipped.append))
    assert [c.id for c in cases] == ["S/0"]  # the empty-text judge still votes
    assert [(s.item, s.field) for s in skipped] == [("1", "votes")]


def test_per_subset_keeps_first_items(tmp_path: Path) -> None:
    answers = {
        "GPT-4": [("1", f"a{i}") for i in range(5)],
        "ChatGPT": [("2", f"b{i}") for i in range(5)],
    }
    write_subset(tmp_path, "A", answers)
    write_subset(tmp_path, "B", answers)
    ids = [p.id for p in iter_llmbar_panels(tmp_path, per_subset=2)]
    assert ids == ["A/0", "A/1", "B/0", "B/1"]
    with pytest.raises(ConvertError):
        iter_llmbar_panels(tmp_path, per_subset=0)


_winner = st.sampled_from(["1", "2", 1, 2, None, _MISSING])


@given(st.lists(st.tuples(_winner, _winner, _winner), min_size=1, max_size=4))
def test_decisions_and_swaps_are_carried_exactly(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[Any, Any, Any]]
) -> None:
    """Decision = winner as a string, null/missing = abstention; swapped answers kept."""
    root = tmp_path_factory.mktemp("llmbar")
    judges = ("GPT-4", "PaLM2", "Falcon")
    answers = {
        j: [(row[k], f"{j} reasons {i}") for i, row in enumerate(rows)]
        for k, j in enumerate(judges)
    }
    swapped = {
        j: [(row[(k + 1) % 3], f"{j} swapped {i}") for i, row in enumerate(rows)]
        for k, j in enumerate(judges)
    }
    write_subset(root, "S", answers, strategy="Swap_CoT", swapped=swapped)

    def norm(w: Any) -> str | None:
        return None if w is None or w is _MISSING else str(w)

    panels = list(iter_llmbar_panels(root, "Swap_CoT"))
    assert len(panels) == len(rows)
    for i, panel in enumerate(panels):
        for k, out in enumerate(panel.outputs):
            assert out.agent == judges[k]
            assert out.decision == norm(rows[i][k])
            assert out.model_extra == {}
            assert out.reask is not None
            assert out.reask.decision == norm(rows[i][(k + 1) % 3])
            assert out.reask.reasoning == f"{judges[k]} swapped {i}"
            assert out.reask.perturbation == "swap_order"
        # A panel survives a JSONL round trip unchanged.
        assert Panel.model_validate_json(panel.model_dump_json(exclude_defaults=True)) == panel
    skipped: list[Skipped] = []
    cases = list(iter_llmbar_votes(root, "Swap_CoT", on_skip=skipped.append))
    for case in cases:
        assert all(v.answer in {"1", "2"} for v in case.votes)
        assert VoteCase.model_validate_json(case.model_dump_json()) == case
    voting_rows = [r for r in rows if sum(norm(w) is not None for w in r) >= 2]
    assert len(cases) == len(voting_rows)
    assert len(skipped) == len(rows) - len(voting_rows)


def test_items_expose_gold_and_answers(tmp_path: Path) -> None:
    write_subset(tmp_path, "S", {"GPT-4": [("2", "t")], "LLaMA2": [(None, "u")]}, gold=[2])
    item = next(iter_llmbar_items(tmp_path))
    assert item.gold == "2"
    assert item.answers["GPT-4"].decision == "2"
    assert item.answers["LLaMA2"].decision is None
    assert item.swapped == {}


@pytest.mark.parametrize(
    ("name", "strategy"), [("llmbar-cot.jsonl", "CoT"), ("llmbar-swap.jsonl", "Swap_CoT")]
)
def test_bundled_examples_are_reproducible(
    shared_data: Path, repo_root: Path, name: str, strategy: str
) -> None:
    """examples/ holds exactly what the documented convert command produces (and stays small)."""
    path = repo_root / "examples" / name
    expected = [
        p.model_dump_json(exclude_defaults=True)
        for p in iter_llmbar_panels(shared_data / "llmbar", strategy, per_subset=50)
    ]
    assert path.read_text(encoding="utf-8").splitlines() == expected
    assert path.stat().st_size < 2_000_000
    notice = (repo_root / "examples" / "LICENSE-llmbar").read_text(encoding="utf-8")
    assert "MIT License" in notice and "Zeng et al., ICLR 2024" in notice


# --------------------------------------------------------------------------- reader bounds


def _read_back(record: Panel | VoteCase) -> Panel | VoteCase | str:
    """What a reader makes of the line the converter writes: the record, or the reject."""
    from dissensus.io.jsonl import Reject, parse_line

    line = record.model_dump_json(exclude_defaults=True)
    parsed = parse_line(type(record), line, file="out.jsonl", line=1)
    return parsed.describe() if isinstance(parsed, Reject) else parsed


def test_a_panel_no_reader_takes_is_skipped_naming_its_source_field(tmp_path: Path) -> None:
    """A completion of 5,000,000 characters (over the 32,768 a field holds): the item is
    skipped naming the judge's result.json and its field, never written for every reader
    to refuse; a completion of exactly 32,768 characters is converted and read back."""
    write_subset(
        tmp_path,
        "S",
        {
            "GPT-4": [("1", "x" * 5_000_000), ("1", "y" * 32_768), ("2", "fine")],
            "PaLM2": [("1", "ok"), ("2", "ok"), ("2", "ok")],
        },
    )
    skipped: list[Skipped] = []
    panels = list(iter_llmbar_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["S/1", "S/2"]
    assert all(_read_back(p) == p for p in panels)
    (skip,) = skipped
    assert skip.file == str(tmp_path / "S" / "evaluators" / "GPT-4" / "CoT" / "result.json")
    assert (skip.item, skip.field) == ("0", "results.0.swap = False.completion")
    assert "5000000 characters; at most 32768 per field" in skip.message
    assert "'GPT-4'" in skip.message and "outputs.0.reasoning" in skip.message
    # Vote cases carry no completion: the same item is a vote case every reader takes.
    cases = list(iter_llmbar_votes(tmp_path))
    assert [c.id for c in cases] == ["S/0", "S/1", "S/2"]
    assert all(_read_back(c) == c for c in cases)


def test_an_instruction_over_the_field_bound_names_the_dataset_field(tmp_path: Path) -> None:
    base = write_subset(tmp_path, "S", {"GPT-4": [("1", "a")] * 2, "PaLM2": [("2", "b")] * 2})
    items = json.loads((base / "dataset.json").read_text())
    items[1]["output_2"] = "z" * 40_000
    (base / "dataset.json").write_text(json.dumps(items))
    for result in base.glob("evaluators/*/CoT/result.json"):  # which repeat the item
        results = json.loads(result.read_text())
        results[1]["output_2"] = items[1]["output_2"]
        result.write_text(json.dumps(results))
    skipped: list[Skipped] = []
    assert [p.id for p in iter_llmbar_panels(tmp_path, on_skip=skipped.append)] == ["S/0"]
    assert [(s.file, s.item, s.field) for s in skipped] == [
        (str(base / "dataset.json"), "1", "output_2")
    ]


def test_an_empty_dataset_is_an_error(tmp_path: Path) -> None:
    base = write_subset(tmp_path, "S", {"GPT-4": [("1", "a")], "PaLM2": [("2", "b")]})
    (base / "dataset.json").write_text("[]")
    with pytest.raises(ConvertError, match=r"dataset.json: no item \(an empty list\)"):
        list(iter_llmbar_panels(tmp_path, on_skip=lambda s: None))


def test_a_long_winner_is_quoted_bounded(tmp_path: Path) -> None:
    write_subset(tmp_path, "S", {"GPT-4": [("w" * 40_000, "a")], "PaLM2": [("2", "b")]})
    skipped: list[Skipped] = []
    assert list(iter_llmbar_panels(tmp_path, on_skip=skipped.append)) == []
    (skip,) = skipped
    assert skip.field == "results.0.swap = False.winner"
    assert "(40000 characters)" in skip.message and len(skip.message) < 300
