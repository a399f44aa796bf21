"""The watchmen of learned acceptance on real data: the shift check, the monitor, the review loop.

Features as ``decide`` computes them under the default policy (similarity ``tfidf``);
delta 0.1, at least 30 accepted, the default family rule. Three tables:

* **ZeroEval GSM8K split by question length** (characters of ``meta.question``; the
  shorter half against the longer half, ties broken by position): calibrate on the
  short questions and deploy on the long ones, and the reverse, at target 0.95. Printed:
  deployed precision and coverage, and the label-free shift check (sample-split
  classifier two-sample test, :func:`dissensus.acceptance.shift_check`: AUC and
  Mann-Whitney p-value of the testing halves), flagged at the level of a file's first
  run-level check (``check_level(0.1, 1)``, about 0.030, with ``shift_alpha`` 0.1) and
  of its tenth (about 0.0003).
* **The monitor's audits to suspension on real data.** For every deployment (each
  LLMBar rotation: calibrate on two subsets, deploy on the third, target 0.9; and both
  ZeroEval length splits), the automatic commits on the deployed cases are the
  population audits are drawn from: ``--streams`` (100) seeded streams of up to
  ``--max-audits`` (400) audits (20 streams where the commits' precision meets the
  target: each runs to its end), each audit a uniform draw (with replacement: the deployed
  stream goes on) among the deployed cases acceptance committed, its outcome whether
  the commit was right. :func:`dissensus.acceptance.monitor.suspended_after` (confseq's
  betting confidence sequence, delta 0.1, 1000-point grid) gives the audits at which the
  stratum is suspended (computed on doubling prefixes of the stream, which gives the
  same answer: the sequence is causal). Printed: the commits' precision, the streams
  suspended, and the median (and quartiles) of the audits to suspension. Where the commits'
  precision meets the target, every suspension is a false one.
* **The review loop through a journal** (LLMBar ``Swap_CoT``, target 0.8; seeded split of
  the cases into a labelled calibration set (40%), a work queue (30%) and a held-out set
  (30%)): ``calibrate-acceptance`` on the labelled set; ``decide`` the work queue into a
  journal (default policy with the file, ``acceptance.audit_rate`` 0.05); every
  escalation is resolved and every blind audit answered with the gold label
  (:func:`dissensus.pipeline.review.resolve`, :func:`dissensus.pipeline.confirm.confirm`);
  then ``calibrate-acceptance`` again with ``--journal`` (labelled set and reviews, and
  the reviews alone). Each file decides the held-out set (``decide``, the same policy):
  coverage and precision before and after.

Usage::

    .venv/bin/python evaluation/acceptance_watch.py [--data ../shared/data] [--cache DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, parse_names, work_dir
from acceptance import DataSet
from acceptance_families import _load, data_needed

from dissensus.acceptance import apply_acceptance, calibrate, shift_check
from dissensus.acceptance.monitor import suspended_after
from dissensus.acceptance.prepare import panel_case_key
from dissensus.acceptance.shift import check_level
from dissensus.states import get_backend

DELTA, MIN_ACCEPTED = 0.1, 30
FIRST, TENTH = check_level(0.1, 1), check_level(0.1, 10)
"""The levels of a file's first and tenth run-level shift checks (``shift_alpha`` 0.1)."""
REPO = Path(__file__).resolve().parent.parent
TABLES = ("zeroeval", "llmbar", "loop")
"""The three tables (``--sets``), in the order they print."""


def deploy(
    ds: DataSet, cal: Sequence[int], test: Sequence[int], target: float
) -> tuple[list[bool], float, object]:
    """Calibrate on ``cal``, apply to ``test``: the commits' outcomes, coverage, shift check."""
    acc = calibrate(
        [ds.cases[i] for i in cal],
        [ds.golds[i] for i in cal],
        target=target,
        delta=DELTA,
        min_accepted=MIN_ACCEPTED,
    )
    outcomes = []
    for i in test:
        v = apply_acceptance(acc, ds.cases[i], key=panel_case_key(ds.panels[i]))
        if v.accepted:
            outcomes.append(v.decision == ds.golds[i])
    assert acc.shift_reference is not None
    check = shift_check(acc.shift_reference, [ds.cases[i] for i in test], alpha=FIRST)
    return outcomes, len(outcomes) / len(test), check


def first_suspension(outcomes: Sequence[bool], target: float, start: int = 25) -> int | None:
    """The audits at which the monitor suspends on ``outcomes``, if it does.

    The confidence sequence is causal (its bound after ``i`` audits depends on those
    ``i`` only), so it is run on doubling prefixes and stops at the first suspension:
    the same answer as on the whole stream, at a fraction of the cost."""
    n = start
    while True:
        prefix = outcomes[: min(n, len(outcomes))]
        at = suspended_after(prefix, target=target, delta=DELTA)
        if at is not None or len(prefix) == len(outcomes):
            return at
        n *= 2


def audits_to_suspension(
    outcomes: Sequence[bool], target: float, streams: int, max_audits: int, seed: int = 0
) -> tuple[int, list[int]]:
    """Seeded audit streams (at most ``max_audits`` each): how many ran, and the audits
    each suspended one took."""
    rng = np.random.default_rng(seed)
    got = []
    for _ in range(streams):
        draw = rng.integers(0, len(outcomes), size=max_audits)
        at = first_suspension([outcomes[j] for j in draw], target)
        if at is not None:
            got.append(at)
    return streams, got


def _q(values: Sequence[int]) -> str:
    if not values:
        return "-"
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return f"{med:.1f} ({q1:.0f}-{q3:.0f})"


def length_splits(ds: DataSet) -> list[tuple[str, list[int], list[int]]]:
    lengths = [len(str(p.meta.get("question", ""))) for p in ds.panels]
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    short, long = sorted(order[: len(order) // 2]), sorted(order[len(order) // 2 :])
    cut = lengths[order[len(order) // 2]]
    print(
        f"\nZeroEval split by question length: {len(short)} short (< about {cut} characters), "
        f"{len(long)} long"
    )
    return [("short -> long", short, long), ("long -> short", long, short)]


def watch(
    name: str,
    deployments: list[tuple[str, list[int], list[int]]],
    ds: DataSet,
    target: float,
    streams: int,
    max_audits: int,
) -> None:
    print(f"\n{name} at target {target} (delta {DELTA})")
    print(
        f"{'calibrated -> deployed':<40} | commits | precision | coverage | AUC   | p       | "
        f"flagged (check 1: {FIRST:.2g}) | check 10: {TENTH:.2g} | streams suspended | "
        "audits to suspension, median (IQR)"
    )
    for label, cal, test in deployments:
        outcomes, coverage, check = deploy(ds, cal, test, target)
        prec = float(np.mean(outcomes)) if outcomes else float("nan")
        # Where precision holds every suspension is false and every stream runs to the end:
        # fewer streams there (each costs the whole stream).
        n_streams = streams if outcomes and prec < target else min(streams, 20)
        ran, at = (
            audits_to_suspension(outcomes, target, n_streams, max_audits) if outcomes else (0, [])
        )
        share = f"{len(at)}/{ran}" if ran else "-"
        print(
            f"{label:<40} | {len(outcomes):7d} | {prec:9.3f} | {coverage:8.3f} | "
            f"{check.auc:.3f} | {check.p_value:<7.2g} | {check.shifted!s:<7} | "  # type: ignore[attr-defined]
            f"{check.p_value <= TENTH!s:<7} | "  # type: ignore[attr-defined]
            f"{share:>17} | {_q(at)}"
        )
        sys.stdout.flush()


def _write(path: Path, panels: Sequence[object]) -> None:
    path.write_text(
        "".join(p.model_dump_json() + "\n" for p in panels),  # type: ignore[attr-defined]
        encoding="utf-8",
    )


def _decide(journal: object, cases: Path, policy: Path, run_id: str) -> list[object]:
    from dissensus.pipeline.batch import execute_run, start_run

    start_run(journal, str(cases), policy, run_id=run_id)  # type: ignore[arg-type]

    async def go() -> list[object]:
        return [r async for r in execute_run(journal, run_id)]  # type: ignore[arg-type]

    return asyncio.run(go())


def review_loop(ds: DataSet, target: float, seed: int = 0) -> None:
    from dissensus.cli import main as cli
    from dissensus.pipeline.audit import open_audits
    from dissensus.pipeline.confirm import confirm
    from dissensus.pipeline.review import resolve
    from dissensus.store import Journal

    order = np.random.default_rng(seed).permutation(len(ds.panels)).tolist()
    n_cal, n_queue = int(0.4 * len(order)), int(0.3 * len(order))
    cal, queue, held = order[:n_cal], order[n_cal : n_cal + n_queue], order[n_cal + n_queue :]
    gold = {ds.panels[i].id: ds.golds[i] for i in range(len(ds.panels))}
    print(
        f"\nReview loop through a journal: {ds.name}, target {target} (delta {DELTA}); "
        f"{len(cal)} labelled, {len(queue)} in the work queue, {len(held)} held out"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _write(root / "cal.jsonl", [ds.panels[i] for i in cal])
        _write(root / "queue.jsonl", [ds.panels[i] for i in queue])
        _write(root / "held.jsonl", [ds.panels[i] for i in held])
        plain = root / "plain.yaml"
        plain.write_text(yaml.safe_dump({"reading": {"similarity": "tfidf"}}), encoding="utf-8")
        common = ["--policy", str(plain), "--target-precision", str(target), "--delta", str(DELTA)]

        def calibrate_to(out: str, *sources: str) -> None:
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                code = cli(["calibrate-acceptance", *sources, "--out", str(root / out), *common])
            assert code == 0, out
            # What calibrate-acceptance prints, but for what changes from run to run: the
            # temporary folder, and so the file's sha256 (the file records its sources).
            for line in printed.getvalue().splitlines():
                if not line.startswith("sha256 "):
                    print(line.replace(str(root), "TMP"))

        def policy_for(name: str) -> Path:
            path = root / f"{name}.yaml"
            doc = {"reading": {"similarity": "tfidf"}, "acceptance": {"model": name}}
            path.write_text(yaml.safe_dump(doc), encoding="utf-8")
            return path

        calibrate_to("before.json", str(root / "cal.jsonl"))
        journal_path = root / "j.sqlite"
        with Journal(journal_path) as journal:
            records = _decide(journal, root / "queue.jsonl", policy_for("before.json"), "queue")
            resolved = audited = 0
            for r in records:
                review_id = getattr(r, "review_id", None)
                if review_id and not getattr(r, "auto", False):
                    resolve(
                        journal,
                        review_id,
                        decision=gold[r.id],  # type: ignore[attr-defined]
                        note="gold label",
                        reviewer="evaluation",
                    )
                    resolved += 1
            for item in list(open_audits(journal, "queue")):
                confirm(
                    journal,
                    item.review_id,
                    decision=gold[item.id],
                    note="gold label",
                    reviewer="evaluation",
                )
                audited += 1
        auto_q = sum(1 for r in records if getattr(r, "auto", False))
        print(
            f"work queue decided with the first file: {auto_q} automatic, {resolved} escalations "
            f"resolved with the gold label, {audited} blind audits answered"
        )
        calibrate_to("after.json", str(root / "cal.jsonl"), "--journal", str(journal_path))
        calibrate_to("reviews.json", "--journal", str(journal_path))
        print(f"{'acceptance file':<44} | calibration cases | held-out coverage | precision")
        for label, name in (
            ("labelled set only (before)", "before.json"),
            ("labelled set + journal reviews (after)", "after.json"),
            ("journal reviews only", "reviews.json"),
        ):
            n_cal = json.loads((root / name).read_text())["calibration_n"]
            with Journal(root / f"held-{name}.sqlite") as journal:
                held_records = _decide(journal, root / "held.jsonl", policy_for(name), "held")
            auto = [r for r in held_records if getattr(r, "auto", False)]
            right = sum(r.decision == gold[r.id] for r in auto)  # type: ignore[attr-defined]
            prec = right / len(auto) if auto else float("nan")
            print(f"{label:<44} | {n_cal:17d} | {len(auto) / len(held):17.3f} | {prec:9.3f}")
            sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument(
        "--cache", type=work_dir, default=None, help="keep features here between runs"
    )
    parser.add_argument("--streams", type=at_least(1), default=100)
    parser.add_argument("--max-audits", type=at_least(1), default=400)
    parser.add_argument("--sets", default=",".join(TABLES), help=f"of {', '.join(TABLES)}")
    args = parser.parse_args(argv)
    sets = parse_names(args.sets, TABLES, "--sets")
    # The loop table decides LLMBar cases too.
    datasets = [
        n for n in ("zeroeval", "llmbar") if n in sets or (n == "llmbar" and "loop" in sets)
    ]
    data = data_needed(args.data, datasets, args.cache)
    threadpool_limits(1)
    backend = get_backend("tfidf")
    t0 = time.time()
    if "zeroeval" in sets:
        ds = _load(data, "zeroeval", backend, args.cache)
        watch(
            "ZeroEval GSM8K by question length",
            length_splits(ds),
            ds,
            0.95,
            args.streams,
            args.max_audits,
        )
        print(f"({time.time() - t0:.0f}s)")
    if "llmbar" in sets or "loop" in sets:
        ds = _load(data, "llmbar", backend, args.cache)
    if "llmbar" in sets:
        rotations = []
        for held in sorted(set(ds.strata)):
            cal = [i for i, x in enumerate(ds.strata) if x != held]
            test = [i for i, x in enumerate(ds.strata) if x == held]
            others = " + ".join(sorted({x for x in ds.strata if x != held}))
            rotations.append((f"{others} -> {held}", cal, test))
        watch("LLMBar subsets", rotations, ds, 0.9, args.streams, args.max_audits)
        print(f"({time.time() - t0:.0f}s)")
    if "loop" in sets:
        review_loop(ds, 0.8)
        print(f"({time.time() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
