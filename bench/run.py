"""Run every benchmark in this folder: ``python bench/run.py [--quick] [NAME ...]``.

Each ``bench_*.py`` module exposes ``main(quick: bool) -> None`` and prints its numbers,
always beside a floor measured in the same run so the ratio is visible.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="few iterations (CI smoke run)")
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    args = parser.parse_args()
    sys.path.insert(0, str(HERE))
    names = args.names or sorted(p.stem for p in HERE.glob("bench_*.py"))
    for name in names:
        module = importlib.import_module(name if name.startswith("bench_") else f"bench_{name}")
        print(f"== {module.__name__} ==", flush=True)
        started = time.perf_counter()
        module.main(quick=args.quick)
        print(f"   ({time.perf_counter() - started:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
