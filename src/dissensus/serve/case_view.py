"""What the review page shows of a case, computed from the journalled item (pure, no I/O).

The review page renders these plain values, and the templates escape every string
(agent text is never interpreted); the one exception is :func:`plain_reasons`, whose
sentences are markup built from escaped pieces, each agent-supplied piece in ``<bdi>``.

Choices this module makes:

* **Option labels and texts** are the case's (:class:`~dissensus.cases.CaseSpec`, the
  one parser of ``meta``): the way the agents refer to an option (a panel's
  ``meta.option_labels``; "Output (a)", "Output (b)", ... for pairwise judging or when the
  agents' reasoning speaks of "Output (a)"; otherwise the option id itself). The id stays
  visible beside the label, since it is what gets journalled.
* **Option order and keys** (:func:`option_views`): the panel's ``meta.options`` in the
  order it declares them, then the other decisions the agents gave in natural order
  (:func:`~dissensus.cases.shown_order`: ``2`` before ``10``; a ``meta.options`` object,
  journalled with its keys sorted, in the order of the item's own list), for an item
  journalled with its options in string order too; keys ``1``-``9`` go to the first nine, so ``2``
  picks the panel's second option.
* **Word diff.** When at least two options have texts, the first two are compared word
  by word (:class:`difflib.SequenceMatcher` over whitespace-split words) into segments
  marked ``same``, ``a`` (only in the first) or ``b`` (only in the second). Its cost is
  bounded, since a page is made on the server's loop and a model stuck repeating a word
  writes exactly the text that makes an exact diff take minutes: without the junk
  heuristic only while the two texts' word counts multiply to at most
  :data:`EXACT_DIFF_WORDS` (about 200 words each), with it (words making up more than
  1% of a longer text are not matched on) up to :data:`MOST_DIFF_WORDS` words a side,
  and no diff at all beyond that (the options are shown whole, as always).
* **The question and the conversation** (:func:`asked_view`): the question is
  :func:`~dissensus.cases.asked_question` (``meta.question`` and its kin, else the last
  ``user`` message of a chat panel's ``meta.messages``). When the panel records more than
  one message (a system prompt, earlier turns), every message is shown too, role by
  role, in order, each as verbatim text like an agent's reasoning; the message that is
  the question is marked as such (and starts folded, being shown just above).
* **Answers not read as reasoning** (:func:`unread_answers`): a chat member whose
  answer the panel holds as an abstention with empty reasoning while ``meta.answers``
  keeps its text (an answer the server cut off: :mod:`dissensus.panels.fanout`) is
  shown that text, verbatim, marked as not read as reasoning, with ``meta.members``'
  why: the reviewer sees what the member said, the reading never counted it.
* **Plain reasons.** The escalation reason is a technical trail; the page leads with
  sentences derived from the positions and from the known forms of that trail (guard,
  re-ask or why there was none, deliberation, negotiation, routing, reliability,
  suspension), each matched as :mod:`dissensus.pipeline` writes it, where it writes it
  (a step's reason starts the trail or follows ``"; "``), never as a bare word. The
  trail itself stays one click away, verbatim.
* **A typed answer naming an option** (:func:`options_named`): the answer a reviewer
  types is read as an option when, once trimmed of white space, it is that option's id
  or its label, first exactly (the id as given, white space included, since an agent's
  decision may end in a space; then the id, then the label), then as the page shows it
  (:func:`~dissensus.quoting.visible_label`: ``yes\\x20`` typed as read names the option
  ``yes ``, never a third answer), then ignoring case
  (:meth:`str.casefold`: a reviewer typing ``output (a)`` or ``YES`` means the option
  labelled ``Output (a)`` or the option ``yes``). An exact id wins over a label and over
  a casefold; typed into the page as read, not over a shown form: there a text that is
  one option's own id or label (the literal ``yes\\x20``) and another option's shown
  form (``yes `` shows as ``yes\\x20``) names both, since the reviewer may mean either
  (an id posted by a pick, or an API client's, is still the option it is). An answer
  naming several options (two options labelled alike) names them all, for the caller to
  refuse.
* **Bidi isolation.** Agent-supplied text (agent names, option labels and ids,
  decisions, case ids, the question, reasoning) is set apart on the pages (``<bdi>``,
  or a verbatim block), so that right-to-left text cannot reorder the text around it;
  the bidi controls it may carry (U+202E, U+2066, ...) are shown escaped, with every
  other character that shows as nothing (:func:`dissensus.quoting.visible`), as the
  CLI shows them.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from markupsafe import Markup, escape

from dissensus.cases import CaseMessage, CaseSpec, asked_question, conversation, shown_order
from dissensus.quoting import visible_label

__all__ = [
    "EXACT_DIFF_WORDS",
    "MOST_DIFF_WORDS",
    "AskedView",
    "DiffSegment",
    "OptionView",
    "asked_view",
    "option_views",
    "options_named",
    "plain_reasons",
    "unread_answers",
    "word_diff",
]


@dataclass(frozen=True)
class OptionView:
    """One option as the page shows it."""

    id: str
    """The option id (what a resolution journals)."""
    label: str
    """How the agents refer to it (e.g. ``Output (a)``); the id when nothing better is known."""
    key: str
    """The key that picks it (``1``-``9``; empty past nine)."""
    text: str
    """The option's text (empty when the panel has none)."""
    chosen_by: list[str] = field(default_factory=list)
    """Agents whose decision it was."""
    suggested: bool = False
    """Whether it is the panel's suggestion."""


@dataclass(frozen=True)
class DiffSegment:
    """A run of words of the word diff."""

    side: Literal["same", "a", "b"]
    text: str


@dataclass(frozen=True)
class AskedView:
    """What the page shows of what was asked."""

    question: str | None
    """The question (:func:`~dissensus.cases.asked_question`), ``None`` when there is none."""
    conversation: tuple[CaseMessage, ...] = ()
    """Every message of ``meta.messages``, in order, when there are more than one."""
    question_at: int | None = None
    """The index in :attr:`conversation` of the message that is the question, if one is."""


def asked_view(panel: dict[str, Any]) -> AskedView:
    """The question and conversation of ``panel`` (the journalled panel JSON, only read)."""
    meta = panel.get("meta")
    question = asked_question(meta if isinstance(meta, dict) else None)
    messages = conversation(meta if isinstance(meta, dict) else None)
    if len(messages) < 2:
        return AskedView(question)
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    at = users[-1] if users and messages[users[-1]].text == question else None
    return AskedView(question, messages, at)


def unread_answers(
    panel: dict[str, Any],  # the journalled panel JSON, read as it is
    positions: Sequence[tuple[str, str | None, str]],
) -> dict[str, tuple[str, str | None]]:
    """Agent -> (its text, why) of each abstaining position with empty reasoning whose
    text the panel keeps in ``meta.answers`` (see the module docstring)."""
    meta = panel.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    answers = meta.get("answers")
    if not isinstance(answers, dict):
        return {}
    reports = meta.get("members")
    whys = {
        r["name"]: r.get("why")
        for r in (reports if isinstance(reports, list) else [])
        if isinstance(r, dict) and isinstance(r.get("name"), str)
    }
    out: dict[str, tuple[str, str | None]] = {}
    for agent, decision, reasoning in positions:
        text = answers.get(agent)
        if decision is None and not reasoning and isinstance(text, str) and text.strip():
            why = whys.get(agent)
            out[agent] = (text, why if isinstance(why, str) else None)
    return out


def option_views(
    options: Sequence[str],
    panel: dict[str, Any],  # the journalled panel JSON, read as it is
    positions: Sequence[tuple[str, str | None, str]],
    suggestion: str | None,
) -> list[OptionView]:
    """The options on the table, labelled, with texts and who chose each.

    ``positions`` are ``(agent, decision, reasoning)``; ``panel`` is the journalled
    panel's JSON (:attr:`~dissensus.pipeline.records.ReviewItem.panel`), only read.
    """
    meta = panel.get("meta")
    meta = meta if isinstance(meta, dict) else {}
    reasoning = [r for _, _, r in positions]
    case = CaseSpec.from_meta(meta, reasoning)
    ids = shown_order(meta, options)
    texts = {o.id: o.text for o in case.options}
    if not case.options:  # labels of the options on the table, when the panel lists none
        case = CaseSpec.from_meta({**meta, "options": [{"id": i} for i in ids]}, reasoning)
    known = {o.id: o for o in case.options}
    return [
        OptionView(
            id=oid,
            label=known[oid].label if oid in known else oid,
            key=str(i + 1) if i < 9 else "",
            text=texts.get(oid, ""),
            chosen_by=[agent for agent, decision, _ in positions if decision == oid],
            suggested=oid == suggestion,
        )
        for i, oid in enumerate(ids)
    ]


def options_named(answer: str, options: Sequence[OptionView], *, typed: bool = False) -> list[str]:
    """The ids of the options a typed ``answer`` names (see the module docstring): one id
    for an answer naming an option, none for an answer of the reviewer's own, several
    when it names more than one option alike. ``typed``: the answer is what a reviewer
    typed as read (the page's "other answer"), so a text that is one option's own id or
    label and another's shown form names both; else (an id posted by a pick, an API
    client's decision) an exact id or label is that option."""

    def also(text: str, *exact: str) -> list[str]:
        return _shown_as(text, options, *exact) if typed else []

    if any(o.id == answer for o in options):  # an id ending in white space ("yes ") too
        return [answer, *also(answer, answer)]
    text = answer.strip()
    if not text:
        return []
    if any(o.id == text for o in options):
        return [text, *also(text, text)]
    exact = [o.id for o in options if o.label == text]
    if exact:
        return [*exact, *also(text, *exact)]
    shown = [o.id for o in options if text in (visible_label(o.id), visible_label(o.label))]
    if shown:
        return list(dict.fromkeys(shown))
    folded = text.casefold()
    return [o.id for o in options if folded in (o.id.casefold(), o.label.casefold())]


def _shown_as(text: str, options: Sequence[OptionView], *besides: str) -> list[str]:
    """The ids of the options, other than ``besides``, that the page shows as ``text``
    only once escaped (the option ``yes `` for ``yes\\x20``): a text that is one option's
    own id or label and another's shown form names both."""
    return list(
        dict.fromkeys(
            o.id
            for o in options
            if o.id not in besides and any(text == visible_label(x) != x for x in (o.id, o.label))
        )
    )


EXACT_DIFF_WORDS = 40_000
"""The largest product of two texts' word counts diffed without the junk heuristic."""

MOST_DIFF_WORDS = 1_000
"""The most words a side of a word diff; longer texts get none."""


def word_diff(a: str, b: str) -> list[DiffSegment] | None:
    """``a`` and ``b`` compared word by word (see the module docstring); ``None`` when
    either has more than :data:`MOST_DIFF_WORDS` words."""
    wa, wb = a.split(), b.split()
    if max(len(wa), len(wb)) > MOST_DIFF_WORDS:
        return None
    out: list[DiffSegment] = []
    exact = len(wa) * len(wb) <= EXACT_DIFF_WORDS
    matcher = difflib.SequenceMatcher(None, wa, wb, autojunk=not exact)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            out.append(DiffSegment("same", " ".join(wa[i1:i2])))
            continue
        if i2 > i1:
            out.append(DiffSegment("a", " ".join(wa[i1:i2])))
        if j2 > j1:
            out.append(DiffSegment("b", " ".join(wb[j1:j2])))
    return out


_AFTER = r"(?:^|; )(?:no further follow-up: )?"
"""Where a follow-up's own reason starts in the trail: at its start or after ``"; "``
(:mod:`dissensus.pipeline.engine` joins the steps' reasons with ``"; "``), behind
``"no further follow-up: "`` when an earlier round ran."""

_PHRASES: list[tuple[re.Pattern[str], str]] = [
    (
        # gates.py: "guard refused consensus: <checks>"
        re.compile(r"\bguard refused consensus\b"),
        "Agreement among them is not independent evidence: the agents may share a model "
        "family or a source, so agreeing proves little.",
    ),
    (
        # gates.py: "guard answer <a> differs from the panel's plurality <b>"
        re.compile(r"\bguard answer .* differs from the panel's plurality "),
        "The evidence points to a different answer than most agents gave.",
    ),
    (
        # engine.py: "after recorded re-ask: <acceptance>" / "after live re-ask: ..."
        re.compile(r"(?:^|; )after (?:recorded|live) re-ask: "),
        "Asking the agents again did not settle it.",
    ),
    (
        # engine.py, _followup_answers: nothing recorded and nothing to ask with
        re.compile(_AFTER + r"no recorded re-ask in the panel and no model configured\b"),
        "The agents were not asked again: the panel records no second answers, and no "
        "model is configured to ask them.",
    ),
    (
        re.compile(_AFTER + r"the case has no explicit options to re-ask\b"),
        "The agents were not asked again: the case lists no options to put to them.",
    ),
    (
        re.compile(_AFTER + r"re-ask failed: "),
        "Asking the agents again failed (the technical detail says why).",
    ),
    (
        # engine.py, _deliberate: a packet was produced (complete or stopped early)
        re.compile(r"(?:^|; )DCI (?:packet attached for review|deliberation stopped early \()"),
        "A structured deliberation among the agents did not settle it.",
    ),
    (
        re.compile(r"(?:^|; )(?:deliberation failed: |no model configured for the DCI follow-up)"),
        "A structured deliberation among the agents could not be held.",
    ),
    (
        re.compile(r"(?:^|; )CONCORD ended "),
        "A negotiation among the agents did not certify an answer.",
    ),
    (
        re.compile(r"(?:^|; )CONCORD not run: "),
        "A negotiation among the agents could not be run on this case.",
    ),
    (
        # engine.py: "route <action> (rule <name>)", the trail's first step; the actions
        # that go to a person (concord negotiates first, then escalates)
        re.compile(r"^route (?:escalate|concord) \(rule "),
        "The routing policy sends cases like this one to a person.",
    ),
    (
        # trust_regions.py: calibrated and uncalibrated acceptance's refusals
        re.compile(r"(?:^|[;:] )trusted agents contradict each other: "),
        "Agents the calibration trusts contradict each other.",
    ),
    (
        re.compile(r"(?:^|[;:] )(?:trusted )?answer .* stably contradicted by "),
        "Agents that answered consistently contradict the answer the others back.",
    ),
    (
        re.compile(r"(?:^|[;:] )only \d+ independent famil(?:y|ies) "),
        "Too few independent model families back the answer.",
    ),
    (
        re.compile(
            r"(?:^|[;:] )no calibrated agent gave a stable, decisive answer inside its trust region"
        ),
        "No calibrated agent answered inside the range where it is reliable.",
    ),
    (
        # acceptance/monitor.py: a commit of a suspended stratum escalates
        re.compile(r"(?:^|; )acceptance suspended: "),
        "Automatic decisions of this kind are suspended: audits found too many of them wrong.",
    ),
]
"""Known forms of the escalation trail (:mod:`dissensus.pipeline`) and what each means,
matched where the pipeline writes them (never as a bare word: "no recorded re-ask" is
not a re-ask that failed to settle the case)."""


def _isolated(text: str) -> Markup:
    """``text`` (an agent's or a panel's) escaped and set apart in ``<bdi>``: its
    direction cannot reorder the sentence around it; the characters that show as
    nothing, bidi controls included, are shown escaped (``\\u200b``)."""
    return Markup("<bdi>{}</bdi>").format(visible_label(text))


def plain_reasons(reason: str, options: Sequence[OptionView], abstained: int) -> list[Markup]:
    """Why the case was escalated, in plain sentences (the technical trail stays apart).

    Each sentence is markup: the option labels in it are escaped and isolated
    (:func:`_isolated`), never passed through as HTML."""
    chosen = [(o.label, len(o.chosen_by)) for o in options if o.chosen_by]
    chosen.sort(key=lambda x: -x[1])
    out: list[Markup] = []
    if len(chosen) > 1:
        parts = [Markup("{} chose {}").format(n, _isolated(label)) for label, n in chosen]
        out.append(Markup("The agents split: {}.").format(Markup(", ").join(parts)))
    elif len(chosen) == 1:
        label, n = chosen[0]
        out.append(
            Markup(
                "All {} agents who answered chose {}, but that was not enough to decide alone."
            ).format(n, _isolated(label))
            if n > 1
            else Markup("Only one agent answered ({}).").format(_isolated(label))
        )
    if abstained:
        out.append(Markup("{} agent(s) gave no answer.").format(abstained))
    for pattern, sentence in _PHRASES:
        if pattern.search(reason) and sentence not in out:
            out.append(escape(sentence))
    return out
