"""Issue 11's markdown table from cpu_full_table.sh results files: muser / llama.cpp per cell.

    python benchmarks/device/format_table.py table-small.txt [table-big.txt rerun.txt ...]

Every file's lines are pooled per cell (a rerun of some cells in the same call adds runs to them).

With ROUNDS > 1 a cell was measured several times, muser and llama.cpp alternating; the best of each side is
shown (the host's load drifts over tens of seconds, so the best run is the one least disturbed), with the
number of runs behind each side when there was more than one.
"""

import re
import sys


def read_cells(paths: list[str]) -> dict:
    cells: dict = {}
    lines = [line for path in paths for line in open(path)]
    for line in lines:
        m = re.match(r"\s*(muser|llama)\s+(\S+?)(?:\.gguf)?\s+t=(\d+)\s+(.*)", line.split("] ")[-1])
        if not m:
            continue
        who, model, threads, rest = m.groups()
        cell = cells.setdefault((model, int(threads)), {})
        for key, value in re.findall(r"(pp512|tg(?:@\d+)?|4-row|4-seq decode)\s+([\d.]+)", rest):
            cell.setdefault((who, {"4-seq decode": "4-row"}.get(key, key)), []).append(float(value))
    return cells


def main() -> None:
    cells = read_cells(sys.argv[1:])
    depths = sorted({key for cell in cells.values() for _, key in cell if key.startswith("tg@")},
                    key=lambda key: int(key[3:]))
    keys = ["pp512", "tg", *depths, "4-row"]
    titles = {"pp512": "prefill 512", "tg": "single-row decode", "4-row": "4 rows vs 4 sequences"}
    print("| model | threads | " + " | ".join(titles.get(key, f"single-row decode at depth {key[3:]}")
                                           for key in keys) + " |")
    print("|---|---|" + "---|" * len(keys))
    for (model, threads), cell in sorted(cells.items()):
        shown = []
        for key in keys:
            ours, theirs = cell.get(("muser", key)), cell.get(("llama", key))
            counts = (len(ours or []), len(theirs or []))
            note = f" [best of {counts[0]} / {counts[1]}]" if max(counts) > 1 else ""
            if not ours:
                shown.append("-")
            elif not theirs:
                shown.append(f"{max(ours):.1f} / -")
            else:
                shown.append(f"{max(ours):.1f} / {max(theirs):.1f} ({max(ours) / max(theirs):.2f}x){note}")
        print(f"| {model} | {threads} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
