"""Prints run_on_gpu.sh's summary: pass/fail per test file, then the parity
figures the engine tests reported. Exit status 1 if any test failed.

    python tests/cuda/print_table.py cuda.xml suites.xml report.jsonl
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path


def main(argv: list[str]) -> int:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # passed, failed, skipped
    failures: list[str] = []
    reports = []
    for name in argv:
        path = Path(name)
        if not path.exists():
            print(f"missing: {name}")
            counts[name][1] += 1
            continue
        if path.suffix == ".jsonl":
            reports = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            continue
        for case in ET.parse(path).getroot().iter("testcase"):
            module = case.get("classname", "?")
            if case.find("failure") is not None or case.find("error") is not None:
                counts[module][1] += 1
                failures.append(f"{module}::{case.get('name')}")
            elif case.find("skipped") is not None:
                counts[module][2] += 1
            else:
                counts[module][0] += 1
    print(f"\n{'test module':60s} {'passed':>7s} {'failed':>7s} {'skipped':>8s}")
    for module, (p, f, s) in sorted(counts.items()):
        print(f"{module:60s} {p:7d} {f:7d} {s:8d}")
    if reports:
        print(f"\n{'CPU vs CUDA parity':32s} {'positions':>9s} {'clear':>6s} {'top-1 agree':>11s} {'max|d| top20':>12s}")
        for r in reports:
            if r["kind"] == "parity":
                print(f"{r['name']:32s} {r['positions']:9d} {r['clear']:6d} {r['agreed']:11d} "
                      f"{r['max_delta_top20']:12.5f}")
        for r in reports:
            if r["kind"] == "embedding":
                print(f"embedding {r['name']:22s} min cosine vs CPU {r['min_cosine_vs_cpu']:.6f}")
    for f in failures:
        print("FAILED", f)
    total_failed = sum(f for _, f, _ in counts.values())
    print("\nALL GPU TESTS PASSED" if total_failed == 0 else f"\n{total_failed} FAILED")
    return 0 if total_failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
