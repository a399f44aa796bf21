"""The static similarity backend: loading a distilled table, distilling once, naming."""

from __future__ import annotations

import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dissensus.errors import ConfigError
from dissensus.pipeline.policy import check_similarity
from dissensus.states import EmbeddingBackend, Thresholds, get_backend, read_panels
from dissensus.states import static as static_mod
from dissensus.states.static import STATIC_NAME, StaticBackend, static_model_dir
from dissensus.types import Panel

model2vec = pytest.importorskip("model2vec")
tokenizers = pytest.importorskip("tokenizers")


def _tiny_table(directory: Path, seed: int = 0) -> Path:
    """A random model2vec table over a small word-level vocabulary, saved like a real one."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = [
        "[PAD]",
        "[UNK]",
        "output",
        "a",
        "b",
        "is",
        "better",
        "worse",
        "the",
        "answer",
        "wrong",
        "right",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    vectors = np.random.default_rng(seed).normal(size=(len(words), 8)).astype(np.float32)
    model = model2vec.StaticModel(vectors=vectors, tokenizer=tok, normalize=True)
    model.save_pretrained(str(directory))
    (directory / "NOTICE").write_text("test table\n", encoding="utf-8")
    return directory


_SHARED: list[Path] = []


def _shared_table() -> Path:
    """One tiny table for the whole module (hypothesis examples share it)."""
    if not _SHARED:
        _SHARED.append(_tiny_table(Path(tempfile.mkdtemp(prefix="tiny-static-"))))
    return _SHARED[0]


def _panel(pid: str, texts: list[str], decisions: list[str]) -> Panel:
    return Panel.model_validate(
        {
            "id": pid,
            "outputs": [
                {"agent": f"a{i}", "decision": d, "reasoning": t}
                for i, (t, d) in enumerate(zip(texts, decisions, strict=True))
            ],
        }
    )


def test_static_is_a_known_backend_everywhere(tmp_path: Path) -> None:
    backend = get_backend("static", cache_dir=tmp_path)
    assert isinstance(backend, StaticBackend) and isinstance(backend, EmbeddingBackend)
    assert backend.name == STATIC_NAME
    assert backend.directory == static_model_dir(tmp_path) == tmp_path / "static" / STATIC_NAME
    assert get_backend("Static-all-MiniLM-L6-v2", cache_dir=tmp_path).name == STATIC_NAME
    check_similarity("static")
    with pytest.raises(ConfigError, match="'static'"):
        check_similarity("statik")


def test_table_embeds_normalised_and_identical_traces_read_as_one(tmp_path: Path) -> None:
    backend = StaticBackend(_tiny_table(tmp_path / "t"), progress=None)
    rows = backend.embed(["output a is better", "output b is worse", "zzz qqq"])
    assert rows.shape == (3, 8) and rows.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(rows[:2], axis=1), 1.0, rtol=1e-5)
    assert np.all(rows[2] == 0.0)  # only unknown tokens: a zero vector, similarity 0
    assert backend.embed([]).shape == (0, 8)
    panel = _panel(
        "p", ["output a is better", "output a is better", "the answer is wrong"], ["a", "a", "b"]
    )
    reading = read_panels([panel], backend, Thresholds(theta_s=0.5, theta_a=0.8))[0]
    assert reading.model == STATIC_NAME
    assert reading.matrix[0][1] == 1.0


@settings(max_examples=25)
@given(
    st.lists(
        st.sampled_from(["output", "a", "b", "is", "better", "worse", "the", "answer"]),
        min_size=1,
        max_size=12,
    )
)
def test_embedding_is_deterministic_and_order_free(words: list[str]) -> None:
    backend = StaticBackend(_shared_table(), progress=None)
    text = " ".join(words)
    one = backend.embed([text])
    two = backend.embed(["the answer", text])[1:]
    np.testing.assert_array_equal(one, two)  # a text's vector does not depend on its batch
    shuffled = backend.embed([" ".join(reversed(words))])
    np.testing.assert_allclose(one, shuffled, atol=1e-6)  # a mean of token vectors


def test_missing_table_is_distilled_once_under_a_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Path] = []
    messages: list[str] = []

    def fake_distil(directory: Path, progress: object, show: bool) -> None:
        calls.append(directory)
        _tiny_table(directory)

    monkeypatch.setattr(static_mod, "_distil_into", fake_distil)
    target = tmp_path / "static" / STATIC_NAME
    backends = [StaticBackend(target, progress=messages.append) for _ in range(4)]
    threads = [threading.Thread(target=b.embed, args=(["output a"],)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [target]  # four concurrent first uses, one distillation
    assert static_mod.distil_static(target) == target  # complete: nothing to do
    assert calls == [target]


def test_missing_extra_is_a_one_line_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import builtins

    table = _tiny_table(tmp_path / "t")
    real_import = builtins.__import__

    def no_model2vec(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("model2vec"):
            raise ImportError("no model2vec")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_model2vec)
    backend = StaticBackend(table, progress=None)
    with pytest.raises(ConfigError, match=r"'static' extra"):
        backend.embed(["output a"])


def test_real_table_agrees_with_itself_and_names_the_licence() -> None:
    directory = static_model_dir()
    if not (directory / "NOTICE").is_file():
        pytest.skip(
            f"no distilled static table at {directory} (python -c 'from dissensus.states.static import distil_static; distil_static()')"
        )
    assert "Apache License, Version 2.0" in (directory / "NOTICE").read_text(encoding="utf-8")
    backend = StaticBackend(directory)
    rows = backend.embed(
        ["Output (a) is better.", "Output (a) is better!", "The capital of France is Paris."]
    )
    assert rows.shape == (3, 256)
    assert float(rows[0] @ rows[1]) > float(rows[0] @ rows[2])
