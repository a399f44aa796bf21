"""DCI efficiency and process metrics, as the DCI paper's Tables 5-6, offline on the example tasks.

Runs every method (DCI and the four baselines) on the seven example tasks in
``examples/dci/`` with the bundled scripted models and prints, per method: mean prompt,
completion and total tokens per task, the ratio to the single agent, mean calls, and the
share of tasks with a decision packet, a complete packet (selected option with rationale
and evidence, reopen conditions, next actions), a minority report and reopen conditions.
Then the Table 7 ablations of DCI on the same tasks, and the compaction measurement:
prompt tokens per call as rounds and participants grow, compacted workspace vs the
full transcript (rule-based participants that never converge, acts of about 200 tokens).

Token counts of scripted models are estimates (about four characters a token) of the
actual prompt and completion texts, so ratios between methods are meaningful; absolute
numbers are not a real model's. Usage: ``python evaluation/dci_efficiency.py [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from dissensus.agents.deliberator import deliberate_with_model
from dissensus.baselines.deliberation import run_baseline
from dissensus.dci.acts import RawAct
from dissensus.dci.flow import deliberate
from dissensus.dci.output import METHODS, DeliberationOutput, Method
from dissensus.dci.participant import ActRequest, FunctionParticipant
from dissensus.dci.task import DCIConfig, ParticipantSpec, Task, load_task, parse_task
from dissensus.llm import ModelClient, ScriptedBackend

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "dci"


def _rules(name: str, cache: dict[str, Any] = {}) -> Any:  # noqa: B006 - deliberate per-process cache
    if name not in cache:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        cache[name] = yaml.load(
            (REPO / "src" / "dissensus" / "dci" / "models" / f"{name}.yaml").read_text(
                encoding="utf-8"
            ),
            Loader=loader,
        )
    return cache[name]


def _client(method: str) -> ModelClient:
    return ModelClient(ScriptedBackend.from_dict(_rules(method), name=f"{method}.yaml"))


async def _run(method: Method, task: Task, config: DCIConfig | None = None) -> DeliberationOutput:
    client = _client(method)
    try:
        if method == "dci":
            return (await deliberate_with_model(task, client, config=config))[0]
        return await run_baseline(method, client, task)
    finally:
        await client.aclose()


def _complete(out: DeliberationOutput) -> bool:
    p = out.packet
    return bool(
        p is not None
        and p.selected is not None
        and p.selected.rationale
        and p.selected.evidence
        and p.reopen_conditions
        and p.next_actions
    )


def summarise(outputs: list[DeliberationOutput], single_total: float) -> dict[str, float]:
    n = len(outputs)
    total = sum(o.usage.total_tokens for o in outputs) / n
    return {
        "tasks": n,
        "prompt_tokens": sum(o.usage.prompt_tokens for o in outputs) / n,
        "completion_tokens": sum(o.usage.completion_tokens for o in outputs) / n,
        "total_tokens": total,
        "x_single": total / single_total if single_total else float("nan"),
        "calls": sum(o.usage.calls for o in outputs) / n,
        "packet_pct": 100.0 * sum(o.packet is not None for o in outputs) / n,
        "complete_packet_pct": 100.0 * sum(_complete(o) for o in outputs) / n,
        "minority_report_pct": 100.0
        * sum(bool(o.packet and o.packet.minority_report) for o in outputs)
        / n,
        "reopen_pct": 100.0
        * sum(bool(o.packet and o.packet.reopen_conditions) for o in outputs)
        / n,
    }


# ------------------------------------------------------------------ compaction measurement
def _synthetic_act(req: ActRequest) -> RawAct:
    """About 200 tokens per act; everyone scores the live options equally, so no round converges."""
    body = (
        "This contribution weighs the options against the criteria and names a concrete concern. "
        * 9
    ).strip()
    live = re.findall(r"^- (o\d+) \[(?:live|finalist|selected)", req.prompt, re.M)
    stage = req.stage
    if stage == "frame":
        return RawAct(act="frame", target="a0", text=body)
    if stage == "propose":
        return RawAct(
            act="propose",
            target="a0",
            text=body,
            option=f"Option of {req.participant}: " + body[:300],
        )
    if stage == "challenge":
        return RawAct(act="challenge", target=live[int(req.participant[1:]) % len(live)], text=body)
    if stage == "revise":
        return RawAct(act="extend", target=live[0], text=body, option="Amendment: " + body[:200])
    if stage == "score":
        return RawAct(
            act="recommend",
            target=live[0],
            text=body,
            scores={o: 0.5 for o in live},
            confidence=0.5,
        )
    selected = re.findall(r"^- (o\d+) \[selected", req.prompt, re.M)
    return RawAct(
        act="synthesize", target=selected[0], text=body, reopen_conditions=["x"], next_actions=["y"]
    )


async def compaction_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for full in (False, True):
        for n, r in ((4, 1), (4, 2), (4, 4), (4, 8), (2, 2), (8, 2), (16, 2)):
            specs = tuple(
                ParticipantSpec(
                    id=f"p{i}", archetype=["Framer", "Explorer", "Challenger", "Integrator"][i % 4]
                )
                for i in range(n)
            )
            task = parse_task({"question": "Which option should we adopt?"}).model_copy(
                update={"participants": specs}
            )
            agents = [FunctionParticipant(s.id, _synthetic_act) for s in specs]
            config = DCIConfig(max_rounds=r, full_transcript=full)
            result = await deliberate(task, agents, config=config)
            prompts = [(t.prompt_chars + 3) // 4 for t in result.trace]
            last_round = [
                (t.prompt_chars + 3) // 4
                for t in result.trace
                if t.round == r and t.stage == "score"
            ]
            rows.append(
                {
                    "view": "full transcript" if full else "compacted",
                    "participants": n,
                    "rounds": r,
                    "calls": len(prompts),
                    "mean_prompt": sum(prompts) / len(prompts),
                    "max_prompt": max(prompts),
                    "last_score_prompt": sum(last_round) / len(last_round),
                    "run_prompt_total": sum(prompts),
                }
            )
    return rows


# --------------------------------------------------------------------------------- main
async def main_async() -> dict[str, Any]:
    tasks = [load_task(p) for p in sorted(EXAMPLES.glob("*.yaml"))]
    by_method: dict[str, list[DeliberationOutput]] = {}
    for method in METHODS:
        by_method[method] = [await _run(method, t) for t in tasks]
    single_total = sum(o.usage.total_tokens for o in by_method["single"]) / len(tasks)
    table = {m: summarise(outs, single_total) for m, outs in by_method.items()}
    paths = {o.task_id: o.packet.path for o in by_method["dci"] if o.packet}
    ablations: dict[str, dict[str, float]] = {}
    for name, update in (
        ("no_archetypes", {"archetypes": False}),
        ("no_typed_grammar", {"typed_grammar": False}),
        ("no_dci_cf", {"convergent_flow": False}),
    ):
        outs = [await _run("dci", t, t.dci.model_copy(update=update)) for t in tasks]
        ablations[name] = summarise(outs, single_total)
    return {
        "methods": table,
        "dci_paths": paths,
        "ablations": ablations,
        "compaction": await compaction_rows(),
    }


def _print(result: dict[str, Any]) -> None:
    out = sys.stdout
    out.write(
        "Efficiency and process metrics per method (7 example tasks, bundled scripted models)\n\n"
    )
    out.write(
        "| method | prompt tok/task | completion tok/task | total tok/task | x single | calls/task | packet % | complete packet % | minority report % | reopen conditions % |\n"
    )
    out.write("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for m, s in list(result["methods"].items()) + [
        (f"dci ({k})", v) for k, v in result["ablations"].items()
    ]:
        out.write(
            f"| {m} | {s['prompt_tokens']:.0f} | {s['completion_tokens']:.0f} | {s['total_tokens']:.0f} | {s['x_single']:.2f} | "
            f"{s['calls']:.1f} | {s['packet_pct']:.0f} | {s['complete_packet_pct']:.0f} | {s['minority_report_pct']:.0f} | {s['reopen_pct']:.0f} |\n"
        )
    out.write(
        "\nDCI paths: " + ", ".join(f"{k}={v}" for k, v in result["dci_paths"].items()) + "\n"
    )
    out.write(
        "\nPrompt tokens per call vs rounds and participants (synthetic acts of ~200 tokens, no convergence)\n\n"
    )
    out.write(
        "| view | participants | rounds | calls | mean prompt/call | max prompt/call | score-stage prompt, last round | prompt tokens, whole run |\n"
    )
    out.write("|---|---:|---:|---:|---:|---:|---:|---:|\n")
    for r in result["compaction"]:
        out.write(
            f"| {r['view']} | {r['participants']} | {r['rounds']} | {r['calls']} | {r['mean_prompt']:.0f} | {r['max_prompt']} | "
            f"{r['last_score_prompt']:.0f} | {r['run_prompt_total']} |\n"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(main_async())
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        _print(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
