"""A rule file's invalid field is named by the line it is written on.

``scripted:FILE`` and ``dissensus fake-llm --script FILE`` named the file and the field
(``rules.3.match.regex``) but not the line, which a policy file's errors give; in a long
rule file the fourth rule had to be counted by hand.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_helpers import cli
from dissensus.errors import ConfigError
from dissensus.llm.scripted import load_script

RULES = """\
rules:
  - match: {agent: a}
    response: fine
  - match:
      agent: b
      regex: "("
    response: broken
"""


def test_a_rule_files_error_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(RULES)
    with pytest.raises(ConfigError) as caught:
        load_script(path)
    error = caught.value
    assert (error.file, error.field, error.line) == (str(path), "rules.1.match.regex", 6)
    assert str(error).endswith("(line 6)")


def test_fake_llm_names_the_line_of_a_server_setting(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text("default: hi\nserver:\n  faults:\n    kinds: [rate_limit, nope]\n")
    result = cli("fake-llm", "--port", "0", "--script", path)
    assert result.code == 2
    assert "field 'server.faults.kinds.1'" in result.err
    assert result.err.rstrip().endswith("(line 4)")
