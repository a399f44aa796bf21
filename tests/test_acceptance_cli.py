"""``dissensus calibrate-acceptance``: labelled panels and a journal of resolved reviews."""

from __future__ import annotations

import json
from pathlib import Path

from dissensus.cli import main

REPO = Path(__file__).resolve().parent.parent


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text("reading:\n  similarity: tfidf\n")
    return path


def test_calibrate_on_labelled_panels(tmp_path: Path, capsys: object) -> None:
    from dissensus.acceptance import load_acceptance

    out = tmp_path / "ACCEPT.json"
    code = main(
        [
            "calibrate-acceptance",
            str(REPO / "examples" / "llmbar-swap.jsonl"),
            "--policy",
            str(_policy(tmp_path)),
            "--out",
            str(out),
            "--target-precision",
            "0.8",
            "--json",
        ]
    )
    assert code == 0
    acc = load_acceptance(out)
    # The 150 panels fit the model; the 124 the policy's routing and guard send to
    # acceptance (not the escalated convergent disagreements) calibrate it.
    assert (acc.fitted_n, acc.calibration_n) == (150, 124)
    assert acc.settings.similarity == "tfidf"
    assert not any("gold" in f for f in acc.features)
    assert all("however" not in f for f in acc.features)
    summary = json.loads(capsys.readouterr().out)  # type: ignore[attr-defined]
    assert summary["sha256"] == acc.sha256


def test_strata_and_missing_gold(tmp_path: Path) -> None:
    from dissensus.acceptance import load_acceptance

    lines = (REPO / "examples" / "llmbar-swap.jsonl").read_text().splitlines()
    bad = json.loads(lines[0])
    del bad["meta"]["gold"]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join([*lines, json.dumps(bad)]) + "\n")
    out = tmp_path / "A.json"
    code = main(
        [
            "calibrate-acceptance",
            str(src),
            "--policy",
            str(_policy(tmp_path)),
            "--out",
            str(out),
            "--strata",
            "subset",
            # At 0.9 a stratum must hold 38 judged cases; GPTInst has 35 (refused, exit 2).
            "--target-precision",
            "0.8",
        ]
    )
    assert code == 3
    acc = load_acceptance(out)
    assert acc.strata_field == "subset"
    assert {s.stratum for s in acc.strata} == {
        "Natural",
        "Adversarial/Neighbor",
        "Adversarial/GPTInst",
    }


def test_usage_errors(tmp_path: Path) -> None:
    assert main(["calibrate-acceptance", "--out", str(tmp_path / "x.json")]) == 2
    assert main(["calibrate-acceptance", str(tmp_path / "missing.jsonl")]) == 2


def test_a_strata_field_no_case_has_is_refused(tmp_path: Path, capsys: object) -> None:
    """It used to calibrate one stratum, "(none)", with exit 0: a typo in --strata went
    unseen."""
    out = tmp_path / "A.json"
    args = ["calibrate-acceptance", str(REPO / "examples" / "llmbar-swap.jsonl")]
    args += ["--policy", str(_policy(tmp_path)), "--out", str(out), "--strata", "subest"]
    assert main(args) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "--strata subest: none of the 150 labelled cases has it" in err, err
    assert not out.exists()


def test_an_unknown_run_is_refused(tmp_path: Path, capsys: object) -> None:
    """``--run`` naming no run of the journal was ignored in silence."""
    journal = tmp_path / "j.sqlite"
    src = str(REPO / "examples" / "llmbar-swap.jsonl")
    policy = str(_policy(tmp_path))
    assert (
        main(["decide", src, "--policy", policy, "--journal", str(journal), "--run-id", "r1"]) == 0
    )
    capsys.readouterr()  # type: ignore[attr-defined]
    args = ["calibrate-acceptance", "--journal", str(journal), "--run", "r1", "--run", "nope"]
    assert main([*args, "--policy", policy, "--out", str(tmp_path / "A.json")]) == 2
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "--run: no run 'nope' in the journal" in err, err


def test_calibrate_from_resolved_reviews(tmp_path: Path) -> None:
    """decide -> review resolve -> calibrate-acceptance --journal: resolutions are the labelled cases."""
    from dissensus.acceptance import load_acceptance
    from dissensus.pipeline.review import list_items, resolve
    from dissensus.store.journal import Journal

    policy = tmp_path / "p.yaml"
    policy.write_text("reading:\n  similarity: tfidf\nseek_context:\n  followup: none\n")
    src = REPO / "examples" / "llmbar-swap.jsonl"
    golds = [json.loads(line)["meta"]["gold"] for line in src.read_text().splitlines()]
    journal = tmp_path / "j.sqlite"
    assert (
        main(
            [
                "decide",
                str(src),
                "--policy",
                str(policy),
                "--journal",
                str(journal),
                "--run-id",
                "r1",
            ]
        )
        == 0
    )
    with Journal(str(journal)) as jr:
        items = [s.item for s in list_items(jr)]
        assert len(items) == 150
        for item in items[:-1]:
            resolve(jr, item.review_id, decision=golds[item.line - 1], note="gold")
        resolve(jr, items[-1].review_id, decision="neither", note="both outputs are wrong")
    out = tmp_path / "A.json"
    code = main(
        [
            "calibrate-acceptance",
            "--journal",
            str(journal),
            "--run",
            "r1",
            "--policy",
            str(policy),
            "--out",
            str(out),
            "--target-precision",
            "0.8",
        ]
    )
    assert code == 0
    acc = load_acceptance(out)
    assert (acc.fitted_n, acc.calibration_n) == (149, 123)
    assert "1 outside the options excluded" in acc.built_from[0]


def shout(panel: object) -> dict[str, float]:
    """A user feature (see docs/pipeline.md)."""
    return {"exclamations": float(sum(o.reasoning.count("!") for o in panel.outputs))}  # type: ignore[attr-defined]


def test_user_feature(tmp_path: Path) -> None:
    from dissensus.acceptance import load_acceptance

    out = tmp_path / "A.json"
    code = main(
        [
            "calibrate-acceptance",
            str(REPO / "examples" / "llmbar-swap.jsonl"),
            "--policy",
            str(_policy(tmp_path)),
            "--out",
            str(out),
            "--feature",
            "test_acceptance_cli:shout",
        ]
    )
    assert code == 0
    acc = load_acceptance(out)
    assert "user.exclamations" in acc.features
    assert acc.settings.user == ["test_acceptance_cli:shout"]
    bad = main(
        [
            "calibrate-acceptance",
            str(REPO / "examples" / "llmbar-swap.jsonl"),
            "--out",
            str(out),
            "--feature",
            "nope",
        ]
    )
    assert bad == 2


def _synthetic(path: Path, seed: int, n: int) -> Path:
    """``n`` labelled five-agent panels of one distribution: easy ones agree, hard ones
    split (so the default routing escalates some as convergent disagreements)."""
    import random

    rng = random.Random(seed)
    with path.open("w") as out:
        for i in range(n):
            gold = rng.choice("AB")
            skill = rng.random()
            votes = [
                gold if rng.random() < 0.5 + 0.45 * skill else "AB"[gold == "A"] for _ in range(5)
            ]
            outputs = [
                {
                    "agent": f"a{k}",
                    "decision": d,
                    "reasoning": f"I think {d} because reason {i} {k}",
                    "family": f"f{k}",
                }
                for k, d in enumerate(votes)
            ]
            line = {"id": f"{seed}-{i}", "meta": {"gold": gold}, "outputs": outputs}
            out.write(json.dumps(line) + "\n")
    return path


def test_new_cases_of_the_calibration_distribution_are_not_flagged(tmp_path: Path) -> None:
    """The run's shift check compares the cases acceptance judged with the calibration
    cases acceptance would have judged: fresh panels of the same distribution pass, where
    a reference of every calibration case (escalated convergent disagreements included)
    flagged every run (AUC 0.72, p <= 0.01)."""
    from dissensus.store.journal import Journal

    policy = _policy(tmp_path)
    accept = tmp_path / "A.json"
    calibrate = ["calibrate-acceptance", str(_synthetic(tmp_path / "cal.jsonl", 1, 300))]
    assert main([*calibrate, "--policy", str(policy), "--out", str(accept), "--json"]) == 0
    for seed in (11, 12, 13):
        journal = tmp_path / f"j{seed}.sqlite"
        panels = _synthetic(tmp_path / f"new{seed}.jsonl", seed, 200)
        argv = ["decide", str(panels), "--policy", str(policy), "--acceptance", str(accept)]
        assert main([*argv, "--journal", str(journal), "--json"]) == 0
        with Journal(str(journal)) as jr:
            (shift,) = [e.payload for e in jr.events_of_type("acceptance.shift")]
        assert shift["deployed_n"] >= 100 and not shift["shifted"], shift


def test_stratum_names_are_printed_escaped_in_the_reason_and_the_guarantee(
    tmp_path: Path, capsys: object
) -> None:
    """The table escaped a stratum name; the threshold reason and the guarantee line
    printed its newline, ESC and U+202E raw (the terminal ran them)."""
    odd = "Nat\x1b[31m\u202eural\nX"
    lines = []
    for line in (REPO / "examples" / "llmbar-swap.jsonl").read_text().splitlines():
        panel = json.loads(line)
        if panel["meta"].get("subset") == "Natural":
            panel["meta"]["subset"] = odd
        lines.append(json.dumps(panel))
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n")
    argv = ["calibrate-acceptance", str(src), "--policy", str(_policy(tmp_path)),
            "--out", str(tmp_path / "A.json"), "--strata", "subset", "--target-precision", "0.8"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "\x1b" not in out and "\u202e" not in out
    reason = [x for x in out.splitlines() if x.startswith("no threshold reaches")]
    assert reason and "Nat\\x1b[31m\\u202eural\\nX" in reason[0]


def test_one_stratum_too_small_warns_as_no_strata_do(tmp_path: Path, capsys: object) -> None:
    """``--strata`` naming a field with one value is no stratification: the check of the
    strata skipped it and the warning was given only without ``--strata``."""
    src = tmp_path / "three.jsonl"
    lines = (REPO / "examples" / "llmbar-cot.jsonl").read_text().splitlines()[:3]
    src.write_text("\n".join(lines) + "\n")
    argv = ["calibrate-acceptance", str(src), "--policy", str(_policy(tmp_path)),
            "--out", str(tmp_path / "A.json"), "--strata", "subset"]  # fmt: skip
    assert main(argv) == 0
    err = capsys.readouterr().err  # type: ignore[attr-defined]
    assert "calibration case(s) reach acceptance, fewer than the" in err
