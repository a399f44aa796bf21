"""Converters from real multi-agent and multi-annotator data to dissensus records.

* :mod:`dissensus.convert.llmbar`: LLMBar judge panels -> :class:`~dissensus.types.Panel`
  or :class:`~dissensus.types.VoteCase` (the guard's votes format).
* :mod:`dissensus.convert.varierrnli`: VariErrNLI annotators -> panels.
* :mod:`dissensus.convert.zeroeval`: ZeroEval solver outputs -> panels (answers extracted).

Items that cannot be converted are reported through an ``on_skip`` callback
(:mod:`dissensus.convert.skips`), never dropped silently.
"""

from dissensus.convert.llmbar import FAMILIES, STRATEGIES, iter_llmbar_panels, iter_llmbar_votes
from dissensus.convert.skips import ConvertError, Skipped
from dissensus.convert.varierrnli import iter_varierrnli_panels
from dissensus.convert.zeroeval import iter_zeroeval_panels

__all__ = [
    "FAMILIES",
    "STRATEGIES",
    "ConvertError",
    "Skipped",
    "iter_llmbar_panels",
    "iter_llmbar_votes",
    "iter_varierrnli_panels",
    "iter_zeroeval_panels",
]
