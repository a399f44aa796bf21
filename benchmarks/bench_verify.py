"""Reading a long run: ``runs verify`` and ``runs show --json``, events/s and peak memory.

A finished run of ``--panels`` synthetic 5-agent panels (``decide --similarity tfidf``,
default policy, no model: about 3.5 events a panel) is written once per back end
(SQLite, ``synchronous=normal``; PostgreSQL at ``--pg URL`` or ``$DISSENSUS_TEST_PG``,
skipped when neither is set); then each command runs in a fresh process, its standard
output sent to ``/dev/null``, and the benchmark prints the events it read per CPU second
of that process (user + system) and its peak resident memory (``VmHWM``), the best
of ``--repeat`` runs. CPU seconds rather than wall clock: the machine is shared.

``--before SRC`` runs the same commands, on the same journal, with another tree's
``src`` (a checkout of the code before a change, e.g. ``git worktree add --detach
/tmp/old int``), printed next to this tree's: the before/after of one hour. A second,
smaller run (``--panels`` divided by four) shows whether the memory grows with the run.

Usage::

    python benchmarks/bench_verify.py [--panels 27000] [--repeat 3] [--before SRC]
        [--pg URL] [--dir DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(SRC))

from bench_route import panel_line  # noqa: E402

COMMANDS = {"runs verify": ("runs", "verify"), "runs show --json": ("runs", "show", "--json")}


def _write_run(journal: str, panels: Path, run_id: str) -> int:
    """Decide every panel of ``panels`` into run ``run_id``; its number of events."""
    from dissensus.pipeline import Policy, execute_run, start_run
    from dissensus.store.journal import Journal

    store = Journal(journal)
    try:
        start_run(store, str(panels), Policy(), run_id=run_id, similarity="tfidf")

        async def go() -> int:
            return sum([1 async for _ in execute_run(store, run_id)])

        asyncio.run(go())
        info = store.run(run_id)
        assert info is not None
        return info.n_events
    finally:
        store.close()


def _measure(src: Path, journal: str, run_id: str, command: tuple[str, ...]) -> tuple[float, int]:
    """CPU seconds and peak RSS (KB) of ``dissensus COMMAND RUN --journal J`` run with
    ``src`` on its path, in a process of its own."""
    code = (
        "import sys, time\n"
        f"{_PEAK}\n"
        "from dissensus.cli import main\n"
        "c = time.process_time()\n"
        "try:\n"
        "    code = main(sys.argv[1:])\n"
        "except SystemExit as exc:\n"
        "    code = exc.code\n"
        "cpu = time.process_time() - c\n"
        "peak = _peak_kb()\n"
        "sys.stderr.write(f'\\nBENCH {cpu} {peak} {code}\\n')\n"
    )
    args = [command[0], command[1], run_id, *command[2:], "--journal", journal]
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    with open(os.devnull, "w") as null:
        done = subprocess.run(
            [sys.executable, "-c", code, *args],
            env=env,
            stdout=null,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
    line = [x for x in done.stderr.splitlines() if x.startswith("BENCH ")]
    if not line:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    _, cpu, peak, exit_code = line[-1].split()
    if exit_code not in ("0", "None"):
        raise SystemExit(f"{' '.join(args)} exited {exit_code}:\n{done.stderr[-2000:]}")
    return float(cpu), int(peak)


def _report(
    label: str, journal: str, run_id: str, events: int, trees: dict[str, Path], repeat: int
) -> None:
    for name, command in COMMANDS.items():
        for tree, src in trees.items():
            runs = [_measure(src, journal, run_id, command) for _ in range(repeat)]
            cpu = min(r[0] for r in runs)
            peak = min(r[1] for r in runs)
            print(
                f"{label:<11} {events:>9,} events  {name:<17} {tree:<6} "
                f"{events / cpu:>10,.0f} events/CPU s  ({cpu:6.2f} CPU s)  "
                f"peak RSS {peak / 1024:7.1f} MB",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--panels", type=int, default=27000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, default=None, help="another tree's src")
    parser.add_argument("--pg", default=os.environ.get("DISSENSUS_TEST_PG", ""))
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    os.environ.setdefault("DISSENSUS_JOURNAL_SYNC", "normal")
    trees = {"after": SRC}
    if args.before is not None:
        trees = {"before": args.before, **trees}
    print(f"peak RSS of an idle CLI process: {_idle_kb(SRC) / 1024:.1f} MB (imports alone)")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in (args.panels // 4, args.panels):
            panels = Path(tmp) / f"panels{n}.jsonl"
            panels.write_text("".join(panel_line(i) + "\n" for i in range(n)), encoding="utf-8")
            targets = [("sqlite", str(Path(tmp) / f"j{n}.sqlite"))]
            if args.pg:
                targets.append(("postgresql", args.pg))
            for label, journal in targets:
                run_id = f"bench-{uuid.uuid4().hex[:8]}"
                events = _write_run(journal, panels, run_id)
                _report(label, journal, run_id, events, trees, args.repeat)


_PEAK = (
    "def _peak_kb():\n"
    "    # VmHWM: this process's own peak (ru_maxrss keeps the forking parent's).\n"
    "    with open('/proc/self/status') as f:\n"
    "        return next(int(x.split()[1]) for x in f if x.startswith('VmHWM:'))\n"
)
"""The peak resident memory of the process running it, in KB."""


def _idle_kb(src: Path) -> int:
    code = f"{_PEAK}\nimport dissensus.cli\nprint(_peak_kb())"
    env = {**os.environ, "PYTHONPATH": str(src.resolve())}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


if __name__ == "__main__":
    main()
