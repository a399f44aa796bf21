"""The public surface of dissensus.llm is pinned (other parts code against it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import dissensus.llm as llm


def test_public_surface_is_pinned() -> None:
    assert sorted(llm.__all__) == sorted(
        [
            "DEFAULT_PRICES", "MODEL_ENV", "BackendError", "BackendResponse", "Budget",
            "BudgetExceeded", "ChatBackend", "ChatClient", "ChatRequest", "ChatResponse",
            "ClientSettings", "FunctionBackend",
            "JSONExtractError", "JsonMode", "LLMError", "Message", "ModelCallError", "ModelClient",
            "OpenAIBackend", "Price", "RecordBackend", "ReplayBackend", "ReplayMiss",
            "SchemaModeUnsupported", "ScriptedBackend", "ScriptedRules", "StructuredOutputError",
            "estimate_tokens", "extract_json", "load_script", "make_backend", "request_key",
            "resolve_model",
        ]
    )  # fmt: skip
    for name in llm.__all__:
        assert hasattr(llm, name), name


def test_errors_are_dissensus_errors() -> None:
    from dissensus.errors import DissensusError

    for err in (
        llm.BudgetExceeded,
        llm.StructuredOutputError,
        llm.ModelCallError,
        llm.ReplayMiss,
        llm.BackendError,
    ):
        assert issubclass(err, llm.LLMError) and issubclass(err, DissensusError)


def test_backends_satisfy_the_protocol() -> None:
    backend = llm.ScriptedBackend.from_dict({"default": "x"})
    assert isinstance(backend, llm.ChatBackend)
    assert isinstance(llm.OpenAIBackend("m", api_key="k"), llm.ChatBackend)
    assert isinstance(llm.ReplayBackend([]), llm.ChatBackend)


def test_python_examples_of_the_docs_run(
    repo_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/llm.md's Python blocks run as written, against the docs' own rule file."""
    doc = (repo_root / "docs" / "llm.md").read_text(encoding="utf-8")
    scripted = doc[doc.index("## Scripted models") :]
    (tmp_path / "rules.yaml").write_text(re.findall(r"```yaml\n(.*?)```", scripted, flags=re.S)[0])
    blocks = re.findall(r"```python\n(.*?)```", doc, flags=re.S)
    assert len(blocks) >= 2
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(blocks[0], "docs/llm.md", "exec"), namespace)
    assert namespace["resp"].parsed.model_dump() == {"verdict": "ok", "score": 3}  # type: ignore[attr-defined]
    assert namespace["client"].usage.attempts == 1  # type: ignore[attr-defined]
    # The Budget block ends with an expression: the budget it shows must be usable.
    *setup, last = ast.parse(blocks[1]).body
    assert isinstance(last, ast.Expr)
    exec(compile(ast.Module(body=setup, type_ignores=[]), "docs/llm.md", "exec"), namespace)
    budget = eval(compile(ast.Expression(last.value), "docs/llm.md", "eval"), namespace)
    assert isinstance(budget, llm.Budget)
    for model in ("gpt-4o-mini", "my-model"):
        budget.check_model(model)
        assert budget.price_for(model) is not None
