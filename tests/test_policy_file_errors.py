"""A bad policy file is refused naming the file, the field and the line it is written
on, and a misspelt key names the key it is spelt close to."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.pipeline import RunSpec, load_policy
from dissensus.pipeline.policy import Policy, policy_from_dict

REPO = Path(__file__).resolve().parent.parent
PANELS = REPO / "examples" / "llmbar-swap.jsonl"


def _refused(path: Path, text: str) -> ConfigError:
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(path, environ={})
    return err.value


def test_a_misspelt_key_names_the_key_it_is_close_to_and_its_line(tmp_path: Path) -> None:
    """Before, ``shift_alhpa`` said "Extra inputs are not permitted", with no line and no
    word of ``shift_alpha``."""
    err = _refused(
        tmp_path / "p.yaml",
        "reading:\n  similarity: tfidf\n\nacceptance:\n  shift_alhpa: 0.1\n",
    )
    assert err.field == "acceptance.shift_alhpa" and err.line == 5
    assert str(err) == (
        f"{tmp_path / 'p.yaml'}: field 'acceptance.shift_alhpa': unknown key "
        "(did you mean 'shift_alpha'?) (line 5)"
    )
    top = _refused(tmp_path / "t.yaml", "# a comment\nreding:\n  theta_a: 0.8\n")
    assert (top.field, top.line) == ("reding", 2)
    assert "did you mean 'reading'?" in str(top)
    guard = _refused(tmp_path / "g.yaml", "guard:\n  options:\n    min_sorces: 2\n")
    assert (guard.field, guard.line) == ("guard.options.min_sorces", 3)
    assert "did you mean 'min_sources'?" in str(guard)
    markers = _refused(tmp_path / "m.yaml", "acceptance:\n  markers: {concesion: [a]}\n")
    assert "did you mean 'concession'?" in str(markers) and markers.line == 2
    far = _refused(tmp_path / "f.yaml", "zzzz: 1\n")
    assert "unknown key (known keys: reading, routing, guard, acceptance" in str(far)


def test_a_value_out_of_range_names_its_line(tmp_path: Path) -> None:
    err = _refused(tmp_path / "p.yaml", "reading:\n  theta_a: 0.8\nconcord:\n\n  floor: 2\n")
    assert (err.field, err.line) == ("concord.floor", 5)
    assert str(err).endswith("Input should be less than or equal to 1 (line 5)")
    # The message without the place, as a caller re-wrapping it keeps it.
    assert err.message == "Input should be less than or equal to 1"


def test_an_error_found_building_the_run_names_the_policy_line(tmp_path: Path) -> None:
    """Errors raised while the specification is built from the file (a missing
    acceptance file) name the line too."""
    err = _refused(
        tmp_path / "p.yaml", "reading:\n  theta_a: 0.8\nacceptance:\n  model: nowhere.json\n"
    )
    assert (err.field, err.line) == ("acceptance.model", 4)
    res = cli("decide", PANELS, "--policy", tmp_path / "p.yaml")
    assert res.code == 2
    assert "field 'acceptance.model': acceptance file not found" in res.err
    assert "(line 4)" in res.err and "Traceback" not in res.err


def test_a_number_yaml_reads_as_text_says_how_to_write_it(tmp_path: Path) -> None:
    """PyYAML reads ``1e-3`` (no ``.``) as text: the error said "not text" of what the
    user wrote as a number."""
    err = _refused(tmp_path / "p.yaml", "acceptance:\n  shift_alpha: 1e-3\n")
    assert err.field == "acceptance.shift_alpha" and err.line == 2
    assert "write 1.0e-3" in str(err)
    assert load_policy(_write(tmp_path / "ok.yaml", "acceptance:\n  shift_alpha: 1.0e-3\n"))[
        0
    ].acceptance.shift_alpha == pytest.approx(0.001)


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_a_policy_given_as_data_names_no_line() -> None:
    with pytest.raises(ConfigError) as err:
        policy_from_dict({"reading": {"thetaa": 0.8}})
    assert err.value.line is None and "did you mean 'theta_a'?" in str(err.value)


_KEYS = [
    (section, key)
    for section, info in Policy.model_fields.items()
    if isinstance(info.annotation, type) and issubclass(info.annotation, Policy.__base__)
    for key in info.annotation.model_fields
    if len(key) >= 5
]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    where=st.sampled_from(_KEYS),
    blank=st.integers(min_value=0, max_value=5),
    before=st.integers(min_value=0, max_value=3),
)
def test_the_line_is_where_the_misspelt_key_is_written(
    tmp_path_factory: pytest.TempPathFactory, where: tuple[str, str], blank: int, before: int
) -> None:
    section, key = where
    typo = key + "x"  # one letter more: closest to the key itself
    text = "# policy\n" * before + f"{section}:\n" + "\n" * blank + f"  {typo}: 1\n"
    path = tmp_path_factory.mktemp("typo") / "p.yaml"
    with pytest.raises(ConfigError) as err:
        load_policy(_write(path, text))
    assert err.value.field == f"{section}.{typo}"
    assert err.value.line == before + blank + 2
    assert f"did you mean {key!r}?" in str(err.value)


def test_an_unknown_key_of_a_page_s_length_is_named_cut_and_by_its_line(tmp_path: Path) -> None:
    """A policy's unknown key is named cut to 64 characters, as every error names a
    field, and still by the line it is written on (it was echoed whole)."""
    long = "k" * 900  # YAML's longest plain key is 1,024 characters
    path = _write(tmp_path / "p.yaml", f"reading:\n  similarity: tfidf\n{long}: 1\n")
    with pytest.raises(ConfigError) as caught:
        load_policy(path)
    said = str(caught.value)
    assert len(said) < 600, len(said)
    assert f"field '{'k' * 63}\u2026': unknown key" in said and said.endswith("(line 3)")
