"""Model families: one table, one function, and families compared only after it.

Independence counts families ("three independent families agree"), so one vendor must
never count as two because two adapters spelled it differently (``openai`` from a
converter, ``OpenAI`` from a live re-ask). :func:`model_family` reads the family of a
model name from :data:`FAMILY_PREFIXES`; :func:`canonical_family` is how every
comparison sees a declared family (a panel's ``family`` field, a calibration file's).

Choices this module makes:

* Families are lower-case vendor names (``openai``, ``anthropic``, ``google``, ``meta``,
  ``mistral``, ``alibaba``, ``deepseek``, ``tii``, ``microsoft``, ``01-ai``).
* A name is read from its last path part (``meta-llama/Llama-3-8B`` -> ``Llama-3-8B``)
  and matched by prefix, never by substring (``dolphin`` is not ``phi``).
* A name the table does not know is its own family, lower-cased and stripped: an unknown
  model is never merged with another, and ``MyOrg`` and ``myorg`` are one family.
* A declared family that is already a vendor name of the table, in any case, is that
  vendor; a declared family that is a model name (``gpt-4o``) is that model's vendor.
* A declared family is compared as a reader sees it (:func:`comparable_name`): Unicode
  NFKC (``ＯｐｅｎＡＩ`` is ``OpenAI``) and without the characters that show as
  nothing (controls, format characters such as a zero-width space or a bidirectional
  mark, the other default-ignorable ones), so ``openai\u200b`` is ``openai``: a
  family spelled with invisible characters never counts as one more independent family.
* A free-text decision (the chat door's, read from a member's answer) is compared in
  its own narrower form (:func:`decision_form`): only what no reader can tell apart is
  folded (fullwidth letters and digits, the ideographic space, invisible format and
  filler characters, case, runs of white space), not what NFKC also folds and a reader
  does tell apart (``2⁵`` is not ``25``, ``Ⅳ`` not ``iv``); the joiner and the tag
  characters that make one emoji of several stay (two flags stay two).
* Both functions are pure and remember their last 4,096 names: the guard compares the
  families of every pair of voters of every case, always among the same few names.

>>> model_family("Meta-Llama-3-8B-Instruct"), model_family("gpt-4o"), canonical_family("OpenAI")
('meta', 'openai', 'openai')
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = [
    "FAMILY_PREFIXES",
    "VENDORS",
    "canonical_family",
    "comparable_name",
    "decision_form",
    "model_family",
]

FAMILY_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("text-davinci", "openai"),
    ("claude", "anthropic"),
    ("gemini", "google"),
    ("gemma", "google"),
    ("palm", "google"),
    ("meta-llama", "meta"),
    ("llama", "meta"),
    ("codellama", "meta"),
    ("mistral", "mistral"),
    ("mixtral", "mistral"),
    ("codestral", "mistral"),
    ("qwen", "alibaba"),
    ("qwq", "alibaba"),
    ("deepseek", "deepseek"),
    ("falcon", "tii"),
    ("phi-", "microsoft"),
    ("yi-", "01-ai"),
)
"""``(name prefix, family)``, matched against the lower-cased last path part of a name."""

VENDORS = frozenset(family for _, family in FAMILY_PREFIXES)
"""Every family the table names."""


@lru_cache(maxsize=4096)
def model_family(name: str) -> str:
    """The family of a model name (``gpt-4o`` -> ``openai``); an unknown name is its own family."""
    base = name.strip().rsplit("/", 1)[-1].lower()
    for prefix, family in FAMILY_PREFIXES:
        if base.startswith(prefix):
            return family
    return name.strip().lower()


_IGNORABLE = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0\U000e0000-\U000e0fff]"
)
"""The default-ignorable characters that are neither controls nor format characters
(the combining grapheme joiner, Hangul fillers, variation selectors, the tag block), and
the braille blank, which shows as nothing too (:data:`_FILLERS`)."""

_UNSEEN = frozenset({"Cc", "Cf", "Zl", "Zp"})


def comparable_name(text: str) -> str:
    """``text`` as a reader tells names apart: NFKC, without the characters that show as
    nothing (controls, format characters, line and paragraph separators, the other
    default-ignorable ones).

    >>> comparable_name("ｏｐｅｎ\u200bai\ufe0f")
    'openai'
    """
    text = unicodedata.normalize("NFKC", text)
    if text.isascii() and text.isprintable():
        return text
    return _IGNORABLE.sub("", "".join(c for c in text if unicodedata.category(c) not in _UNSEEN))


_FULLWIDTH = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}
"""Fullwidth ASCII (``ｙｅｓ``, ``１``) and the ideographic space, as the ASCII they are."""

_FILLERS = re.compile(
    "[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\ufe00-\ufe0f\uffa0]"
)
"""Characters that show as nothing and are no format character: the combining grapheme
joiner, Hangul and Khmer fillers, Mongolian variation selectors, the braille blank, the
variation selectors (``❤️`` is ``❤``)."""


def _kept_format(char: str) -> bool:
    """A format character a decision keeps: the zero-width joiner and the tag characters,
    which make one emoji of several (a family, a subdivision flag)."""
    return char == "\u200d" or "\U000e0020" <= char <= "\U000e007f"


def decision_form(text: str) -> str:
    """A free-text decision as a reader tells decisions apart (module docstring).

    >>> decision_form(" ｙｅｓ\u200b "), decision_form("2\u2075"), decision_form("Yes  No")
    ('yes', '2⁵', 'yes no')
    """
    if text.isascii():
        return " ".join(text.split()).casefold()
    text = text.translate(_FULLWIDTH)
    text = "".join(c for c in text if unicodedata.category(c) != "Cf" or _kept_format(c))
    text = unicodedata.normalize("NFC", _FILLERS.sub("", text))
    # case folding can undo the composition (``ǰ``): composed again
    return unicodedata.normalize("NFC", " ".join(text.split()).casefold())


@lru_cache(maxsize=4096)
def canonical_family(family: str | None) -> str | None:
    """A declared family as comparisons see it (``OpenAI`` -> ``openai``, invisible
    characters dropped: :func:`comparable_name`); ``None`` stays ``None``."""
    if family is None:
        return None
    family = comparable_name(family)
    low = family.strip().lower()
    if low in VENDORS:
        return low
    return model_family(family)
