"""Benchmark of route computation (next hop, cost, radius and valid origins), both builds.

A script, not a test: ``python benchmarks/bench_pathcomp.py [--out FILE] [--seed N]``.
Topologies: a 128-router full mesh (every link a random cost 1..10, the same both ways, as a link
has one configured cost) and a 1000-router connected sparse graph (a random spanning tree plus
random extra links up to an average degree of 4, costs 1..10). Prints ms per ``compute_routes``
call and writes one JSON line per figure (to stdout, or appended to ``--out``), plus the
compiled/pure ratio. The compiled build is skipped if not built. Owns nothing the router
imports; must not be imported by src/ code.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from typing import Callable, Dict, List

from router_core import pathcomp

try:
    from router_core import _pathcomp
except ImportError:         # not built: only the pure-Python figures
    _pathcomp = None

LinkStates = Dict[str, Dict[str, int]]


def full_mesh(n: int, rnd: random.Random) -> LinkStates:
    names = [f"R{i:04d}" for i in range(n)]
    ls: LinkStates = {a: {} for a in names}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            ls[a][b] = ls[b][a] = rnd.randint(1, 10)
    return ls


def sparse(n: int, degree: int, rnd: random.Random) -> LinkStates:
    names = [f"R{i:04d}" for i in range(n)]
    ls: LinkStates = {a: {} for a in names}

    def link(a: str, b: str) -> None:
        ls[a][b] = ls[b][a] = rnd.randint(1, 10)

    for i in range(1, n):                       # a random spanning tree keeps it connected
        link(names[i], names[rnd.randrange(i)])
    while sum(map(len, ls.values())) < n * degree:
        a, b = rnd.sample(names, 2)
        if b not in ls[a]:
            link(a, b)
    return ls


def best_ms(fn: Callable[[], object], repeat: int, budget_s: float) -> float:
    """Best of ``repeat`` runs, stopping early once ``budget_s`` is spent (the pure build is slow)."""
    best = float("inf")
    spent = 0.0
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
        if spent > budget_s:
            break
    return best * 1e3


def run(seed: int, repeat: int) -> List[dict]:
    rnd = random.Random(seed)
    topologies = {"full_mesh_128": full_mesh(128, rnd), "sparse_1000_deg4": sparse(1000, 4, rnd)}
    builds = [("python", pathcomp)] + ([("cython", _pathcomp)] if _pathcomp else [])
    figures = []
    for topo, ls in topologies.items():
        my_id = min(ls)
        edges = sum(map(len, ls.values()))
        results = {}
        for build, mod in builds:
            results[build] = mod.compute_routes(my_id, ls)
            ms = best_ms(lambda: mod.compute_routes(my_id, ls), repeat,
                         budget_s=10.0 if build == "python" else 2.0)
            figures.append({"bench": "pathcomp", "topology": topo, "routers": len(ls),
                            "directed_edges": edges, "build": build, "ms": round(ms, 3),
                            "radius": results[build].radius})
        if len(results) == 2:
            assert results["python"] == results["cython"], f"builds disagree on {topo}"
            by_build = {f["build"]: f["ms"] for f in figures if f["topology"] == topo}
            figures.append({"bench": "pathcomp", "topology": topo,
                            "speedup_cython_vs_python":
                                round(by_build["python"] / by_build["cython"], 1)})
    return figures


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="append JSON lines here instead of stdout")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per figure (best kept)")
    args = parser.parse_args(argv)
    figures = run(args.seed, args.repeat)
    for f in figures:
        if "ms" in f:
            print(f"# {f['build']:6} {f['topology']:17} ({f['routers']} routers, "
                  f"{f['directed_edges']} edges): {f['ms']:10.3f} ms", file=sys.stderr)
        else:
            print(f"# {'ratio':6} {f['topology']:17} cython is "
                  f"{f['speedup_cython_vs_python']}x faster", file=sys.stderr)
    lines = "".join(json.dumps(f) + "\n" for f in figures)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(lines)
    else:
        sys.stdout.write(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
