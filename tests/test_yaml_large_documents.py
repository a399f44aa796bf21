"""A long YAML document of many plain nodes is refused while it is parsed, before it is
built: a 50 MB policy of four million short entries was built whole (four minutes,
5 GB of memory) before the node limit refused it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.io import yamlfile
from dissensus.io.yamlfile import MAX_NODES, load_yaml_text
from dissensus.pipeline import RunSpec


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count the documents ``yaml.load`` builds."""
    built: list[int] = []
    load = yaml.load

    def counted(*args: Any, **kwargs: Any) -> Any:
        built.append(1)
        return load(*args, **kwargs)

    monkeypatch.setattr(yamlfile.yaml, "load", counted)
    return built


def test_a_long_document_of_many_nodes_is_refused_before_it_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    built = _spy(monkeypatch)
    entries = MAX_NODES // 3 + 1  # each "- [a, b]" is three nodes
    text = "routing:\n  superiority:\n" + "    - [a, b]\n" * entries
    with pytest.raises(ConfigError, match=f"has more than {MAX_NODES:,} nodes"):
        load_yaml_text(text, file="big.yaml")
    assert built == []
    policy = tmp_path / "big.yaml"
    policy.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        RunSpec.from_policy(policy)
    assert str(err.value) == f"{policy}: the document has more than {MAX_NODES:,} nodes"
    assert built == []


def test_a_long_document_of_few_nodes_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _spy(monkeypatch)
    text = "# " + "x" * 2_000_000 + "\nseek_context:\n  context: '" + "y" * 10 + "'\n"
    assert load_yaml_text(text) == {"seek_context": {"context": "y" * 10}}
    assert built == [1]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(st.recursive(st.text(max_size=5) | st.integers(), lambda c: st.lists(c, max_size=4)))
def test_counting_first_reads_what_building_reads(value: Any) -> None:
    """A long text whose nodes are few reads as it did: the count only refuses."""
    text = yaml.safe_dump({"v": value}) + "#" + " " * yamlfile._COUNT_FIRST + "\n"
    assert load_yaml_text(text) == {"v": value}
