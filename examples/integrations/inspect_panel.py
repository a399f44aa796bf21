"""Three graders on Inspect's mock model, reduced by the dissensus reducer.

Run offline: ``python examples/integrations/inspect_panel.py`` (extra ``inspect``).
Inspect's logs go to a temporary directory, printed last; ``inspect view --log-dir DIR``
shows them (filter escalated samples with ``answer == 'escalate'``).
"""

from __future__ import annotations

import tempfile
from typing import Any

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Scorer, Target, accuracy, multi_scorer, scorer
from inspect_ai.solver import TaskState, generate

from dissensus.integrations.inspect import dissensus_reducer

# What each grader says about each sample: C(orrect), I(ncorrect) or None (declines).
GRADES = {"s1": ("C", "C", "C"), "s2": ("C", "I", None), "s3": ("I", "C", "C")}
SOURCES = ("kb:manual", "kb:faq", "kb:tickets")


def grader(i: int) -> Scorer:
    @scorer(metrics=[accuracy()], name=f"grader{i + 1}")
    def make() -> Scorer:
        async def score(state: TaskState, target: Target) -> Score | None:
            value = GRADES[str(state.sample_id)][i]
            if value is None:
                return None  # declined: kept in the panel as an abstention
            meta = {"grader": f"grader{i + 1}", "evidence": [{"source": SOURCES[i]}]}
            return Score(
                value=value,
                explanation=f"grader{i + 1} checked the arithmetic: {value}",
                metadata=meta,
            )

        return score

    return make()


def answer(*_: Any) -> ModelOutput:
    out = ModelOutput.from_content(model="mockllm/model", content="4")
    out.usage = ModelUsage(input_tokens=8, output_tokens=1, total_tokens=9)  # no tokenizer download
    return out


def main() -> None:
    panel = multi_scorer(
        scorers=[grader(i) for i in range(3)],
        reducer=dissensus_reducer(
            graders=["grader1", "grader2", "grader3"], policy={"reading": {"similarity": "tfidf"}}
        ),
    )
    task = Task(
        dataset=[Sample(id=s, input="2 + 2 = ?", target="4") for s in GRADES],
        solver=generate(),
        scorer=panel,
    )
    log_dir = tempfile.mkdtemp()
    (log,) = eval(
        task,
        model=get_model("mockllm/model", custom_outputs=answer),
        log_dir=log_dir,
        display="none",
    )
    for sample in log.samples or []:
        (score,) = (sample.scores or {}).values()
        meta = score.metadata or {}
        print(
            sample.id,
            score.value,
            score.answer,
            f"support {meta['support']:.2f}",
            f"tie {meta['tie']}",
            meta["reason"][:50],
        )
    print(f"Inspect's log: {log_dir} (inspect view --log-dir {log_dir})")


if __name__ == "__main__":
    main()
