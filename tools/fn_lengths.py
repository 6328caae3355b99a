#!/usr/bin/env python3
"""Non-test functions of src/ by length: how many exceed a budget, and the longest.

    python3 tools/fn_lengths.py            # over 100 lines, and the 20 longest
    python3 tools/fn_lengths.py --over 150 --top 5

A function runs from its `fn` line to the first line that closes it at the same indentation
(`}` there, not `} else`); a file's `#[cfg(test)]` module and everything after it is left out.
"""
import argparse
import os
import re

FN = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def lengths(root):
    out = []
    for base, _, files in os.walk(root):
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(base, name)
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            end = next((i for i, l in enumerate(lines) if l.startswith("#[cfg(test)]")), len(lines))
            for i in range(end):
                m = FN.match(lines[i])
                if not m or lines[i].rstrip().endswith(";"):
                    continue
                indent = m.group(1)
                j = i
                while j < end and not (
                    lines[j].startswith(indent + "}") and not lines[j].startswith(indent + "} else")
                ):
                    j += 1
                out.append((j - i + 1, path, m.group(7), i + 1))
    return sorted(out, reverse=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--over", type=int, default=100, help="the budget in lines (default 100)")
    ap.add_argument("--top", type=int, default=20, help="how many of the longest to list")
    ap.add_argument("--root", default="src")
    a = ap.parse_args()
    fns = lengths(a.root)
    print(f"{sum(1 for f in fns if f[0] > a.over)} of {len(fns)} functions over {a.over} lines")
    for n, path, name, line in fns[: a.top]:
        print(f"{n:5}  {path}:{line}  {name}")


if __name__ == "__main__":
    main()
