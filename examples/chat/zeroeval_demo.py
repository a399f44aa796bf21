"""Offline demonstration: nine GSM8K solvers as one OpenAI-compatible model.

The nine ZeroEval solvers (``zeroeval-gsm`` of the shared data folder: recorded outputs,
Apache-2.0, not shipped with dissensus) become ``replay:`` members of a panel; a learned
acceptance file is calibrated on the converter's panels of the first ``--calibrate``
problems; ``dissensus serve`` runs on a loopback port with that panel; and the official
``openai`` SDK asks the next ``--ask`` problems (held out from the calibration). Each
answer is a committed completion (a solver's own text) or a recognisable escalation; every
request's run is verified. Nothing is downloaded, no model is called.

Usage::

    python examples/chat/zeroeval_demo.py [--data DIR] [--calibrate 400] [--ask 40] [--target 0.97]

Needs the ``serve`` and ``accept`` extras and the ``openai`` package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))

import openai  # noqa: E402
import uvicorn  # noqa: E402
import yaml  # noqa: E402

from dissensus.acceptance import FeatureSettings, calibrate, save_acceptance  # noqa: E402
from dissensus.acceptance.prepare import prepare_cases  # noqa: E402
from dissensus.convert.zeroeval import iter_zeroeval_panels, model_family  # noqa: E402
from dissensus.llm.base import Message  # noqa: E402
from dissensus.panels import recording_line  # noqa: E402
from dissensus.pipeline import load_policy  # noqa: E402
from dissensus.serve import ServeSettings, create_app  # noqa: E402
from dissensus.states import get_backend  # noqa: E402
from dissensus.store import Journal  # noqa: E402


def default_data() -> Path:
    env = os.environ.get("DISSENSUS_DATA")
    return (Path(env) if env else ROOT.parent / "shared" / "data") / "zeroeval-gsm"


def raw_text(item: dict[str, Any]) -> str:
    out = item.get("output")
    if isinstance(out, list):
        return "\n".join(str(x) for x in out if x is not None)
    return "" if out is None else str(out)


def build(root: Path, data: Path, n_cal: int, n_ask: int, target: float) -> list[Any]:
    """Acceptance file, policy and replay members in ``root``; the asked panels."""
    panels = list(iter_zeroeval_panels(data, limit=n_cal + n_ask))
    calibration, asked = panels[:n_cal], panels[n_cal:]
    fs = FeatureSettings(similarity="tfidf")
    cases = prepare_cases(calibration, settings=fs, backend=get_backend("tfidf"))
    golds = [str(p.meta["gold"]) for p in calibration]
    accept = calibrate(cases, golds, target=target, delta=0.1, min_accepted=30, settings=fs)
    save_acceptance(accept, root / "accept.json")
    models = sorted(p.stem for p in data.glob("*.json"))
    policy = {
        "reading": {"similarity": "tfidf"},
        "routing": {"convergent_disagreement_without_values": "seek_context"},
        "acceptance": {"model": "accept.json"},
        "panel": {
            "answer": "number",
            "members": [
                {"name": m, "model": f"replay:members/{m}.jsonl", "family": model_family(m)}
                for m in models
            ],
        },
    }
    (root / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    settings = load_policy(root / "policy.yaml")[0].panel
    wanted = {p.id for p in asked}
    (root / "members").mkdir()
    for model in models:
        rows = json.loads((data / f"{model}.json").read_text(encoding="utf-8"))
        lines = [
            recording_line(
                model, [Message(role="user", content=str(r["question"]))], raw_text(r), settings
            )
            for r in rows
            if r.get("session_id") in wanted
        ]
        (root / "members" / f"{model}.jsonl").write_text("".join(lines), encoding="utf-8")
    return asked


def serve(root: Path) -> tuple[uvicorn.Server, threading.Thread]:
    settings = ServeSettings(journal=str(root / "journal.sqlite"), policy=str(root / "policy.yaml"))
    config = uvicorn.Config(
        lambda: create_app(settings), factory=True, host="127.0.0.1", port=0, log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return server, thread


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--calibrate", type=int, default=400)
    parser.add_argument("--ask", type=int, default=40)
    parser.add_argument(
        "--target", type=float, default=0.97, help="Precision the acceptance file guarantees."
    )
    args = parser.parse_args()
    if not args.data.is_dir():
        raise SystemExit(f"no ZeroEval data at {args.data} (give --data DIR)")
    with tempfile.TemporaryDirectory() as name:
        root = Path(name)
        asked = build(root, args.data, args.calibrate, args.ask, args.target)
        server, thread = serve(root)
        port = server.servers[0].sockets[0].getsockname()[1]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
        committed = right = 0
        runs = []
        for panel in asked:
            done = client.chat.completions.create(
                model="gsm8k-panel",
                messages=[{"role": "user", "content": str(panel.meta["question"])}],
            )
            ext = done.model_extra["dissensus"]
            runs.append(ext["run_id"])
            gold = str(panel.meta["gold"])
            if ext["status"] == "committed":
                committed += 1
                right += ext["decision"] == gold
            print(
                f"{panel.id:>12}  {done.choices[0].finish_reason:9}  "
                f"decision {ext['decision']!s:>8}  gold {gold:>8}  "
                f"{'by ' + ext['answered_by'] if ext['answered_by'] else 'case ' + ext['case_id']}"
            )
        client.close()
        server.should_exit = True
        thread.join(30)
        with Journal(str(root / "journal.sqlite")) as journal:
            verified = sum(journal.verify(run).ok for run in runs)
    print(
        f"committed {committed} of {len(asked)} (correct {right}), escalated "
        f"{len(asked) - committed}; runs verified {verified} of {len(runs)}"
    )


if __name__ == "__main__":
    main()
