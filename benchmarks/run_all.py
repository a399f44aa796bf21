"""Run every benchmark in this folder, one after the other, and print their figures.

Usage: ``python benchmarks/run_all.py [NAME ...]`` (names without ``bench_`` / ``.py``).
Each benchmark is a standalone script; this runner only sequences them.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    wanted = set(argv)
    scripts = sorted(HERE.glob("bench_*.py"))
    failures = 0
    for script in scripts:
        name = script.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        print(f"\n=== {name} ===", flush=True)
        result = subprocess.run([sys.executable, str(script)], check=False)
        failures += result.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
