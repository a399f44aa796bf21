"""CLI commands ``dissensus deliberate`` and ``dissensus judge`` (DCI, ``docs/dci.md``).

``deliberate TASK.yaml --method dci|single|voting|self_consistency|debate`` runs one
method on one task and prints the answer (and for DCI the decision packet); ``--json``
prints one JSON line (a :class:`DeliberationOutput`), so repeated runs appended to a file
form the JSONL that ``judge`` reads. Exit 0 when the run completed, 1 when it stopped
early (budget exhausted, model failure; the output is still printed), 2 on bad input,
130 when interrupted (SIGINT/SIGTERM; the run is abandoned and nothing is printed on
standard output: bound a run with ``--deadline`` to get its packet).

Model choice: ``--model``, else ``$DISSENSUS_MODEL``, else the bundled scripted model of
the method (``dissensus/dci/models/<method>.yaml``, shipped as package data), so every method
runs offline. ``judge`` falls back to the bundled scripted judge the same way; that
judge returns constant scores and exercises the plumbing only.

Choices this module makes:

* ``--deadline`` bounds a baseline's run as it bounds DCI's (the answers so far, status
  ``deadline_exceeded``); the task's ``dci.deadline_s`` is DCI's setting only. The DCI
  ablations and ``--max-rounds`` given with a baseline method are a usage error (exit
  2, naming the flag and the method), never silently unused.

* ``$DISSENSUS_SIGNING_KEY`` is read before the task is: a key set but empty or unusable
  stops ``deliberate`` with exit 2 before any model call (as every other command that
  signs), with or without ``--json``, never after a run whose cost is then lost.
* ``judge`` checks ``--rejects`` (writable, not the input) and every judge's model spec
  before it reads a line.
* Failed judge calls are one ``error:`` line on stderr (the first failure, and how many
  more; ``--json`` lists every one); the exit code is 1, also when input lines were
  rejected too: 3 says every other line was scored, which a failed call denies (as
  ``decide`` exits 1, not 3, when its follow-ups failed).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import typer
from rich.table import Table

from dissensus.cli.app import app
from dissensus.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    MAX_SECONDS,
    check_file_input,
    check_input_path,
    check_outputs,
    err_console,
    exit_for,
    json_shown,
    not_empty,
    number_in,
    open_input,
    out_console,
    shown,
    shown_block,
    write_stdout,
)
from dissensus.errors import ConfigError

if TYPE_CHECKING:
    from dissensus.dci.output import DeliberationOutput, Method
    from dissensus.dci.task import DCIConfig, Task
    from dissensus.llm import ModelClient

__all__ = ["bundled_model", "deliberate_cmd", "judge_cmd"]

MODEL_ENV = "DISSENSUS_MODEL"
"""``dissensus.llm.MODEL_ENV``, spelt out so that registering the commands loads no model
client code (a test keeps the two equal)."""

BUNDLED = Path(__file__).resolve().parents[1] / "dci" / "models"
"""The bundled scripted models (package data, so an installed CLI finds them too)."""


def bundled_model(name: str) -> str:
    """``scripted:`` spec of the bundled offline model ``name`` (a method or ``judge``)."""
    path = BUNDLED / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"no model given and no bundled model at {path}: pass --model or set {MODEL_ENV}",
            field="model",
        )
    return f"scripted:{path}"


def _client(
    spec: str | None, fallback: str, max_calls: int | None, max_tokens: int | None
) -> ModelClient:
    from dissensus.llm import Budget, resolve_model

    chosen = spec or os.environ.get(MODEL_ENV) or bundled_model(fallback)
    return resolve_model(chosen, budget=Budget(max_calls=max_calls, max_tokens=max_tokens))


def _config(
    task: Task,
    *,
    no_archetypes: bool,
    no_typed_grammar: bool,
    no_dci_cf: bool,
    max_rounds: int | None,
) -> DCIConfig:
    update: dict[str, Any] = {}  # pydantic's model_copy(update=...) mapping
    if no_archetypes:
        update["archetypes"] = False
    if no_typed_grammar:
        update["typed_grammar"] = False
    if no_dci_cf:
        update["convergent_flow"] = False
    if max_rounds is not None:
        update["max_rounds"] = max_rounds
    return task.dci.model_copy(update=update)


async def _deliberate(
    method: Method, task: Task, client: ModelClient, config: DCIConfig, deadline: float | None
) -> DeliberationOutput:
    from dissensus.agents.deliberator import deliberate_with_model
    from dissensus.baselines.deliberation import run_baseline

    try:
        if method == "dci":
            output, _ = await deliberate_with_model(task, client, config=config)
            return output
        return await run_baseline(method, client, task, deadline_s=deadline)
    finally:
        await client.aclose()


@app.command("deliberate")
def deliberate_cmd(
    task_file: str = typer.Argument(
        ..., metavar="TASK.yaml", help="Task file (needs only 'question:')."
    ),
    method: str = typer.Option(
        "dci", "--method", "-m", help="dci, single, voting, self_consistency or debate."
    ),
    model: str | None = typer.Option(
        None, "--model", help=f"Model spec; default ${MODEL_ENV}, else the bundled scripted model."
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON line (a DeliberationOutput)."
    ),
    no_archetypes: bool = typer.Option(
        False, "--no-archetypes", help="Ablation A1: neutral participants."
    ),
    no_typed_grammar: bool = typer.Option(
        False, "--no-typed-grammar", help="Ablation A2: untyped utterances."
    ),
    no_dci_cf: bool = typer.Option(
        False, "--no-dci-cf", help="Ablation A3: open rounds instead of DCI-CF."
    ),
    max_rounds: int | None = typer.Option(
        None, "--max-rounds", min=1, help="DCI-CF rounds (default: the task's, else 2)."
    ),
    max_calls: int | None = typer.Option(
        None, "--max-calls", min=0, help="Budget: most model attempts."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=0, help="Budget: most prompt+completion tokens."
    ),
    deadline: float | None = typer.Option(
        None,
        "--deadline",
        # More than 0, as the task file's dci.deadline_s: a run given no time decides nothing.
        callback=number_in(0.0, MAX_SECONDS, above=True),
        help="Stop after SECONDS (status deadline_exceeded); DCI's default: the task's dci.deadline_s.",
    ),
) -> None:
    """Deliberate on a task with DCI or a baseline; print the answer (and decision packet)."""
    from dissensus.dci.output import METHODS
    from dissensus.dci.task import load_task
    from dissensus.signing import sign_document, signer_from_env

    check_file_input(task_file, "TASK.yaml", "task file")
    # Read before any model call: a key that cannot be used stops here, not after the run.
    signer = signer_from_env()
    not_empty(model, "--model", "the model spec")
    chosen = model or os.environ.get(MODEL_ENV) or None
    if chosen is not None:
        from dissensus.llm.resolve import check_model_spec

        check_model_spec(chosen, files={"TASK.yaml": task_file})
    if method not in METHODS:
        raise ConfigError(
            f"unknown method {method!r}; use one of {', '.join(METHODS)}", field="method"
        )
    if method != "dci":
        given = {
            "--no-archetypes": no_archetypes,
            "--no-typed-grammar": no_typed_grammar,
            "--no-dci-cf": no_dci_cf,
            "--max-rounds": max_rounds is not None,
        }
        for flag, used in given.items():
            if used:
                raise ConfigError(
                    f"{flag} applies to --method dci only; --method {method} does not use it",
                    field="method",
                )
    task = load_task(task_file)
    config = _config(
        task,
        no_archetypes=no_archetypes,
        no_typed_grammar=no_typed_grammar,
        no_dci_cf=no_dci_cf,
        max_rounds=max_rounds,
    )
    if deadline is not None:
        config = config.model_copy(update={"deadline_s": deadline})
    client = _client(model, method, max_calls, max_tokens)
    output = asyncio.run(_deliberate(method, task, client, config, deadline))
    if as_json:
        if signer is None:
            write_stdout(json_shown(output.model_dump_json()) + "\n")
        else:  # $DISSENSUS_SIGNING_KEY: the decision packet carries a signature
            data = output.model_dump(mode="json")
            if data.get("packet") is not None:
                data["packet"] = sign_document(data["packet"], signer)
            write_stdout(json_shown(json.dumps(data, ensure_ascii=False)) + "\n")
    else:
        _show(output)
    if output.status != "complete":
        err_console.print(
            f"error: the deliberation stopped early ({output.status}): {shown(stop_cause(output))}"
        )
        raise typer.Exit(code=EXIT_FAILURE)
    raise typer.Exit(code=EXIT_OK)


def stop_cause(output: DeliberationOutput) -> str:
    """Why a deliberation stopped early: its status detail, which says what stopped it
    (the budget's refusal, the deadline, the stage in which every participant failed,
    quoting the failure), never an earlier failure the run went on after (an invalid
    act recorded in stage 2 is not why the budget ran out in stage 5)."""
    return " ".join((output.detail or output.status).split())


def _show(output: DeliberationOutput) -> None:
    table = Table(title=f"{output.method} on {shown(output.task_id)}", show_header=False)
    table.add_row("model", shown(output.model))
    table.add_row("selected", shown(output.selected_option or "-"))
    table.add_row("status", output.status + (f" ({shown(output.detail)})" if output.detail else ""))
    if output.packet is not None:
        table.add_row("path", shown(output.packet.path))
        table.add_row("rounds", str(output.packet.metrics.rounds))
    table.add_row("calls", str(output.usage.calls))
    table.add_row(
        "tokens",
        f"{output.usage.prompt_tokens} prompt + {output.usage.completion_tokens} completion",
    )
    out_console.print(table)
    out_console.print(shown_block(output.answer))


# ---------------------------------------------------------------------------- judge
def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


class Score(TypedDict):
    """One judge's scores of one output, as ``judge --json`` lists them."""

    judge: str
    task_id: str
    method: str
    variant: str | None
    overall: int
    risk_identification: int
    reasoning_depth: int
    actionability: int
    rationale: str


Means = dict[str, dict[str, dict[str, float]]]
"""Judge -> method (and variant) -> criterion (and ``n``) -> mean."""

_CRITERIA = ("overall", "risk_identification", "reasoning_depth", "actionability")


def aggregate(scores: list[Score]) -> Means:
    """Per judge and per method (and variant): mean of every rubric criterion, and n."""
    out: Means = {}
    groups: dict[tuple[str, str], list[Score]] = {}
    for s in scores:
        key = s["method"] + (f"[{s['variant']}]" if s.get("variant") else "")
        groups.setdefault((s["judge"], key), []).append(s)
    for (judge, key), rows in sorted(groups.items()):
        means = {c: round(_mean([float(r[c]) for r in rows]), 3) for c in _CRITERIA}  # type: ignore[literal-required]
        out.setdefault(judge, {})[key] = means | {"n": float(len(rows))}
    return out


async def _judge_all(
    outputs: list[DeliberationOutput], specs: list[str], budget: tuple[int | None, int | None]
) -> tuple[list[Score], list[str]]:
    from dissensus.agents.deliberator import LLMJudge
    from dissensus.llm import LLMError

    scores: list[Score] = []
    errors: list[str] = []
    for spec in specs:
        client = _client(spec, "judge", *budget)
        judge = LLMJudge(client, id="judge")
        try:
            for out in outputs:
                try:
                    s = await judge.score(out)
                except LLMError as exc:
                    errors.append(f"{spec}: {out.task_id}/{out.method}: {exc}")
                    continue
                scores.append(
                    Score(
                        judge=spec,
                        task_id=out.task_id,
                        method=out.method,
                        variant=out.variant,
                        overall=s.overall,
                        risk_identification=s.risk_identification,
                        reasoning_depth=s.reasoning_depth,
                        actionability=s.actionability,
                        rationale=s.rationale,
                    )
                )
        finally:
            await client.aclose()
    return scores, errors


@app.command("judge")
def judge_cmd(
    outputs_file: str = typer.Argument(
        ..., metavar="OUTPUTS.jsonl", help="Outputs of `deliberate --json` ('-' = stdin)."
    ),
    models: list[str] | None = typer.Option(
        None, "--model", help="Judge model spec; repeat for several judges."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print scores and per-judge means as JSON."),
    rejects: str | None = typer.Option(None, "--rejects", help="Write rejected input lines here."),
    max_calls: int | None = typer.Option(
        None, "--max-calls", min=0, help="Budget per judge: most model attempts."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=0, help="Budget per judge: most tokens."
    ),
) -> None:
    """Score outputs 1-10 (overall, risk identification, reasoning depth, actionability) per judge."""
    from dissensus.dci.output import JudgedOutput
    from dissensus.io.jsonl import Reject, RejectSink, read_models
    from dissensus.llm.resolve import ModelFileKey, check_model_spec

    check_input_path(outputs_file)
    check_outputs({"--rejects": rejects}, reads={"OUTPUTS.jsonl": outputs_file})
    # A judge is named by its spec: the same spec given twice is one judge, asked once.
    specs = list(dict.fromkeys(models or [])) or [
        os.environ.get(MODEL_ENV) or bundled_model("judge")
    ]
    checked: set[ModelFileKey] = set()  # a file several specs name is read once
    for spec in specs:
        check_model_spec(
            spec, checked=checked, files={"OUTPUTS.jsonl": outputs_file, "--rejects": rejects}
        )
    outputs: list[DeliberationOutput] = []
    rejected = 0
    # The input first: one refused whole (gzip piped in) leaves --rejects as it was.
    with open_input(outputs_file) as handle, RejectSink(rejects) as sink:
        # a signed line's packet is read, its signature set aside (verify checks it)
        for item in read_models(JudgedOutput, handle, file=outputs_file):
            if isinstance(item, Reject):
                sink.add(item)
                rejected += 1
            else:
                outputs.append(item)
    scores, errors = asyncio.run(_judge_all(outputs, specs, (max_calls, max_tokens)))
    summary = aggregate(scores)
    if as_json:
        write_stdout(
            json_shown(
                json.dumps(
                    {"means": summary, "scores": scores, "errors": errors}, ensure_ascii=False
                )
            )
            + "\n"
        )
    else:
        _show_judges(summary)
    if errors:
        more = f" (and {len(errors) - 1} more; --json lists them all)" if len(errors) > 1 else ""
        first = " ".join(errors[0].split())
        err_console.print(f"error: judge call failed: {shown(first)}{more}", soft_wrap=True)
    # A failed judge call is a failure whatever else happened: rejected lines (3) say
    # that every other line was processed, which a failed call denies.
    raise typer.Exit(code=EXIT_FAILURE if errors else exit_for(rejected))


def _show_judges(summary: Means) -> None:
    # Method keys carry the input lines' ``variant`` and judges are model specs: both are
    # untrusted text, printed through shown() (control characters escaped).
    judges = list(summary)
    methods = sorted({m for j in judges for m in summary[j]})
    table = Table(title="Mean overall quality (1-10) per judge")
    table.add_column("method")
    for j in judges:
        table.add_column(shown(j), justify="right")
    for m in methods:
        table.add_row(
            shown(m),
            *(f"{summary[j][m]['overall']:.2f}" if m in summary[j] else "-" for j in judges),
        )
    out_console.print(table)
    for j in judges:
        detail = Table(title=f"Rubric means, judge {shown(j)}")
        for col in ("method", "n", "overall", "risk", "depth", "action"):
            detail.add_column(col, justify="right" if col != "method" else "left")
        for m, v in summary[j].items():
            detail.add_row(
                shown(m),
                str(int(v["n"])),
                *(
                    f"{v[c]:.2f}"
                    for c in ("overall", "risk_identification", "reasoning_depth", "actionability")
                ),
            )
        out_console.print(detail)
