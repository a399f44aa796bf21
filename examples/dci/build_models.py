"""Write the example task files and the bundled scripted models from ``tasks_data.py``.

Run from the repository root: ``python examples/dci/build_models.py``. The outputs are
checked in; this script documents exactly how the offline completions were made. Every
DCI act completion is kept between 150 and 400 tokens (about four characters a token)
and every baseline answer between 500 and 1,100, so that token comparisons between
methods are not flattered by short scripts.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from tasks_data import TASKS  # noqa: E402

AGENTS = ("framer", "explorer", "challenger", "integrator")


def tokens(text: str) -> int:
    return max(1, (len(text) + 3) // 4)


def marker(task: dict[str, Any]) -> str:
    return str(task["question"])[:48]


def option_ids(task: dict[str, Any]) -> list[str]:
    return ["o1", "o2", "o3", "o4", "o5"] if task["options"] else ["o1", "o2", "o3", "o4"]


# ----------------------------------------------------------------------------- scores
def score_rows(task: dict[str, Any], round_: int, live: list[str]) -> dict[str, dict[str, float]]:
    top, runner, third = task["top"], task["runner"], task["third"]
    path = task["path"]
    if path == "r1" or (path == "r2" and round_ == 2):
        table = {
            top: (0.85, 0.8, 0.55, 0.8),
            runner: (0.5, 0.55, 0.75, 0.5),
            third: (0.35, 0.4, 0.4, 0.35),
        }
    elif path == "fallback" and round_ == 2:
        table = {
            top: (0.8, 0.75, 0.45, 0.7),
            runner: (0.6, 0.65, 0.8, 0.6),
            third: (0.4, 0.5, 0.5, 0.45),
        }
    else:
        table = {
            top: (0.7, 0.7, 0.5, 0.65),
            runner: (0.6, 0.6, 0.7, 0.6),
            third: (0.45, 0.5, 0.45, 0.4),
        }
    rows: dict[str, dict[str, float]] = {a: {} for a in AGENTS}
    for o in live:
        vals = table.get(o, (0.3, 0.35, 0.3, 0.3))
        for a, v in zip(AGENTS, vals, strict=True):
            rows[a][o] = v
    return rows


def finalists(rows: dict[str, dict[str, float]], live: list[str]) -> list[str]:
    means = {o: sum(r[o] for r in rows.values()) / len(rows) for o in live}
    return sorted(live, key=lambda o: (-round(means[o], 9), live.index(o)))[:3]


# ------------------------------------------------------------------------------ acts
def act(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v not in (None, [], False)}


def frame(t: dict[str, Any]) -> dict[str, Any]:
    text = (
        f"Framing. The question is not only which option wins but what a good decision here must protect. "
        f"The stakes are {t['stakes']}. The binding constraints are {t['constraints']}. "
        f"I propose we judge every option by whether it lets us {t['success']}, and that we weigh the criteria "
        f"in this order: {', '.join(t['criteria'])}. Two traps to avoid: anchoring on the most visible number in "
        f"the context, and treating facts that only one of us has seen as less important than shared ones. "
        f"Each of us should surface what we know that the others may not, and say how confident we are. "
        f"A decision that wins on the first criterion but cannot be reversed cheaply should need stronger evidence."
    )
    return act(act="frame", target="a0", text=text, confidence=0.75)


def propose(t: dict[str, Any], agent: str) -> dict[str, Any]:
    s = t["short"]
    if not t["options"]:
        oid = {"framer": "o1", "explorer": "o2", "challenger": "o3", "integrator": "o4"}[agent]
        text = (
            f"I propose {s[oid]}. {t['new'][oid]} The argument for it: it addresses {t['stakes']} directly and fits "
            f"within {t['constraints']}. Its weakest point is that it depends on how well we manage "
            f"{t['risks'][0]}, so it should be compared with the others on {t['criterion']} before anything else. "
            f"I would rather we see it challenged now than discover its limits after we commit. If it survives, "
            f"its first step is small and reversible, which matters when the team's capacity is the scarce resource."
        )
        return act(act="propose", target="a0", text=text, option=t["new"][oid], confidence=0.6)
    if agent == "explorer":
        text = (
            f"The listed options treat this as a one-shot choice. I propose a variant that keeps the strongest part "
            f"of {s['o3']} while buying time to retire its main risk: {t['new']['o4']} This widens the option space "
            f"without adding a new vendor or system. It matters because the facts we hold separately point in "
            f"different directions, and a staged path lets the later facts decide the later steps."
        )
        return act(act="propose", target="a0", text=text, option=t["new"]["o4"], confidence=0.65)
    if agent == "integrator":
        text = (
            f"Building on {s['o3']}, I spawn a sharper version that turns the key uncertainty into a "
            f"commitment someone is accountable for: {t['new']['o5']} The point is to make the condition under which "
            f"we would change course explicit now, not after the fact. It also gives the sceptics among us a "
            f"concrete trigger instead of an open-ended promise."
        )
        return act(act="spawn", target="o3", text=text, option=t["new"]["o5"], confidence=0.7)
    target = "o1" if agent == "framer" else "o2"
    text = (
        f"Before we add options of our own, {s[target]} deserves its strongest form. I extend it with what would make it "
        f"acceptable on {t['criterion']}: an explicit check of {t['assumption']}, and a named owner for "
        f"{t['risks'][1]}. Without that amendment it is weaker than it looks; with it, it is a real contender "
        f"that the rest of the deliberation should have to beat rather than ignore. "
        f"I keep my own view open until the challenges are in, and I will score it on the same terms as the rest."
    )
    return act(act="extend", target=target, text=text, confidence=0.55)


def challenge(t: dict[str, Any], agent: str, round_: int) -> dict[str, Any]:
    s, top, runner, third = t["short"], t["top"], t["runner"], t["third"]
    if agent == "framer":
        if round_ == 2:
            text = (
                f"Clarifying what separates the finalists now. {s[top]} and {s[runner]} differ mainly on "
                f"{t['criterion']}; on the other criteria ({', '.join(t['criteria'][1:])}) they are close. So the open "
                f"question is not which is better overall but whether {t['assumption']}. If we agree on that, the "
                f"ranking follows. I suggest we state our answer to that single question and our confidence in it. "
                f"Everything else we have discussed is either agreed or small enough to handle in the next actions."
            )
            return act(act="clarify", target=top, text=text, confidence=0.7)
        text = (
            f"A question about {s[runner]}: {t['ask']} I ask because the case for it rests on facts that not all of us "
            f"have seen, and if the answer is unfavourable its ranking should drop. I am not opposing it; I want the "
            f"answer on the table before we score, so that nobody scores on a different picture of the facts. "
            f"Concretely, I would like whoever holds the relevant facts to say what they know, how they know it, and "
            f"whether it changes how {s[runner]} does on {t['criterion']}; a short answer with a source is enough."
        )
        return act(act="ask", target=runner, text=text, confidence=0.6)
    if agent == "explorer":
        evidence = t["late"] if (round_ == 2 and t["late"]) else t["evidence"]
        text = (
            f"Grounding {s[top]} with evidence from the context that bears on the choice: {evidence} "
            f"This supports it on {t['criterion']} and weakens the alternatives that ignore it. I attach it to the "
            f"option so that it travels with it into scoring and into the final rationale, rather than getting lost "
            f"in discussion. My confidence that this evidence is accurate is high; how much it should weigh is for "
            f"the scoring stage."
        )
        return act(act="ground", target=top, text=text, evidence=[evidence], confidence=0.8)
    if agent == "challenger":
        text = (
            f"I challenge {s[top]}. Its case rests on the assumption that {t['assumption']}. If that fails, the "
            f"consequence is {t['consequence']}, and nothing in the current plan would detect it early. The context "
            f"gives a reason to doubt it: {t['doubt']}. Before we converge I want evidence that the assumption holds "
            f"here, or a mitigation with an owner and a trigger, for example {t['mitigation']}. Until then this "
            f"objection blocks convergence: adopting it as written would move risk onto the people least able to "
            f"absorb it, and we would learn that only when it is expensive to reverse."
        )
        return act(act="challenge", target=top, text=text, blocking=True, confidence=0.7)
    if round_ == 2:
        text = (
            f"A remaining question on {s[runner]}: if we chose it, what would we do when {t['risks'][2]}? The "
            f"proponents have not said, and the answer decides whether its support survives scoring. I keep this "
            f"open rather than treating silence as agreement. A credible answer would name who acts, what they do "
            f"first, and how quickly we would know the response worked. Without one, I will score {s[runner]} on the "
            f"assumption that the risk lands unmanaged, which is how it would land in practice. This is not a "
            f"veto; it is the question I most want answered before we close."
        )
        return act(act="ask", target=runner, text=text, confidence=0.6)
    text = (
        f"I challenge {s[third]}: {t['third_flaw']}. That is a cost on {t['criterion']} that none of its advantages "
        f"offsets, and the context gives us no way to mitigate it within our constraints. I do not think it should "
        f"reach the finalists unless someone brings a fact that changes this. I mark the objection as non-blocking "
        f"because it concerns an option that is not leading. "
        f"If the group disagrees, the quickest way to change my mind is a fact from the context that I have "
        f"missed, not a restatement of the option's advantages, which I accept."
    )
    return act(act="challenge", target=third, text=text, confidence=0.75)


def revise(t: dict[str, Any], agent: str, round_: int) -> dict[str, Any]:
    s, top = t["short"], t["top"]
    if agent == "framer":
        text = (
            f"Answering the blocking challenge by amending {s[top]} rather than defending it: we add "
            f"{t['mitigation']}, with a named owner and a date. This admits the challenger's point that "
            f"{t['assumption']} was unverified. The amended option keeps its advantage on {t['criterion']} while "
            f"bounding the consequence the challenge describes. I would ask the challenger whether this amendment "
            f"settles the objection or what else is needed."
        )
        return act(
            act="extend",
            target=top,
            text=text,
            option=f"Adds: {t['mitigation']} (owner and date named).",
            confidence=0.7,
        )
    if agent == "explorer":
        target = "t4" if round_ == 2 else "t1"
        text = (
            f"On the open question {target}: having looked at the facts again, the answer is that the concern is "
            f"real but bounded. {t['evidence']} I update my view accordingly: the question does not overturn the "
            f"ranking, but it should appear in the reopen conditions. I consider this question settled for the "
            f"purpose of scoring and mark it resolved; the underlying risk is recorded, not forgotten. "
            f"Whoever raised it should say if they see it differently, and I will reopen it if they do."
        )
        return act(
            act="bridge" if round_ == 2 else "update",
            target=target,
            text=text,
            resolves=True,
            confidence=0.7,
        )
    if agent == "challenger":
        settle = t["path"] == "r1" or (t["path"] == "r2" and round_ == 2)
        if settle:
            text = (
                f"I update my position on t2. The amendment ({t['mitigation']}) and the evidence now attached to "
                f"{s[top]} address the failure mode I raised. The assumption is still not proven, but the "
                f"consequence is now bounded and detectable early, which is what I asked for. I withdraw the "
                f"blocking objection and keep a residual concern: {t['risks'][0]}. That belongs in the reopen "
                f"conditions, not in a veto. I will watch the first checkpoint and raise it again if the trigger fires."
            )
            return act(act="update", target="t2", text=text, resolves=True, confidence=0.65)
        text = (
            f"I maintain t2. The amendment is a promise, not evidence: we still do not know whether "
            f"{t['assumption']}, and {t['doubt']}. I recognise the proposal has improved, and I would not object "
            f"to it as a trial, but I cannot call the objection settled. If the group decides without convergence, "
            f"this should stand in the packet as a residual objection with the reopen condition that tests it. "
            f"What would settle it for me is simple: a measurement, taken before full commitment, showing that "
            f"{t['assumption']}. If that measurement comes back clean I will say so and withdraw the objection."
        )
        return act(act="update", target="t2", text=text, confidence=0.7)
    if round_ == 2:
        text = (
            f"Recalling the framing (a1): we agreed a decision that wins on {t['criterion']} but cannot be reversed "
            f"cheaply needs stronger evidence. Measured against that, the finalists differ in reversibility more "
            f"than in expected benefit, and that should weigh in our scores more than it did in round one. "
            f"I also recall that we agreed to treat facts held by one member as seriously as shared ones; the "
            f"grounding in this round came from exactly such facts. Concretely, I will lower my score for any "
            f"finalist whose downside we cannot undo within a quarter, and I suggest the others state whether they "
            f"apply the same discount, so that our scores remain comparable."
        )
        return act(act="recall", target="a1", text=text, confidence=0.65)
    text = (
        f"Bridging t3: the objection to {s[t['third']]} is about {t['criterion']}, and nobody has disputed the facts "
        f"behind it. Its proponents' underlying goal (keeping things simple and cheap) is better served by the "
        f"amended leading option, which takes the low-cost first step without the flaw. I consider the tension "
        f"settled in that sense and mark it resolved; the option stays available for scoring. "
        f"If its supporters see a goal the leading option does not serve, they should say so in the scores; "
        f"settling this tension is not a verdict against them."
    )
    return act(act="bridge", target="t3", text=text, resolves=True, confidence=0.7)


def recommend(t: dict[str, Any], agent: str, row: dict[str, float]) -> dict[str, Any]:
    best = max(row, key=lambda o: row[o])
    s = t["short"]
    text = (
        f"I recommend {best} ({s.get(best, best)}). Scored against the criteria we agreed ({', '.join(t['criteria'])}), "
        f"it gives the best balance: it is strongest on the criterion that matters most here and its main risk is "
        f"now bounded. The scores reflect how each option fares on those criteria after the challenges and "
        f"amendments, not the options as first proposed. Where I scored an option low it is because an objection "
        f"against it is still unanswered. My confidence reflects what we still do not know: {t['risks'][0]}."
    )
    if agent == "challenger" and best != t["top"]:
        text += (
            f" I depart from the emerging majority because {t['assumption']} remains unverified."
        )
    return act(
        act="recommend",
        target=best,
        text=text,
        scores=row,
        confidence=0.7 if agent != "challenger" else 0.6,
    )


def synthesize(t: dict[str, Any]) -> dict[str, Any]:
    s, top = t["short"], t["top"]
    text = (
        f"Synthesis. We select {s[top]}. It best satisfies the frame we set: it lets us {t['success']}. The decisive "
        f"facts were spread across us and are attached as evidence. The challenge that it depended on an unverified assumption "
        f"({t['assumption']}) was answered by an amendment: {t['mitigation']}. The alternatives lost on named "
        f"grounds: {s[t['runner']]} because {t['runner_flaw']}; {s[t['third']]} because {t['third_flaw']}. "
        f"Dissent is recorded, not dissolved; the reopen conditions say what would make us revisit it."
    )
    return act(
        act="synthesize",
        target=top,
        text=text,
        evidence=[t["evidence"]],
        reopen_conditions=list(t["reopen"]),
        next_actions=list(t["actions"]),
        confidence=0.75,
    )


def dci_rules(t: dict[str, Any]) -> list[dict[str, Any]]:
    m = marker(t)
    rules: list[dict[str, Any]] = [
        {"match": {"agent": "framer", "stage": "dci.frame", "contains": m}, "json": frame(t)}
    ]
    for a in AGENTS:
        rules.append(
            {"match": {"agent": a, "stage": "dci.propose", "contains": m}, "json": propose(t, a)}
        )
    live = option_ids(t)
    rounds = 1 if t["path"] == "r1" else 2
    rows_by_round = []
    for r in range(1, rounds + 1):
        rows = score_rows(t, r, live)
        rows_by_round.append(rows)
        live = finalists(rows, live)
    for a in AGENTS:
        for stage, fn in (("dci.challenge", challenge), ("dci.revise", revise)):
            seq = [fn(t, a, r) for r in range(1, rounds + 1)]
            rules.append({"match": {"agent": a, "stage": stage, "contains": m}, "responses": seq})
        # Open discussion rounds of the no-DCI-CF ablation: the same contributions, unstaged.
        rules.append(
            {
                "match": {"agent": a, "stage": "dci.discuss", "contains": m},
                "responses": [challenge(t, a, 1), revise(t, a, 1)],
            }
        )
        seq = [recommend(t, a, rows_by_round[r][a]) for r in range(rounds)]
        rules.append({"match": {"agent": a, "stage": "dci.score", "contains": m}, "responses": seq})
    rules.append({"match": {"stage": "dci.synthesize", "contains": m}, "json": synthesize(t)})
    return rules


# -------------------------------------------------------------------- baseline answers
def describe(t: dict[str, Any], choice: str) -> str:
    for oid, text in t["options"]:
        if oid == choice:
            return str(text)
    mapping = {
        "strangler": "o2",
        "microservice": "o1",
        "replica": "o3",
        "wednesday": "o2",
        "tuesday": "o1",
        "friday": "o3",
    }
    return str(t["new"][mapping[choice]])


def baseline_answer(
    t: dict[str, Any], choice: str, variant: int, *, peers: bool = False
) -> dict[str, Any]:
    top_choice = choice == t["baseline_choice"]
    d = describe(t, choice)
    parts = [
        f"Recommendation: {d}",
        f"Reasoning. This decision turns on {t['stakes']}. We are working within {t['constraints']}, so the right "
        f"choice is the one that lets us {t['success']} with the least irreversible exposure. Weighing the criteria "
        f"({', '.join(t['criteria'])}), this option comes out ahead on {t['criterion'] if top_choice else t['criteria'][-1]}, "
        f"which I treat as the deciding criterion here, and it is acceptable on the others.",
        f"Evidence I relied on: {t['evidence']}",
        f"Key assumption: {t['assumption']}. If it fails, the consequence would be {t['consequence']}. There is some "
        f"reason for doubt, since {t['doubt']}, so the plan should include {t['mitigation']}.",
        "Risks and mitigations:\n"
        + "\n".join(
            f"- {r}: monitor it explicitly and assign an owner before rollout." for r in t["risks"]
        ),
        "Next steps:\n" + "\n".join(f"{i + 1}. {a}" for i, a in enumerate(t["actions"])),
        "Assessment by criterion:\n"
        + "\n".join(
            f"- {c}: {'strong' if i == 0 else 'adequate'}; the option holds up here provided the key assumption "
            f"below is checked before we commit, and the monitoring in the next steps would catch a failure early."
            for i, c in enumerate(t["criteria"])
        ),
        f"Trade-offs. Choosing this means accepting some exposure to {t['risks'][-1]} in exchange for progress on "
        f"{t['criteria'][0]}. I think that trade is right because the exposure is bounded and visible, while the "
        f"cost of the alternatives tends to arrive later and less visibly. If the organisation weighs "
        f"{t['criteria'][-1]} above everything else, the balance could tip, and that should be said explicitly "
        f"when the decision is communicated.",
        f"What would change my mind: {t['reopen'][0]}.",
    ]
    if variant % 2 == 1:
        parts.insert(
            2,
            f"Alternatives. The other options each give up something important: some trade "
            f"{t['criteria'][0]} for speed, others add commitments that are hard to unwind. None of them "
            f"addresses {t['risks'][0]} better than this one.",
        )
    if peers:
        parts.insert(
            1,
            "Having read the other answers, I keep the core of my position and adopt their strongest "
            "points on risk and sequencing where they improve it.",
        )
    text = "\n\n".join(parts)
    return {"choice": choice, "answer": text, "confidence": 0.72 if top_choice else 0.6}


def baseline_rules(t: dict[str, Any], method: str) -> list[dict[str, Any]]:
    m = marker(t)
    if method == "single":
        return [
            {
                "match": {"agent": "single", "contains": m},
                "json": baseline_answer(t, t["baseline_choice"], 1),
            }
        ]
    if method == "voting":
        return [
            {"match": {"agent": f"voter{i + 1}", "contains": m}, "json": baseline_answer(t, c, i)}
            for i, c in enumerate(t["votes"])
        ]
    if method == "self_consistency":
        seq = [baseline_answer(t, c, i) for i, c in enumerate(t["votes"])]
        return [{"match": {"agent": "sampler", "contains": m}, "responses": seq}]
    rules = []
    for i in range(3):
        c = t["votes"][i]
        rules.append(
            {
                "match": {"agent": f"debater{i + 1}", "stage": "baseline.debate.r1", "contains": m},
                "json": baseline_answer(t, c, i),
            }
        )
        rules.append(
            {
                "match": {"agent": f"debater{i + 1}", "stage": "baseline.debate.r2", "contains": m},
                "json": baseline_answer(t, t["baseline_choice"] if i < 2 else c, i, peers=True),
            }
        )
    return rules


JUDGE = {
    "overall": 7,
    "risk_identification": 7,
    "reasoning_depth": 7,
    "actionability": 7,
    "rationale": (
        "Offline scripted judge: it returns the same mid-scale scores for every output so that the judging "
        "pipeline can be exercised without a model. These numbers measure nothing; use a real judge model."
    ),
}


def check_lengths(rules: list[dict[str, Any]], low: int, high: int, what: str) -> None:
    for rule in rules:
        items = rule.get("responses") or [rule.get("json")]
        for item in items:
            n = tokens(json.dumps(item, ensure_ascii=False))
            if not low <= n <= high:
                raise SystemExit(
                    f"{what} completion of {n} tokens outside [{low}, {high}]: {rule['match']}"
                )


def dump(path: Path, data: Any, header: str) -> None:
    text = yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=120)
    path.write_text(
        f"# {header}\n# Generated by examples/dci/build_models.py from tasks_data.py; edit those, not this file.\n{text}",
        encoding="utf-8",
    )


def main() -> None:
    models = HERE.parents[1] / "src" / "dissensus" / "dci" / "models"  # shipped as package data
    models.mkdir(exist_ok=True)
    for t in TASKS:
        task: dict[str, Any] = {
            "id": t["id"],
            "type": t["type"],
            "question": t["question"],
            "context": t["context"],
        }
        if t["options"]:
            task["options"] = [{"id": i, "text": x} for i, x in t["options"]]
        task["criteria"] = list(t["criteria"])
        dump(HERE / f"{t['id']}.yaml", task, f"DCI example task: {t['type'].replace('_', ' ')}")
    dci: list[dict[str, Any]] = []
    for t in TASKS:
        rules = dci_rules(t)
        check_lengths(rules, 150, 400, "DCI act")
        dci.extend(rules)
    dump(
        models / "dci.yaml", {"rules": dci}, "Scripted DCI participants for the seven example tasks"
    )
    for method in ("single", "voting", "self_consistency", "debate"):
        rules = [r for t in TASKS for r in baseline_rules(t, method)]
        check_lengths(rules, 500, 1100, method)
        dump(
            models / f"{method}.yaml", {"rules": rules}, f"Scripted model for the {method} baseline"
        )
    dump(
        models / "judge.yaml",
        {"rules": [], "default": JUDGE},
        "Scripted judge (plumbing only, scores are constant)",
    )


if __name__ == "__main__":
    main()
