"""ZeroEval converter: answer extraction (unparseable = abstention), panels, real data."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.convert.skips import ConvertError, Skipped
from dissensus.convert.zeroeval import (
    extract_answer,
    iter_zeroeval_panels,
    model_family,
    normalise_number,
)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('{"reasoning": "9 * 2 = 18", "answer": "18"}', "18"),
        ('Here:\n```json\n{"reasoning": "r", "answer": "$1,800.00"}\n```', "1800"),
        ('{"reasoning": "r", "answer": 42,}', "42"),
        ('{"reasoning": "r", "answer": "9 * 2 = 18 dollars"}', "18"),
        ('{"reasoning": "long and cut', None),
        ('{"reasoning": "x \\" y", "answer": "7"  and then prose', "7"),
        ("So the final answer is 3.50.", "3.5"),
        ("#### -4", "-4"),
        ('{"reasoning": "no", "answer": "None"}', None),
        ("I cannot solve this.", None),
        ("", None),
        # "-$X" keeps its sign ("$" was replaced by a space before the number was read).
        ('{"reasoning": "r", "answer": "-$10,000"}', "-10000"),
        ('{"reasoning": "r", "answer": "-$2.50"}', "-2.5"),
        ('{"reasoning": "r", "answer": "$20-$5"}', "5"),  # a subtraction, not a sign
        # A fraction is its value when 6 places hold it exactly, else no vote (2/3 was 3).
        ('{"reasoning": "r", "answer": "2/3"}', None),
        ('{"reasoning": "r", "answer": "7/9"}', None),
        ('{"reasoning": "r", "answer": "S - 16/3"}', None),
        ('{"reasoning": "r", "answer": "3/4"}', "0.75"),
        ('{"reasoning": "r", "answer": "3 1/2 cups"}', "3.5"),
        ('{"reasoning": "r", "answer": "35/7 = 5"}', "5"),
        ("The answer is \\boxed{\\frac{1}{8}}", "0.125"),  # was 1
        ("The answer is \\boxed{\\frac{2}{3}}", None),
        ("#### 7/9", None),
        # A clock time is no number (12:30 was 30).
        ('{"reasoning": "r", "answer": "12:30 pm"}', None),
        # A refusal is no vote, whatever number it mentions.
        ('{"reasoning": "r", "answer": "I cannot solve this, step 3 failed"}', None),
        ('{"reasoning": "r", "answer": "Cannot be determined without the 10-year figure"}', None),
        ("I cannot solve this, step 3 failed. The answer is: not determinable", None),
        # A stated answer without a number is an abstention: no number is looked for in
        # the reasoning ("None" fell through to "the answer is 18").
        ('{"reasoning": "so the answer is 18", "answer": "None"}', None),
        ('{"reasoning": "so the answer is 18", "answer": null}', None),
        ('{"reasoning": "so the answer is 18", "answer": ""}', None),
        ('{"reasoning": "so the answer is 13", "answer": "___"}', None),
        ('{"reasoning": "r", "answer": {"blue": 4, "red": 6}}', None),
        ('{"reasoning": "the answer is 18"}', "18"),  # no answer field: the phrase
        ('{"reasoning": "the answer is 18", "answer": "', "18"),  # cut off in it
        # After "the answer is", its sentence only: what comes after counts nothing else
        # (a unanimous 7 read as 3, 2 and 7).
        ("The answer is 7. I double-checked it 3 times.", "7"),
        ("The answer is 7 (verified in 2 ways).", "7"),
        ("The answer is 18, since 3 more came.", "18"),
        ("The answer is 9 * 2 = 18. Done in 2 steps", "18"),
        ("The final answer is $1,800.00 in total; 3 payments", "1800"),
        ("The answer is 3.5 cups! 2 more", "3.5"),
    ],
)
def test_extract_answer(text: str, answer: str | None) -> None:
    got, reasoning = extract_answer(text)
    assert got == answer
    assert bool(reasoning.strip()) == bool(text.strip())  # nothing invented for no text


def test_normalise_number() -> None:
    assert normalise_number("# 1,234") == "1234"
    assert normalise_number("18.0") == "18"
    assert normalise_number("0.250") == "0.25"
    assert normalise_number("none") is None
    # An exponent belongs to its number (the vote of "1e5" was 5, of "1.5e-3" -3).
    assert normalise_number("The answer is 1e5") == "100000"
    assert normalise_number("1.5e-3") == "0.0015"
    assert normalise_number("2.5E+2 apples") == "250"
    assert normalise_number("1e999999") is None  # not a finite number: no vote
    assert normalise_number("3 eggs") == "3"


def test_family_from_name() -> None:
    assert model_family("Meta-Llama-3-8B-Instruct") == "meta"
    assert model_family("Mixtral-8x7B-Instruct-v0.1") == "mistral"
    assert model_family("Yi-1.5-9B-Chat") == "01-ai"
    assert model_family("my-model") == "my-model"


def _write(root: Path) -> Path:
    items = {
        "m-a": ['{"reasoning": "2+2", "answer": "4"}', '{"reasoning": "cut'],
        "gpt-b": [
            '{"reasoning": "two and two", "answer": "4"}',
            '{"reasoning": "3", "answer": "3"}',
        ],
    }
    for model, outs in items.items():
        rows = [
            {
                "session_id": f"s{k}",
                "question": f"q{k}",
                "output": [o],
                "answer": "# 4" if k == 0 else "# 3",
                "source": "gsm",
            }
            for k, o in enumerate(outs)
        ]
        (root / f"{model}.json").write_text(json.dumps(rows))
    return root


def test_panels_with_abstention_and_gold(tmp_path: Path) -> None:
    skipped = []
    panels = list(iter_zeroeval_panels(_write(tmp_path), on_skip=skipped.append))
    assert [p.id for p in panels] == ["s0", "s1"]
    assert panels[0].meta["gold"] == "4" and panels[1].meta["gold"] == "3"
    second = {o.agent: o.decision for o in panels[1].outputs}
    assert second == {"gpt-b": "3", "m-a": None}
    assert not skipped


def test_layout_errors(tmp_path: Path) -> None:
    with pytest.raises(ConvertError, match="at least two"):
        list(iter_zeroeval_panels(tmp_path))
    with pytest.raises(ConvertError, match="not a directory"):
        list(iter_zeroeval_panels(tmp_path / "missing"))


def test_real_gsm8k(shared_data: Path) -> None:
    root = shared_data / "zeroeval-gsm"
    if not root.is_dir():
        pytest.skip(f"no ZeroEval data at {root}")
    panels = list(iter_zeroeval_panels(root, limit=200))
    assert len(panels) == 200 and all(len(p.outputs) == 9 for p in panels)
    votes = [o.decision for p in panels for o in p.outputs]
    right = sum(o.decision == p.meta["gold"] for p in panels for o in p.outputs)
    assert right / len(votes) > 0.7
    assert sum(v is None for v in votes) < 0.05 * len(votes)


_ITEM = st.one_of(
    st.builds(lambda k: {"session_id": f"s{k}"}, st.integers(0, 4)),
    st.builds(lambda k: {"session_id": k}, st.integers(0, 4)),
    st.just({}),
    st.sampled_from([None, 3, "text", ["s0"]]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_ITEM, max_size=8), min_size=2, max_size=4))
def test_no_item_is_dropped_silently(models: list[list[object]]) -> None:
    """Every item of every model file ends up in a panel, or is reported (its own index,
    or its problem as a whole); a repeated session_id keeps the first item of it."""
    files = {f"m{n}": items for n, items in enumerate(models)}
    for items in files.values():
        for k, item in enumerate(items):
            if isinstance(item, dict) and "session_id" in item:
                item.update(question="q", answer="4", output=[f'{{"answer": "{k}"}}'])
    skipped: list[Skipped] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, items in files.items():
            (Path(tmp) / f"{name}.json").write_text(json.dumps(items))
        if not any(files.values()):  # nothing to convert at all: an error, not 0 panels
            with pytest.raises(ConvertError, match="no problem in any model file"):
                iter_zeroeval_panels(tmp, on_skip=skipped.append)
            return
        panels = list(iter_zeroeval_panels(tmp, on_skip=skipped.append))
    # An item is reported by its index, a problem as a whole by its session_id (s0-s4),
    # naming a model file either way (never the directory).
    assert all(Path(s.file).parent == Path(tmp) and s.file.endswith(".json") for s in skipped)
    reported_items = {(Path(s.file).stem, int(s.item)) for s in skipped if s.item.isdigit()}
    reported_problems = {s.item for s in skipped if s.item.startswith("s")}
    answered = {(o.agent, p.id): o.decision for p in panels for o in p.outputs}
    # A model without an answer to a problem another model answered is reported once.
    missing = {Path(s.file).stem for s in skipped if s.item == "<missing>"}
    considered = {p.id for p in panels}
    for name in files:
        lacking = [sid for sid in considered if (name, sid) not in answered]
        assert (name in missing) == bool(lacking), (name, lacking)
    for name, items in files.items():
        first: dict[str, int] = {}
        for k, item in enumerate(items):
            sid = item.get("session_id") if isinstance(item, dict) else None
            if isinstance(sid, str) and sid not in first:
                first[sid] = k
                assert (name, k) not in reported_items
                assert answered.get((name, sid)) == str(k) or sid in reported_problems
            else:
                assert (name, k) in reported_items, (name, k, item)


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("12345678901234567890123", "12345678901234567890123"),
        ("1e30", "1" + "0" * 30),
        ("-1E+25", "-1" + "0" * 25),
        ("2.0", "2"),
        ("-0.0", "0"),
        ("9007199254740993", "9007199254740993"),  # 2**53 + 1: a float reads 2**53
        ("12345678901234567890.5", "12345678901234567890.5"),
        # A fraction keeps 6 places (a float's print artifact reads as the number meant).
        ("106.09000000000001", "106.09"),
        ("2.6666666666666665", "2.666667"),
        ("0.3333333", "0.333333"),
        ("2.0000001", "2"),
        ("1e-999999", "0"),
    ],
)
def test_integers_are_exact_and_fractions_keep_six_places(text: str, number: str) -> None:
    """Integers were read through a float (12345678901234567890123 became
    12345678901234567741440, 1e30 1000000000000000019884624838656)."""
    assert normalise_number(text) == number
    assert extract_answer(json.dumps({"reasoning": "r", "answer": text}))[0] == number
    # As a JSON number too: read as written, not through the float JSON parsing makes.
    assert extract_answer(f'{{"reasoning": "r", "answer": {text}}}')[0] == number


def _rows(golds: list[str], outputs: list[str] | None = None) -> list[dict[str, object]]:
    return [
        {
            "session_id": f"s{k}",
            "question": f"q{k}",
            "output": [json.dumps({"answer": (outputs or ["4"] * len(golds))[k]})],
            "answer": gold,
        }
        for k, gold in enumerate(golds)
    ]


def test_a_gold_other_files_disagree_on_is_reported_and_the_problem_skipped(
    tmp_path: Path,
) -> None:
    """Model files giving one question different golds: which is right cannot be told
    (the first file's was taken with no word); the same gold written differently agrees."""
    (tmp_path / "a.json").write_text(json.dumps(_rows(["# 19", "# 4", "# 1,800", "# 7"])))
    b = _rows(["# 18", "4", "1800.0", "7"])
    del b[3]["answer"]  # no gold given: it contradicts none
    (tmp_path / "b.json").write_text(json.dumps(b))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    golds = [(p.id, p.meta["gold"]) for p in panels]
    assert golds == [("s1", "4"), ("s2", "1800"), ("s3", "7")]
    (skip,) = skipped
    assert (skip.file, skip.item, skip.field) == (str(tmp_path / "b.json"), "s0", "answer")
    assert "'# 18' differs from '# 19' in a.json" in skip.message
    with pytest.raises(ConvertError, match="item s0: field 'answer'"):
        list(iter_zeroeval_panels(tmp_path))


def test_a_panel_no_reader_takes_is_skipped_naming_the_model_file(tmp_path: Path) -> None:
    from dissensus.io.jsonl import parse_line
    from dissensus.types import Panel

    long_id = "s" * 50_000
    a = _rows(["4", "4", "4"])
    a[1]["output"] = ["x" * 40_000]  # no answer in it: the raw output is the reasoning
    a[2]["output"] = ["y" * 32_768]
    a[0]["session_id"] = long_id
    b = _rows(["4", "4", "4"])
    b[0]["session_id"] = long_id
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["s2"]
    line = panels[0].model_dump_json(exclude_defaults=True)
    assert parse_line(Panel, line, file="out", line=1) == panels[0]
    assert [(Path(s.file).name, s.field) for s in skipped] == [
        ("a.json", "session_id"),
        ("a.json", "output"),
    ]
    assert skipped[0].item.endswith("(50000 characters)") and len(skipped[0].item) < 250
    assert "'a'" in skipped[1].message and "40000 characters" in skipped[1].message


def test_a_directory_of_empty_files_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text("[]")
    (tmp_path / "b.json").write_text("[]")
    with pytest.raises(ConvertError, match="no problem in any model file"):
        iter_zeroeval_panels(tmp_path)


def test_the_gold_comes_from_the_files_that_give_one(tmp_path: Path) -> None:
    """The gold was read from the first model file only: a first file without a gold for
    a problem skipped it ("gold is not a number: None") though the others agreed."""
    a = _rows(["# 18", "# 7", "# 5", "# 9"])
    a[0]["answer"] = None
    del a[1]["answer"]
    a[2]["answer"] = "  "
    b = _rows(["# 18", "7", "# 5", "# 9"])
    b[3]["answer"] = None
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert not skipped
    assert [(p.id, p.meta["gold"]) for p in panels] == [
        ("s0", "18"),
        ("s1", "7"),
        ("s2", "5"),
        ("s3", "9"),
    ]


def test_a_problem_without_a_usable_gold_is_skipped_naming_the_file(tmp_path: Path) -> None:
    """The skip named the directory; it names the model file at fault."""
    a = _rows(["# 18", "# 4", "# 4", "# 4"])
    a[0]["answer"] = None
    a[2]["answer"] = "none"
    b = _rows(["# 18", "# 4", "# 4", "# 4"])
    b[0]["answer"] = None
    b[1]["answer"] = "# five"
    del b[3]  # only a.json answers s3
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert panels == []
    assert [(Path(s.file).name, s.item, s.field) for s in skipped] == [
        ("a.json", "s0", "answer"),
        ("b.json", "s1", "answer"),
        ("a.json", "s2", "answer"),
        ("a.json", "s3", "<item>"),
    ]
    assert "no model file gives a gold" in skipped[0].message
    assert "gold is not a number: '# five'" in skipped[1].message
    assert "only 1 model(s) answered" in skipped[3].message


@pytest.mark.parametrize("kind", ["broken symbolic link", "named pipe", "directory"])
def test_a_model_file_that_is_not_a_regular_file_is_refused(tmp_path: Path, kind: str) -> None:
    """A broken symbolic link, a named pipe or a directory named <model>.json was passed
    over: the panels had a model fewer, with no word and exit 0."""
    (tmp_path / "a.json").write_text(json.dumps(_rows(["4"])))
    (tmp_path / "b.json").write_text(json.dumps(_rows(["4"])))
    odd = tmp_path / "c.json"
    if kind == "broken symbolic link":
        odd.symlink_to(tmp_path / "nowhere.json")
    elif kind == "named pipe":
        os.mkfifo(odd)
    else:
        odd.mkdir()
    with pytest.raises(ConvertError, match=rf"^{re.escape(str(odd))}: cannot read .*{kind}"):
        iter_zeroeval_panels(tmp_path, on_skip=lambda s: None)


# Model, problem, what the model wrote, what was read before, what is read now.
REAL_CHANGES = [
    ("Meta-Llama-3-8B-Instruct", 2, "-$10,000", "10000", "-10000"),
    ("Phi-3.5-mini-instruct", 15, "-$4,875", "4875", "-4875"),
    ("Phi-3.5-mini-instruct", 608, "-$2.50", "2.5", "-2.5"),
    ("Phi-3.5-mini-instruct", 827, "-$21.00", "21", "-21"),
    ("gpt-3.5-turbo-0125", 943, "-$110", "110", "-110"),
    ("gpt-3.5-turbo-0125", 1114, "-$14", "14", "-14"),
    ("Meta-Llama-3-8B-Instruct", 504, "2/3", "3", None),
    ("Mixtral-8x7B-Instruct-v0.1", 806, "7/9", "9", None),
    ("Mixtral-8x7B-Instruct-v0.1", 214, "S - 16/3", "3", None),
    ("gemma-2-9b-it", 815, "3 1/3", "3", None),
    ("Qwen2-7B-Instruct", 1001, "2:00 pm", "0", None),
    ("gemma-2-9b-it", 1166, "Cannot be determined", "10", None),
    ("Phi-3.5-mini-instruct", 855, "___", "13", None),
]


def test_real_answers_the_extraction_reads_differently(shared_data: Path) -> None:
    root = shared_data / "zeroeval-gsm"
    if not root.is_dir():
        pytest.skip(f"no ZeroEval data at {root}")
    outputs: dict[tuple[str, int], str] = {}
    for model in {m for m, *_ in REAL_CHANGES}:
        for item in json.loads((root / f"{model}.json").read_text()):
            outputs[(model, int(item["session_id"].split("#")[1]))] = item["output"][0]
    for model, problem, written, _before, now in REAL_CHANGES:
        text = outputs[(model, problem)]
        assert written in text, (model, problem)
        assert extract_answer(text)[0] == now, (model, problem, written)


def _problem(output: object, **extra: object) -> list[dict[str, object]]:
    """Problem s0 with ``output`` as given (``...``: no ``output`` key), then s1 answered."""
    first: dict[str, object] = {"session_id": "s0", "question": "q0", "answer": "# 18"}
    if output is not ...:
        first["output"] = output
    first.update(extra)
    second = {"session_id": "s1", "question": "q1", "output": ['{"answer": "4"}'], "answer": "4"}
    return [first, second]


@pytest.mark.parametrize(
    "output", [..., None, [], [""], [None], ["  \n"], [None, "", " "]], ids=repr
)
def test_an_empty_output_is_an_abstention_with_no_reasoning(tmp_path: Path, output: object) -> None:
    """Every empty output was given the reasoning "(no output)": silent models read as
    identical reasoning (similarity 1.0), and a panel of them was CD, escalated."""
    from dissensus.states.reading import State, read_panel
    from dissensus.states.similarity import get_backend

    for model in ("A", "B", "C"):
        (tmp_path / f"{model}.json").write_text(json.dumps(_problem(output)))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert not skipped
    assert [p.id for p in panels] == ["s0", "s1"]
    assert [(o.agent, o.decision, o.reasoning) for o in panels[0].outputs] == [
        ("A", None, ""),
        ("B", None, ""),
        ("C", None, ""),
    ]
    reading = read_panel(panels[0], get_backend("tfidf"))
    assert reading.missing_reasoning == ["A", "B", "C"]
    assert not reading.similarity_defined
    assert reading.state is State.DIVERGENT_DISAGREEMENT


def test_an_empty_output_beside_models_that_wrote_leaves_their_similarity_alone(
    tmp_path: Path,
) -> None:
    """The silent model is named, its vote absent; the others are read on their texts."""
    (tmp_path / "a.json").write_text(json.dumps(_problem([])))
    for model in ("b", "c"):
        (tmp_path / f"{model}.json").write_text(
            json.dumps(_problem(['{"reasoning": "9 * 2 = 18", "answer": "18"}']))
        )
    (panel, _) = iter_zeroeval_panels(tmp_path)
    assert [(o.agent, o.decision, o.reasoning) for o in panel.outputs] == [
        ("a", None, ""),
        ("b", "18", "9 * 2 = 18"),
        ("c", "18", "9 * 2 = 18"),
    ]


@pytest.mark.parametrize(
    ("output", "message"),
    [
        (
            [{"reasoning": "r", "answer": "18"}],
            "element 0 must be a string or null, got dict {'answer': '18', 'reasoning': 'r'}",
        ),
        ([["a"]], "element 0 must be a string or null, got list ['a']"),
        ([True], "element 0 must be a string or null, got bool True"),
        (["text", 18], "element 1 must be a string or null, got int 18"),
        ("the answer is 18", "must be a list of strings (or null), got str 'the answer is 18'"),
        ({"answer": "18"}, "must be a list of strings (or null), got dict {'answer': '18'}"),
        (18, "must be a list of strings (or null), got int 18"),
    ],
    ids=repr,
)
def test_an_output_that_is_not_text_skips_its_problem(
    tmp_path: Path, output: object, message: str
) -> None:
    """An output that was not text was made text with str(): [{"reasoning": "r", "answer":
    "18"}] became the reasoning "{'reasoning': 'r', 'answer': '18'}" and a vote for 18."""
    (tmp_path / "a.json").write_text(json.dumps(_problem(['{"answer": "18"}'])))
    (tmp_path / "b.json").write_text(json.dumps(_problem(output)))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["s1"]  # the rest is converted
    assert skipped == [
        Skipped(file=str(tmp_path / "b.json"), item="s0", field="output", message=message)
    ]
    with pytest.raises(ConvertError, match=r"b\.json: item s0: field 'output': "):
        list(iter_zeroeval_panels(tmp_path))


@pytest.mark.parametrize("field", ["question", "source"])
@pytest.mark.parametrize(
    ("value", "shown"),
    [(7, "int 7"), (["q"], "list ['q']"), ({"q": 1}, "dict {'q': 1}"), (True, "bool True")],
    ids=repr,
)
def test_a_question_or_task_that_is_not_text_skips_its_problem(
    tmp_path: Path, field: str, value: object, shown: str
) -> None:
    """The question and task were str()-ed into meta (7 became "7", ["q"] "['q']")."""
    (tmp_path / "a.json").write_text(json.dumps(_problem(['{"answer": "18"}'], **{field: value})))
    (tmp_path / "b.json").write_text(json.dumps(_problem(['{"answer": "18"}'])))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["s1"]
    assert skipped == [
        Skipped(
            file=str(tmp_path / "a.json"),
            item="s0",
            field=field,
            message=f"must be a string, got {shown}",
        )
    ]


def test_a_question_or_task_absent_or_null_is_empty(tmp_path: Path) -> None:
    """A null question was the text "None"."""
    a = _problem(['{"answer": "18"}'], question=None, source=None)
    del a[1]["question"]
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(_problem(['{"answer": "18"}'], source="gsm")))
    panels = list(iter_zeroeval_panels(tmp_path))
    assert [(p.meta["question"], p.meta["task"]) for p in panels] == [("", ""), ("", "")]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(outputs=st.lists(_JSON, min_size=2, max_size=3))
def test_no_output_is_given_text_it_does_not_hold(outputs: list[object]) -> None:
    """A model's reasoning is empty exactly when its output holds no text, never made up;
    an output that is not a list of strings and nulls is reported, never str()-ed."""
    skipped: list[Skipped] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, output in enumerate(outputs):
            (Path(tmp) / f"m{n}.json").write_text(json.dumps(_problem(output)))
        panels = list(iter_zeroeval_panels(tmp, on_skip=skipped.append))
    readable = [
        o is None or (isinstance(o, list) and all(x is None or isinstance(x, str) for x in o))
        for o in outputs
    ]
    assert [p.id for p in panels] == (["s0", "s1"] if all(readable) else ["s1"])
    if not all(readable):
        (skip,) = skipped
        assert (skip.item, skip.field) == ("s0", "output")
        assert skip.file.endswith(f"m{readable.index(False)}.json")
        return
    assert not skipped
    for output, agent in zip(outputs, panels[0].outputs, strict=True):
        text = "\n".join(x for x in output or [] if isinstance(x, str))
        assert (agent.reasoning == "") == (not text.strip())
        assert agent.reasoning != "(no output)" or "(no output)" in text
        if not text.strip():
            assert agent.decision is None


def test_the_problems_keep_the_files_order_when_one_file_lacks_some(tmp_path: Path) -> None:
    """A bad item in the model file read first no longer moves its problem to the end
    (nor out of ``limit``): problems come in the order the files share."""
    for model in ("Qwen2-7B", "gemma-9b", "yi-9b"):
        rows: list[object] = [
            {"session_id": f"s{k}", "question": f"q{k}", "output": [f'{{"answer": "{k}"}}'],
             "answer": f"# {k}"}
            for k in range(6)
        ]  # fmt: skip
        if model == "Qwen2-7B":
            rows[2] = {"session_id": None}
            rows[3] = 7
        (tmp_path / f"{model}.json").write_text(json.dumps(rows))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append))
    assert [p.id for p in panels] == ["s0", "s1", "s2", "s3", "s4", "s5"]
    kept = list(iter_zeroeval_panels(tmp_path, on_skip=skipped.append, limit=4))
    assert [p.id for p in kept] == ["s0", "s1", "s2", "s3"]


_HUGE = "9" * 5000  # more digits than int() converts (4,300)


@pytest.mark.parametrize("text", [f"{_HUGE} 1/2", f"3 {_HUGE}/2", f"3 1/{_HUGE}", f"-{_HUGE} 1/2"])
def test_a_mixed_number_of_thousands_of_digits_is_no_number(text: str) -> None:
    """A mixed number's parts went through int(): more than 4,300 digits was a traceback
    that stopped the whole conversion. A number too large to be a finite float is no
    number, as everywhere else."""
    assert normalise_number(text) is None
    assert extract_answer(f"The answer is {text}.")[0] is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([_HUGE, "3", "0", " ", "/", "-", ".", ",", ":", "e", "$"])))
def test_any_run_of_numbers_is_read_without_an_error(parts: list[str]) -> None:
    text = "".join(parts)
    number = normalise_number(text)
    assert number is None or (len(number) < 400 and not number.startswith("+"))


def test_a_huge_mixed_number_leaves_the_model_abstaining(tmp_path: Path) -> None:
    root = tmp_path / "models"
    root.mkdir()
    for model, output in (("m-a", f"The answer is {_HUGE} 1/2."), ("m-b", "The answer is 18")):
        rows = [{"session_id": "s0", "question": "q", "output": [output], "answer": "# 18"}]
        (root / f"{model}.json").write_text(json.dumps(rows))
    skipped: list[Skipped] = []
    panels = list(iter_zeroeval_panels(root, on_skip=skipped.append))
    assert not skipped and len(panels) == 1
    assert {o.agent: o.decision for o in panels[0].outputs} == {"m-a": None, "m-b": "18"}
