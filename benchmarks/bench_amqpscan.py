"""Benchmark of the forwarding-path message scanner: ns per scan and per rewrite, both builds.

A script, not a test: ``python benchmarks/bench_amqpscan.py [--out FILE] [--number N]``.
Prints a table and writes one JSON line per figure (to stdout, or appended to ``--out``),
plus the compiled/pure ratio per operation. The compiled build is skipped if not built.
Owns nothing the router imports; must not be imported by src/ code.
"""
from __future__ import annotations

import argparse
import json
import sys
import timeit
from typing import Callable, Dict, List

from proton import Message

from common import amqpscan

try:
    from common import _amqpscan
except ImportError:         # not built: only the pure-Python figures
    _amqpscan = None


def messages() -> Dict[str, bytes]:
    body = b"x" * 100
    plain = Message(address="service/orders", body=body, durable=True, priority=6,
                    properties={"tenant": "acme"}).encode()
    annotated = Message(address="service/orders", body=body, durable=True, priority=6,
                        properties={"tenant": "acme"},
                        annotations={"user-key": "v", "x-opt-qd.ingress": "0/RouterA",
                                     "x-opt-qd.trace": ["0/RouterA", "0/RouterB"],
                                     "x-opt-qd.phase": 0}).encode()
    return {"plain": plain, "annotated": annotated}


def best_ns(fn: Callable[[], object], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e9


def run(number: int) -> List[dict]:
    builds = [("python", amqpscan)] + ([("cython", _amqpscan)] if _amqpscan else [])
    figures = []
    for name, buf in messages().items():
        for build, mod in builds:
            n = number if build == "cython" else max(number // 20, 1000)
            result = mod.scan(buf)
            scan_ns = best_ns(lambda: mod.scan(buf), n)
            rewrite_ns = best_ns(lambda: mod.rewrite_annotations(
                buf, result, ingress="0/RouterB", trace_append="0/RouterB"), n)
            strip_ns = best_ns(lambda: mod.rewrite_annotations(buf, result, strip=True), n)
            for op, ns in (("scan", scan_ns), ("rewrite_ingress_trace", rewrite_ns),
                           ("rewrite_strip", strip_ns)):
                figures.append({"bench": "amqpscan", "op": op, "message": name,
                                "bytes": len(buf), "build": build, "ns": round(ns, 1)})
    by_key = {(f["op"], f["message"], f["build"]): f["ns"] for f in figures}
    for (op, message, build), ns in list(by_key.items()):
        if build == "cython":
            figures.append({"bench": "amqpscan", "op": op, "message": message,
                            "speedup_cython_vs_python": round(by_key[(op, message, "python")] / ns, 1)})
    return figures


def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="append JSON lines here instead of stdout")
    parser.add_argument("--number", type=int, default=200_000, help="calls per timing (compiled)")
    args = parser.parse_args(argv)
    figures = run(args.number)
    for f in figures:
        if "ns" in f:
            print(f"# {f['build']:6} {f['op']:22} {f['message']:9} ({f['bytes']} B): "
                  f"{f['ns']:8.1f} ns", file=sys.stderr)
    lines = "".join(json.dumps(f) + "\n" for f in figures)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(lines)
    else:
        sys.stdout.write(lines)


if __name__ == "__main__":
    main(sys.argv[1:])
