#!/usr/bin/env python3
"""Dependency cycles between the top-level modules of src/.

A module depends on another when a non-test line of one of its files names `crate::OTHER`
(directly or inside `use crate::{…}`). Prints each strongly connected component of more than one
module, and the edges inside it with the files that make them; exit status 1 when there is one.

    python3 tools/module_cycles.py
"""
import collections
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
MODS = sorted(
    m[:-3] if m.endswith(".rs") else m
    for m in os.listdir(ROOT)
    if m not in ("lib.rs", "main.rs") and (m.endswith(".rs") or os.path.isdir(os.path.join(ROOT, m)))
)


def files(m):
    p = os.path.join(ROOT, m)
    if os.path.isdir(p):
        for d, _, fs in os.walk(p):
            for f in fs:
                if f.endswith(".rs"):
                    yield os.path.join(d, f)
    else:
        yield p + ".rs"


def edges():
    out = collections.defaultdict(lambda: collections.defaultdict(set))
    for m in MODS:
        for f in files(m):
            src = open(f).read()
            cut = src.find("#[cfg(test)]")
            if cut >= 0:
                src = src[:cut]
            # Code only: doc and line comments name modules without depending on them.
            src = "\n".join(line.split("//")[0] for line in src.split("\n"))
            names = re.findall(r"crate::([a-z_]+)", src)
            for group in re.findall(r"crate::\{([^;]*?)\};", src, re.S):
                names += re.findall(r"(?:^|[,{\s])([a-z_]+)(?=::|\s*[,}]|$)", group)
            for n in names:
                if n in MODS and n != m:
                    out[m][n].add(os.path.relpath(f, os.path.join(ROOT, "..")))
    return out


def components(g):
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    for v in MODS:
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def main():
    g = edges()
    cycles = components(g)
    for comp in cycles:
        print("cycle:", " ".join(comp))
        for a in comp:
            for b in comp:
                if b in g[a]:
                    print(f"  {a} -> {b}: {', '.join(sorted(g[a][b]))}")
    if not cycles:
        print(f"no cycle between the {len(MODS)} top-level modules of src/")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
