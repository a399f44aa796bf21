"""Score families and the guarantee on populations: does acceptance ever lose to counting?

For each data set (LLMBar ``Swap_CoT``, ZeroEval GSM8K, VariErrNLI; features computed
once per case as ``decide`` computes them under the default policy, similarity
``tfidf``), over ``--splits`` random calibration halves:

* **Validity on the population**: the data set stands for the population; a split
  *succeeds* when the precision, over every case of the data set, of what the chosen
  threshold accepts (the calibration half scored as the calibration scored it,
  out-of-fold; the other half as deployed) meets the target. It must be ``>= 1 - delta``.
* **Every family beside the chosen one**: each score family alone (at the full
  ``delta``), and the family chosen by each selection rule (``bonferroni``: every
  eligible family at ``delta / F``, most accepted wins; ``split``: one half of the
  calibration set chooses, the other half sets the threshold). Coverage is measured on
  the deployed half; "best in hindsight" is, per data set, the single family with the
  highest mean coverage.
* **Learned acceptance against counting, paired**: on the same halves, the learned model
  alone and ``votes_both`` alone (each at the full ``delta``): the difference of their
  coverage at the same target, and of their precision at equal coverage (the learned
  ranking of the deployed half cut at the count rule's number of commits), mean ± sd
  over halves and how many halves the learned model is higher, equal, lower.
* **ZeroEval first half -> second half** at target 0.95, beside the count rule.
* **Shift check**: on LLMBar, calibrate on two subsets, deploy on the third (every
  rotation): deployed precision and coverage beside the shift check's AUC, p-value and
  flag at the levels of a file's first and tenth run-level checks; on every data set,
  how often it flags exchangeable random halves (at 0.1 and at the first check's level;
  every flag there is a false alarm), with the smallest p-value.
* **Convergent disagreements**: on one LLMBar split and one ZeroEval split, ``decide``
  with the acceptance file under the default routing (CD escalates) and with
  ``routing.convergent_disagreement_without_values: seek_context`` (CD reaches
  acceptance): automatic decisions, their precision and coverage.

Every figure is printed with its spread (standard deviation over splits).

Usage::

    .venv/bin/python evaluation/acceptance_families.py [--data ../shared/data] [--splits 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import at_least, parse_names, require_data, work_dir
from acceptance import DATA_DIRS, SETS, DataSet, load

from dissensus.acceptance import apply_acceptance, calibrate, crossfit, save_acceptance
from dissensus.acceptance.families import FAMILIES
from dissensus.acceptance.prepare import panel_case_key
from dissensus.states import get_backend

DELTA, MIN_ACCEPTED = 0.1, 30
REPO = Path(__file__).resolve().parent.parent
Row = tuple[float, float | None, float | None, str]
"""(coverage on the deployed half, its precision, population precision, chosen family)."""


def _outcome(
    ds: DataSet,
    cal: Sequence[int],
    test: Sequence[int],
    target: float,
    fitted: object,
    **kw: object,
) -> Row | None:
    cal_cases = [ds.cases[i] for i in cal]
    cal_golds = [ds.golds[i] for i in cal]
    acc = calibrate(
        cal_cases,
        cal_golds,
        target=target,
        delta=DELTA,
        min_accepted=MIN_ACCEPTED,
        fitted=fitted,  # type: ignore[arg-type]
        **kw,  # type: ignore[arg-type]
    )
    if not any(f.eligible for f in acc.families):
        return None
    t = acc.threshold
    right = accepted = 0
    for i in test:
        v = apply_acceptance(acc, ds.cases[i], key=panel_case_key(ds.panels[i]))
        if v.accepted:
            accepted += 1
            right += v.decision == ds.golds[i]
    # The calibration half as the calibration scored it (out-of-fold for learned).
    if acc.family == "learned":
        cal_scores = fitted.scores  # type: ignore[attr-defined]
    else:
        from dissensus.acceptance.families import family_scores

        cal_scores = family_scores(acc.family, cal_cases)
    cal_acc = cal_right = 0
    for (d, s), g in zip(cal_scores, cal_golds, strict=True):
        if t is not None and d is not None and s >= t:
            cal_acc += 1
            cal_right += d == g
    prec = right / accepted if accepted else None
    pop = (right + cal_right) / (accepted + cal_acc) if accepted + cal_acc else None
    return accepted / len(test), prec, pop, acc.family


def _splits(n: int, splits: int, seed: int) -> list[tuple[list[int], list[int]]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(splits):
        perm = rng.permutation(n)
        out.append((sorted(perm[: n // 2].tolist()), sorted(perm[n // 2 :].tolist())))
    return out


Pair = tuple[float, float, float | None, float | None]
"""One half, learned alone vs ``votes_both`` alone: (learned coverage, votes_both coverage,
learned precision at votes_both's number of commits, votes_both precision); the last two
``None`` when counting commits nothing."""


def _paired_split(
    ds: DataSet, cal: Sequence[int], test: Sequence[int], target: float, fitted: object
) -> Pair:
    """Learned acceptance and the count rule, each alone at the full ``delta``, on one half:
    their coverage, and their precision at equal coverage (the learned ranking of the
    deployed half cut at the count rule's number of commits)."""
    cal_cases = [ds.cases[i] for i in cal]
    cal_golds = [ds.golds[i] for i in cal]
    out = {}
    for family in ("learned", "votes_both"):
        acc = calibrate(
            cal_cases,
            cal_golds,
            target=target,
            delta=DELTA,
            min_accepted=MIN_ACCEPTED,
            fitted=fitted,  # type: ignore[arg-type]
            family=family,
        )
        verdicts = [
            apply_acceptance(acc, ds.cases[i], key=panel_case_key(ds.panels[i])) for i in test
        ]
        right = [v.decision == ds.golds[i] for v, i in zip(verdicts, test, strict=True)]
        out[family] = ([v.accepted for v in verdicts], [v.score for v in verdicts], right)
    accepted, _, right = out["votes_both"]
    k = sum(accepted)
    _, scores, learned_right = out["learned"]
    order = np.argsort(-np.asarray(scores), kind="stable")[:k]
    return (
        float(np.mean(out["learned"][0])),
        k / len(test),
        float(np.mean([learned_right[j] for j in order])) if k else None,
        sum(r for a, r in zip(accepted, right, strict=True) if a) / k if k else None,
    )


def paired(ds: DataSet, target: float, splits: list[tuple[list[int], list[int]]]) -> list[Pair]:
    """:func:`_paired_split` on every half (its own cross-fit per half)."""
    return [
        _paired_split(
            ds, cal, test, target, crossfit([ds.cases[i] for i in cal], [ds.golds[i] for i in cal])
        )
        for cal, test in splits
    ]


def _hel(diffs: Sequence[float]) -> str:
    """How many differences are above, at and below zero."""
    d = np.asarray(diffs)
    return f"{int((d > 0).sum())}/{int((d == 0).sum())}/{int((d < 0).sum())}"


def report_paired(name: str, target: float, pairs: Sequence[Pair]) -> None:
    """Learned alone minus votes_both alone, paired by half: mean ± sd and
    learned higher/equal/lower."""
    print(
        f"\n{name} at target {target}: learned alone vs votes_both alone on the same "
        f"{len(pairs)} halves (delta {DELTA}); learned minus counting, mean ± sd "
        "(halves learned higher/equal/lower)"
    )
    cov = [lc - vc for lc, vc, _, _ in pairs]
    print(
        f"coverage at the same target and delta: {np.mean(cov):+.4f} ± {np.std(cov):.4f} ({_hel(cov)})"
    )
    both = [lp - vp for _, _, lp, vp in pairs if lp is not None and vp is not None]
    none = len(pairs) - len(both)
    if both:
        print(
            "precision at equal coverage (learned ranking cut at counting's commits): "
            f"{np.mean(both):+.4f} ± {np.std(both):.4f} ({_hel(both)})"
            + (f"; counting accepts nothing in {none} halves" if none else "")
        )
    else:
        print(f"precision at equal coverage: counting accepts nothing in all {none} halves")


def evaluate(
    ds: DataSet,
    target: float,
    splits: list[tuple[list[int], list[int]]],
    pairs: list[Pair] | None = None,
) -> dict[str, list[Row]]:
    """Every method on every half; with ``pairs``, also :func:`_paired_split` of each half
    (appended to it), on the same cross-fit."""
    rows: dict[str, list[Row]] = {}
    for cal, test in splits:
        fitted = crossfit([ds.cases[i] for i in cal], [ds.golds[i] for i in cal])
        if pairs is not None:
            pairs.append(_paired_split(ds, cal, test, target, fitted))
        for name, kw in [
            ("chosen (bonferroni)", {"rule": "bonferroni"}),
            ("chosen (split)", {"rule": "split"}),
            *[(f, {"family": f}) for f in FAMILIES],
        ]:
            got = _outcome(ds, cal, test, target, fitted, **kw)
            if got is not None:
                rows.setdefault(name, []).append(got)
    return rows


def _ms(values: Sequence[float]) -> str:
    if not values:
        return "      -      "
    return f"{np.mean(values):.3f} ± {np.std(values):.3f}"


def report(name: str, target: float, rows: dict[str, list[Row]], n_splits: int) -> None:
    print(f"\n{name} at target {target} (delta {DELTA}, {n_splits} random halves)")
    print(
        f"{'method':<20} | population success | test success | coverage (mean ± sd) | precision (mean ± sd) | accepts nothing | families chosen"
    )
    for method, rs in rows.items():
        pop_ok = np.mean([p is None or p >= target for _, _, p, _ in rs])
        test_ok = np.mean([q is None or q >= target for _, q, _, _ in rs])
        covs = [c for c, _, _, _ in rs]
        precs = [q for _, q, _, _ in rs if q is not None]
        none = np.mean([c == 0 for c in covs])
        chosen: dict[str, int] = {}
        for *_, f in rs:
            chosen[f] = chosen.get(f, 0) + 1
        fams = ", ".join(f"{k} {v}" for k, v in sorted(chosen.items(), key=lambda kv: -kv[1]))
        print(
            f"{method:<20} | {pop_ok:18.3f} | {test_ok:13.3f} | {_ms(covs):>20} | {_ms(precs):>21} | {none:15.3f} | {fams}"
            + ("" if len(rs) == n_splits else f" ({len(rs)} splits: family not eligible elsewhere)")
        )
    singles = {f: np.mean([c for c, *_ in rows[f]]) for f in FAMILIES if f in rows}
    best = max(singles, key=lambda f: singles[f])
    for rule in ("chosen (bonferroni)", "chosen (split)"):
        cov = float(np.mean([c for c, *_ in rows[rule]]))
        gap = singles[best] - cov
        print(
            f"{rule}: mean coverage {cov:.3f}; best single family in hindsight {best} {singles[best]:.3f}; "
            f"gap {gap:.3f} ({'within' if gap <= 0.03 else 'NOT within'} 0.03)"
        )


def zeroeval_halves(ds: DataSet) -> None:
    n = len(ds.cases)
    cal, test = list(range(n // 2)), list(range(n // 2, n))
    fitted = crossfit([ds.cases[i] for i in cal], [ds.golds[i] for i in cal])
    print(f"\nZeroEval first {len(cal)} -> last {len(test)} at target 0.95 (delta {DELTA})")
    print(f"{'method':<20} | precision | coverage | family")
    for name, kw in [
        ("chosen (bonferroni)", {"rule": "bonferroni"}),
        ("chosen (split)", {"rule": "split"}),
        *[(f, {"family": f}) for f in FAMILIES],
    ]:
        got = _outcome(ds, cal, test, 0.95, fitted, **kw)
        if got is None:
            print(f"{name:<20} | not eligible (constant score)")
            continue
        cov, prec, _, fam = got
        print(
            f"{name:<20} | {prec if prec is not None else float('nan'):9.3f} | {cov:8.3f} | {fam}"
        )


def cd_both_ways(ds: DataSet, target: float, seed: int = 0) -> None:
    """decide with the acceptance file, CD escalating vs CD reaching acceptance."""
    from dissensus.pipeline import Policy, decide

    n = len(ds.cases)
    (cal, test) = _splits(n, 1, seed)[0]
    acc = calibrate(
        [ds.cases[i] for i in cal],
        [ds.golds[i] for i in cal],
        target=target,
        delta=DELTA,
        min_accepted=MIN_ACCEPTED,
        settings=None,
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "A.json"
        acc = acc.model_copy(
            update={"settings": acc.settings.model_copy(update={"similarity": "tfidf"})}
        )
        save_acceptance(acc, path)
        print(
            f"\n{ds.name}: decide on {len(test)} held-out cases, target {target}, family {acc.family}"
        )
        print(
            f"{'CD route':<28} | automatic | right | precision | coverage | judged by acceptance | CD cases"
        )
        for cd in ("escalate", "seek_context"):
            policy = Policy.model_validate(
                {
                    "reading": {"similarity": "tfidf"},
                    "routing": {"convergent_disagreement_without_values": cd},
                    "acceptance": {"model": str(path)},
                }
            )
            auto = right = judged = cds = 0
            for i in test:
                r = decide(ds.panels[i], policy)
                cds += r.state == "CD"
                judged += r.acceptance is not None
                if r.auto:
                    auto += 1
                    right += r.decision == ds.golds[i]
            print(
                f"{cd:<28} | {auto:9d} | {right:5d} | {right / max(auto, 1):9.3f} | {auto / len(test):8.3f} | {judged:20d} | {cds}"
            )


def _cache_file(cache: str | None, which: str) -> Path | None:
    """Where ``--cache`` keeps a data set's features (``None``: no cache)."""
    return Path(cache) / f"{which}.pickle" if cache else None


def data_needed(data: str, names: Sequence[str], cache: str | None) -> Path:
    """The data folder, checked for the folders of the data sets not in ``--cache``."""
    uncached = [n for n in names if not ((f := _cache_file(cache, n)) and f.is_file())]
    return require_data(data, (DATA_DIRS[n] for n in uncached))


def _load(data: Path, which: str, backend: object, cache: str | None) -> DataSet:
    import pickle

    path = _cache_file(cache, which)
    if path is not None and path.is_file():
        with path.open("rb") as handle:
            got: DataSet = pickle.load(handle)  # our own cache file
            return got
    ds = load(data, which, backend, reasoning=False)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as handle:
            pickle.dump(ds, handle)
    return ds


def shift_table(ds: DataSet, target: float) -> None:
    """Calibrate on two LLMBar subsets, deploy on the third."""
    from dissensus.acceptance import shift_check
    from dissensus.acceptance.shift import check_level

    first, tenth = check_level(0.1, 1), check_level(0.1, 10)
    print(
        "\nShift check (sample-split classifier two-sample test, Mann-Whitney p; levels of a "
        f"file's first and tenth run-level checks at shift_alpha 0.1: {first:.2g}, {tenth:.2g}), "
        f"target {target}"
    )
    print(
        f"{'deployed on':<24} | precision | coverage | below target | AUC   | p       | "
        "flagged (check 1) | check 10"
    )
    for held in sorted(set(ds.strata)):
        cal = [i for i, x in enumerate(ds.strata) if x != held]
        test = [i for i, x in enumerate(ds.strata) if x == held]
        acc = calibrate(
            [ds.cases[i] for i in cal], [ds.golds[i] for i in cal], target=target, delta=DELTA,
            min_accepted=MIN_ACCEPTED,
        )  # fmt: skip
        verdicts = [
            apply_acceptance(acc, ds.cases[i], key=panel_case_key(ds.panels[i])) for i in test
        ]
        accepted = [(v, i) for v, i in zip(verdicts, test, strict=True) if v.accepted]
        right = sum(v.decision == ds.golds[i] for v, i in accepted)
        prec = right / len(accepted) if accepted else float("nan")
        assert acc.shift_reference is not None
        check = shift_check(acc.shift_reference, [ds.cases[i] for i in test], alpha=first)
        below = bool(accepted) and prec < target
        print(
            f"{held:<24} | {prec:9.3f} | {len(accepted) / len(test):8.3f} | {below!s:<12} | "
            f"{check.auc:.3f} | {check.p_value:<7.2g} | {check.shifted!s:<17} | "
            f"{check.p_value <= tenth}"
        )


def false_alarms(ds: DataSet, target: float, splits: int) -> None:
    """How often the shift check flags exchangeable random halves (no shift: every flag
    is a false alarm), at 0.1 and at the level of a file's first run-level check."""
    from dissensus.acceptance import shift_check
    from dissensus.acceptance.shift import check_level

    first = check_level(0.1, 1)
    flags, firsts, ps = [], [], []
    for cal, test in _splits(len(ds.cases), splits, 1):
        acc = calibrate(
            [ds.cases[i] for i in cal], [ds.golds[i] for i in cal], target=target, delta=DELTA,
            min_accepted=MIN_ACCEPTED, family="learned",
        )  # fmt: skip
        assert acc.shift_reference is not None
        check = shift_check(acc.shift_reference, [ds.cases[i] for i in test], alpha=0.1)
        flags.append(check.shifted)
        firsts.append(check.p_value <= first)
        ps.append(check.p_value)
    print(
        f"{ds.name}: exchangeable random halves (target {target}): flagged at 0.1 "
        f"{sum(flags)}/{len(flags)} = {np.mean(flags):.3f}; at {first:.2g} (check 1) "
        f"{sum(firsts)}/{len(firsts)}; smallest p {min(ps):.2g}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--splits", type=at_least(1), default=50)
    parser.add_argument("--sets", default=",".join(SETS), help=f"of {', '.join(SETS)}")
    parser.add_argument("--no-cd", action="store_true", help="skip the CD routing comparison")
    parser.add_argument(
        "--only-shift",
        action="store_true",
        help="only the shift check (LLMBar's rotations; false alarms on every set)",
    )
    parser.add_argument(
        "--only-paired",
        action="store_true",
        help="only the paired comparison of learned acceptance and vote counting",
    )
    parser.add_argument(
        "--no-validity", action="store_true", help="skip the random-halves validity tables"
    )
    parser.add_argument(
        "--cache",
        type=work_dir,
        default=None,
        help="keep each data set's features here (pickle) between runs",
    )
    args = parser.parse_args(argv)
    names = parse_names(args.sets, SETS, "--sets")
    data = data_needed(args.data, names, args.cache)
    threadpool_limits(1)
    backend = get_backend("tfidf")
    t0 = time.time()
    for which in names:
        ds = _load(data, which, backend, args.cache)
        print(f"\n== {which}: {len(ds.cases)} cases (features in {time.time() - t0:.0f}s)")
        targets = {"llmbar": [0.9, 0.8], "zeroeval": [0.95], "varierrnli": [0.9, 0.8]}[which]
        splits = _splits(len(ds.cases), args.splits, 0)
        if which == "llmbar" and not args.only_paired:
            shift_table(ds, 0.9)
        if not args.only_paired:
            false_alarms(ds, ds.target, min(args.splits, 20))
        if args.only_shift:
            continue
        for target in [] if args.no_validity else targets:
            pairs: list[Pair] = []
            if args.only_paired:
                pairs = paired(ds, target, splits)
            else:
                report(which, target, evaluate(ds, target, splits, pairs), len(splits))
            report_paired(which, target, pairs)
            sys.stdout.flush()
        if args.only_paired:
            continue
        if which == "zeroeval":
            zeroeval_halves(ds)
        if not args.no_cd and which in ("llmbar", "zeroeval"):
            cd_both_ways(ds, min(targets))
        print(f"({time.time() - t0:.0f}s)")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
