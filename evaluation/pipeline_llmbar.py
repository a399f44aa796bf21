"""The composed pipeline on LLMBar: auto-accept precision and coverage, plain routing vs pipeline.

Reads the LLMBar judge panels (``Swap_CoT``: every judge's answer in both presentation
orders) from ``<data>/llmbar`` and reports, for every leave-one-subset-out split (the
reliability calibration is built from the *other* subsets only, the test subset's gold
labels are used for scoring only) and pooled over the splits:

* (i) **plain state routing**: a case is auto-accepted when the disagreement-states paper's default routing
  sends it to ``auto`` or ``auto_explain``; the decision is the panel's plurality;
* (ii) **the composed pipeline** (``examples/llmbar-policy.yaml`` in trust-region mode,
  with the split's reliability calibration and the marker lexicon the trust regions
  shipped with; learned acceptance is measured by ``evaluation/acceptance.py``):
  read -> route -> guard (of the automatic routes) -> seek_context (the recorded swapped-order
  answers are the re-ask) -> calibrated acceptance -> record.

Precision = share of auto-accepted decisions equal to the gold label; coverage = share
of cases auto-accepted. Nothing but the panels' outputs is seen at decision time
(``meta.gold`` is never read by the pipeline).

``--write-calibration FILE`` builds the shipped reliability file from every subset of
``<data>/llmbar`` (the file ``examples/llmbar-policy.yaml`` names).

Usage::

    .venv/bin/python evaluation/pipeline_llmbar.py [--data ../shared/data] [--similarity minilm]
    .venv/bin/python evaluation/pipeline_llmbar.py --write-calibration examples/llmbar-reliability.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import input_file, output_file, refuse, require_data

from dissensus.convert.llmbar import iter_llmbar_panels
from dissensus.errors import ConfigError
from dissensus.pipeline import (
    CalibrationFile,
    MarkerLexicon,
    Policy,
    RunSpec,
    Runtime,
    agent_signals,
    build_calibration,
    decide_case,
    load_policy,
    recorded_second_answers,
)
from dissensus.states import RuleSet, SimilarityBackend, get_backend, read_panels
from dissensus.states.reading import Thresholds
from dissensus.store import Journal
from dissensus.types import Panel, gold_label

REPO = Path(__file__).resolve().parent.parent
TRUST_REGION_LEXICON = MarkerLexicon(
    concession=("however", "both", "also", "more detailed", "more comprehensive"),
    grounding=("instruction", "instructions"),
)
POLICY = REPO / "examples" / "llmbar-policy.yaml"


def calibration_for(panels: list[Panel], policy: Policy, sources: list[str]) -> CalibrationFile:
    """Reliability counts from labelled panels (gold read here, for calibration only)."""
    lexicon = policy.acceptance.markers
    cases = [
        (
            agent_signals(p, recorded_second_answers(p), lexicon),
            str(p.meta.get("subset", "all")),
            gold_label(p.meta),
        )
        for p in panels
    ]
    return build_calibration(
        cases,
        lexicon=lexicon,
        stratum_key="subset",
        built_from=sources,
        description="Order-stable answers of each LLMBar judge (Swap_CoT), by margin score and subset.",
    )


def plain_routing(
    panels: list[Panel], backend: SimilarityBackend, policy: Policy
) -> list[tuple[bool, str | None]]:
    """(auto-accepted?, decision) under the disagreement-states paper's default routing."""
    th = Thresholds.for_model(backend.name, policy.reading.theta_s, policy.reading.theta_a)
    rules = RuleSet.default()
    out = []
    for reading, panel in zip(read_panels(panels, backend, th), panels, strict=True):
        action = rules.route(reading, panel.meta).action
        out.append((action in ("auto", "auto_explain"), reading.decision))
    return out


async def pipeline(
    panels: list[Panel], policy: Policy, cal: CalibrationFile | None, backend: SimilarityBackend
) -> list[tuple[bool, str | None]]:
    journal = Journal(":memory:")
    journal.create_run("eval", kind="evaluation", meta={})
    # The run specification every door builds (the policy checked as a door checks it; no
    # model from the environment: the recorded swapped-order answers are the re-ask), with
    # this split's reliability calibration, built in memory rather than read from a file.
    spec = RunSpec.from_policy(policy, environ={}).model_copy(update={"calibration": cal})
    rt = Runtime(spec, journal, "eval", backend_factory=lambda: backend)
    rt.prefetch(list(enumerate(panels, start=1)))
    out = []
    for line, panel in enumerate(panels, start=1):
        record = await decide_case(rt, panel, line)
        out.append((record.auto, record.decision))
    journal.close()
    return out


def score(results: list[tuple[bool, str | None]], golds: list[str]) -> tuple[int, int, int]:
    accepted = [(d, g) for (auto, d), g in zip(results, golds, strict=True) if auto]
    return len(golds), len(accepted), sum(d == g for d, g in accepted)


def fmt(n: int, acc: int, right: int) -> str:
    prec = f"{right / acc:.3f}" if acc else "  -  "
    return f"{prec} | {acc / n:.3f} ({acc}/{n})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--policy", type=input_file, default=POLICY)
    parser.add_argument(
        "--similarity",
        default=None,
        choices=["tfidf", "static", "minilm"],
        help="override the policy's similarity backend",
    )
    parser.add_argument("--write-calibration", type=output_file, default=None, metavar="FILE")
    args = parser.parse_args(argv)

    root = require_data(args.data, ["llmbar"]) / "llmbar"
    try:
        policy, _ = load_policy(args.policy)
    except ConfigError as exc:
        refuse(f"--policy: {exc}")
    panels = list(iter_llmbar_panels(root, "Swap_CoT"))
    subsets = sorted({str(p.meta["subset"]) for p in panels})
    # This evaluation measures the trust regions (the shipped policy now decides with
    # learned acceptance, see evaluation/acceptance.py): their marker lexicon, as shipped before.
    policy = policy.model_copy(
        update={
            "acceptance": policy.acceptance.model_copy(
                update={"model": None, "markers": TRUST_REGION_LEXICON}
            )
        }
    )
    if args.similarity:
        policy = policy.model_copy(
            update={"reading": policy.reading.model_copy(update={"similarity": args.similarity})}
        )

    if args.write_calibration:
        cal = calibration_for(panels, policy, [f"llmbar/{s} (Swap_CoT)" for s in subsets])
        Path(args.write_calibration).write_text(
            cal.model_dump_json(indent=1) + "\n", encoding="utf-8"
        )
        print(f"wrote {args.write_calibration}: {len(cal.agents)} agents, strata {subsets}")
        return 0

    backend = get_backend(policy.reading.similarity)
    print(f"LLMBar Swap_CoT: {len(panels)} panels, subsets {subsets}; similarity {backend.name}")
    print(
        "split (test subset)        | plain routing: precision | coverage | pipeline: precision | coverage"
    )
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for held in subsets:
        test = [p for p in panels if p.meta["subset"] == held]
        train = [p for p in panels if p.meta["subset"] != held]
        cal = calibration_for(train, policy, [f"llmbar/{s}" for s in subsets if s != held])
        golds = [gold_label(p.meta) for p in test]
        plain = score(plain_routing(test, backend, policy), golds)
        piped = score(asyncio.run(pipeline(test, policy, cal, backend)), golds)
        for name, s in (("plain", plain), ("pipeline", piped)):
            for i in range(3):
                totals[name][i] += s[i]
        print(f"{held:<26} | {fmt(*plain)} | {fmt(*piped)}")
    p, q = totals["plain"], totals["pipeline"]
    print(f"{'pooled (leave-one-out)':<26} | {fmt(p[0], p[1], p[2])} | {fmt(q[0], q[1], q[2])}")

    cal_all = calibration_for(panels, policy, subsets)
    golds = [gold_label(p.meta) for p in panels]
    ins = score(asyncio.run(pipeline(panels, policy, cal_all, backend)), golds)
    print(
        f"{'in-sample (all subsets)':<26} | {'':>24} | {fmt(*ins)}   (calibration = test: optimistic)"
    )

    print("ablations, pooled over the leave-one-subset-out splits (precision | coverage):")
    no_markers = policy.model_copy(
        update={
            "acceptance": policy.acceptance.model_copy(
                update={"markers": MarkerLexicon(concession=(), grounding=())}
            )
        }
    )
    variants: list[tuple[str, Policy, bool]] = [
        ("order stability only (no margin markers)", no_markers, True),
        ("no calibration (independent families)", policy, False),
    ]
    for name, variant, calibrated in variants:
        tot = [0, 0, 0]
        for held in subsets:
            test = [p for p in panels if p.meta["subset"] == held]
            train = [p for p in panels if p.meta["subset"] != held]
            cal = calibration_for(train, variant, [held]) if calibrated else None
            s = score(
                asyncio.run(pipeline(test, variant, cal, backend)),
                [gold_label(p.meta) for p in test],
            )
            tot = [a + b for a, b in zip(tot, s, strict=True)]
        print(f"  {name:<44} {fmt(tot[0], tot[1], tot[2])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
