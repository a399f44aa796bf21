"""An acceptance file of a format this version does not read is named as such.

A file written by a later version (``dissensus.acceptance/3``) was refused as "not an
acceptance file", which sent its user looking for a corrupted or a wrong file; the error
now says which format it is, which this version reads and which version wrote it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dissensus.acceptance import load_acceptance
from dissensus.acceptance.file import canonical_hash
from dissensus.errors import ConfigError

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "llmbar-accept.json"


def _written(tmp_path: Path, fmt: object, version: object = "0.9.0") -> Path:
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    data["format"] = fmt
    data["libraries"]["dissensus"] = version
    data["sha256"] = canonical_hash(data)
    path = tmp_path / "A.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_a_later_format_is_named_with_the_version_that_wrote_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_acceptance(_written(tmp_path, "dissensus.acceptance/3"))
    text = str(caught.value)
    assert "not an acceptance file" not in text
    assert "format 'dissensus.acceptance/3' is not one this version of dissensus reads" in text
    assert "it reads 'dissensus.acceptance/2'" in text and "'0.9.0'" in text
    assert caught.value.field == "format"


def test_a_long_version_string_is_cut(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_acceptance(_written(tmp_path, "dissensus.acceptance/3", "9" * 5000))
    assert len(str(caught.value)) < 600


@pytest.mark.parametrize("fmt", ["dissensus.reliability/1", "other", None, 3])
def test_another_file_is_still_not_an_acceptance_file(tmp_path: Path, fmt: object) -> None:
    with pytest.raises(ConfigError, match="not an acceptance file"):
        load_acceptance(_written(tmp_path, fmt))


def test_the_retired_format_still_says_to_recalibrate(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is no longer read: re-run"):
        load_acceptance(_written(tmp_path, "dissensus.acceptance/1"))
