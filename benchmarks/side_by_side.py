"""Our router next to a Qpid Dispatch 1.x ``qdrouterd``, same cases, same clients, alternating.

Every case runs once on each router, in turn (ours, 1.x, ours, 1.x, ... ``--repeat`` times), with
the compiled load generator (``cloadgen``: proton-C, several times faster than either router, so
the routers are measured; ``lat-10k-py`` uses the Python one); fresh routers (or chains of
routers) for every run. The table gives the medians and the ratio ours / 1.x, and beside it the
paired ratios (each repeat's ours / 1.x, made one after the other: their median and range):

* msgs/s received (all pairs), router CPU µs per message (every process of every router of the
  case, from /proc), latency p50/p99/p99.9 (worst pair, µs), peak RSS of the routers (sum of every
  process's VmHWM, MB), pre-settled messages lost (sent - received);
* cases (``--cases``, comma separated): ``1r-unsettled``, ``1r-presettled`` (1 router),
  ``1r-unsettled-4p``, ``1r-presettled-4p`` (4 pairs), ``2r-unsettled``, ``3r-unsettled`` (chains
  of interior routers, sender on the first, receiver on the last), ``lat-10k`` (1 router, unsettled,
  10,000 msg/s paced), ``lat-10k-py`` (the same with the project's Python clients, ``loadgen.py``:
  clients that take a good part of the CPUs the router runs on), ``lat-half`` (paced at half of
  the 1.x router's median 1r-unsettled rate, measured first in the same invocation when that case
  is also asked for, else ``--half-rate``), ``eie-unsettled`` / ``eie-presettled`` (edge ->
  interior -> edge: sender on edge router E1, receiver on edge router E2, both attached to
  interior router I; CPU and RSS are the three routers');
* beside the ``lat-10k`` cases, the floor the design's two ZeroMQ hops set on this box: after each
  repeat's two runs, ``bench_zmq_hops.py`` (three processes, no router; under ``--ours-prefix``)
  at the same rate for as long; the table adds its p50/p99 ("hops") and ours minus it
  ("-hops", per repeat), each against the 1.x figure.

The 1.x router: ``--qdrouterd-1x DIR`` is an install prefix (``DIR/sbin/qdrouterd``; its Python
path is derived from ``DIR/lib``, plus Debian's ``/usr/lib/python3/dist-packages`` for proton's
binding), built outside this repository. Config for both: the same generated ``qdrouterd.conf``
(``workerThreads`` ``--workers``, default 4; the clients' listener's linkCapacity
``--link-capacity``, default not set: 250; ANONYMOUS listener). Ours starts as many worker
processes as its sizing gives for that ``workerThreads`` on this machine (supervisor/sizing.py,
printed in the header; ``QDROUTERD_WORKER_PROCESSES`` in the environment forces a number).
``--ours-prefix CMD`` starts our routers (never the 1.x one, never the clients) under a command
whose setting every process of the router inherits: ``taskset -c 0`` (one CPU), ``chrt --batch
0`` (SCHED_BATCH); docs/benchmarks.md, "Placement and scheduling".

    python benchmarks/side_by_side.py --qdrouterd-1x /opt/qpid-dispatch-1.19 --repeat 3
    python benchmarks/side_by_side.py --qdrouterd-1x DIR --cases 1r-unsettled,lat-10k --count 200000

Output: the table on stdout and one ``side-by-side/1`` JSON line per run appended to ``--out``
(default ``benchmarks/results/side-by-side-<UTC time>.jsonl``). Every process started here is
stopped here; every wait is bounded; only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import bench_network as bn
import cloadgen
import run_router_bench as rb

HERE = Path(__file__).resolve().parent
CASES = ("1r-unsettled", "1r-presettled", "1r-unsettled-4p", "1r-presettled-4p", "2r-unsettled",
         "3r-unsettled", "lat-10k", "lat-10k-py", "lat-half", "eie-unsettled", "eie-presettled")
DEFAULT_CASES = "1r-unsettled,1r-presettled,2r-unsettled,lat-10k,lat-half"


def env_1x(prefix: Path) -> dict[str, str]:
    """PYTHONPATH for a 1.x install prefix: its own modules, then Debian's proton binding."""
    parts = sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages" / "*.egg")))
    # Debian's layout of a prefix install: PREFIX/local/lib/python3.X/dist-packages
    parts += sorted(glob.glob(str(prefix / "local" / "lib" / "python3*" / "dist-packages"
                                  / "*.egg")))
    parts += sorted(glob.glob(str(prefix / "lib" / "python3*" / "site-packages")))
    parts += [str(prefix / "lib" / "qpid-dispatch" / "python"), "/usr/lib/python3/dist-packages"]
    return {"PYTHONPATH": os.pathsep.join(p for p in parts if os.path.exists(p))}


def peak_rss_mb(roots: list[int]) -> Optional[float]:
    total = 0
    for pid in rb.process_trees(roots):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return round(total / 1024, 1) if total else None


class Spec:
    """What one case asks for."""

    def __init__(self, name: str, half_rate: float) -> None:
        self.name = name
        self.edge = name.startswith("eie-")  # edge -> interior -> edge (bn.EdgeLine)
        self.routers = 3 if self.edge else (int(name[0]) if name[0].isdigit() else 1)
        self.presettled = "presettled" in name
        self.pairs = 4 if name.endswith("-4p") else 1
        self.rate = 10_000.0 if name.startswith("lat-10k") else (
            half_rate if name == "lat-half" else 0.0)
        self.client = "py" if name.endswith("-py") else "c"  # loadgen.py, else cloadgen
        self.floor = name.startswith("lat-10k")  # the two hops alone measured beside it


def load_args(args: argparse.Namespace, spec: Spec) -> argparse.Namespace:
    """The namespace ``run_router_bench.run_once`` reads."""
    count = args.count
    if spec.rate:      # a paced run lasts --paced-seconds
        count = int(spec.rate * args.paced_seconds)
    return argparse.Namespace(
        pairs=spec.pairs, count=count, body_size=args.body_size, credit=args.credit,
        window=0, rate=spec.rate, client=spec.client, shared_address=False, receivers=1,
        distribution=None, timeout=args.timeout, router_cmd=None, workers=args.workers,
        # a router may drop pre-settled messages (1.19 does under load): stop 2 s after the last
        idle_timeout=2.0 if spec.presettled else None)


def start(kind: str, spec: Spec, args: argparse.Namespace, workdir: Path):
    cmd = None if kind == "ours" else f"{args.qdrouterd_1x / 'sbin' / 'qdrouterd'} -c {{conf}}"
    env = {} if kind == "ours" else env_1x(args.qdrouterd_1x)
    prefix = shlex.split(args.ours_prefix) if kind == "ours" else []
    if spec.routers == 1:
        router = rb.Router(workdir, rb.free_port(), args.workers, cmd, env, name=kind,
                           new_session=True, link_capacity=args.link_capacity, prefix=prefix)
        try:
            router.wait_ready()
        except Exception:
            router.stop()
            raise
        return router, [router.proc.pid]
    if spec.edge:
        chain = bn.EdgeLine(workdir / f"{kind}-edges", args.workers, cmd, extra_env=env,
                            link_capacity=args.link_capacity, prefix=prefix)
    else:
        chain = bn.Chain(workdir / f"{kind}-chain", spec.routers, args.workers, cmd,
                         extra_env=env, link_capacity=args.link_capacity, prefix=prefix)
    try:
        chain.start()
    except Exception:
        chain.stop()
        raise
    return chain, chain.pids()


def run_case(kind: str, spec: Spec, args: argparse.Namespace, workdir: Path, rep: int) -> dict:
    run_id = f"{kind}-{spec.name}-{rep}"
    rundir = workdir / run_id
    rundir.mkdir()
    target, pids = start(kind, spec, args, rundir)
    try:
        summary, clients = rb.run_once(load_args(args, spec), rundir, target, run_id,
                                       spec.presettled, kind, None)
        rss = peak_rss_mb(pids)
    finally:
        target.stop()
    rcv = [c for c in clients if c["role"] == "receiver"]
    errors = summary["errors"]
    if spec.presettled:     # dropped pre-settled messages are counted as "lost", not an error
        errors = [e for e in errors if "idle for" not in e]
    p999 = [c.get("lat_p999_us") for c in rcv if c.get("lat_p999_us") is not None]
    return {
        "schema": "side-by-side/1", "run_id": run_id, "router": kind, "case": spec.name,
        "repeat": rep, "routers": spec.routers, "pairs": spec.pairs, "rate": spec.rate or None,
        "presettled": spec.presettled, "sent": summary["sent"], "received": summary["received"],
        "lost": (summary["sent"] - summary["received"]) if spec.presettled else None,
        "msgs_per_s": summary["msgs_per_s"], "router_cpu_us_per_msg":
            summary["router_cpu_us_per_msg"], "lat_p50_us": summary["lat_p50_us"],
        "lat_p99_us": summary["lat_p99_us"], "lat_p999_us": max(p999) if p999 else None,
        "peak_rss_mb": rss, "errors": errors, "workers": args.workers,
        "link_capacity": args.link_capacity or None,
    }


def hop_floor(spec: Spec, args: argparse.Namespace, rep: int) -> dict:
    """The two ZeroMQ hops alone (``bench_zmq_hops.py``: three processes, no router) paced at the
    case's rate for as long, under ``--ours-prefix`` as our routers are: the latency floor the
    design's hops set on this box, measured in the same run as the figures it sits beside."""
    row: dict = {"schema": "side-by-side/1", "router": "floor", "case": spec.name, "repeat": rep,
                 "rate": spec.rate, "errors": []}
    cmd = shlex.split(args.ours_prefix) + [
        sys.executable, str(HERE / "bench_zmq_hops.py"), "--rate", str(spec.rate),
        "--seconds", str(args.paced_seconds)]
    try:  # its own waits are bounded too (10 s for a silent relay or receiver)
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              timeout=args.paced_seconds + 60)
    except subprocess.TimeoutExpired:
        row["errors"] = ["the hops' floor (bench_zmq_hops.py) did not finish"]
        return row
    hops = None
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            try:
                hops = json.loads(line)
            except ValueError:  # not its JSON line (something the prefix printed)
                continue
    if done.returncode or hops is None or hops.get("kind") != "zmq-hops/1":
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        row["errors"] = [f"the hops' floor (bench_zmq_hops.py): {why}"]
        return row
    row.update(lat_p50_us=hops["p50_us"], lat_p99_us=hops["p99_us"],
               lat_p999_us=hops["p999_us"], sent=hops["sent"], received=hops["received"])
    return row


def past_floor(ours: list[dict], floor: list[dict]) -> list[dict]:
    """Each repeat's latency of ours minus that repeat's floor (p50 and p99): what our router
    adds beyond the two hops, to set beside the 1.x figure."""
    by_rep = {r["repeat"]: r for r in floor}
    rows = []
    for r in ours:
        f = by_rep.get(r["repeat"])
        if f is None:
            continue
        rows.append({"repeat": r["repeat"], **{
            key: r[key] - f[key] for key in ("lat_p50_us", "lat_p99_us")
            if r.get(key) is not None and f.get(key) is not None}})
    return rows


def median(rows: list[dict], key: str) -> Optional[float]:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


FIELDS = (("msgs/s", "msgs_per_s", "{:,.0f}"), ("router us/msg", "router_cpu_us_per_msg", "{:.2f}"),
          ("p50 us", "lat_p50_us", "{:,.0f}"), ("p99 us", "lat_p99_us", "{:,.0f}"),
          ("p99.9 us", "lat_p999_us", "{:,.0f}"), ("peak RSS MB", "peak_rss_mb", "{:.0f}"),
          ("lost", "lost", "{:.0f}"))


def fmt(fmt_: str, v: Optional[float]) -> str:
    return "-" if v is None else fmt_.format(v)


def paired_ratios(ours: list[dict], other: list[dict], key: str) -> list[float]:
    """ours / 1.x of the two runs of each repeat (they ran one after the other), so a slow
    drift of the host cancels out of each ratio; the spread of these is the run's noise."""
    by_rep = {r["repeat"]: r.get(key) for r in other}
    return [r[key] / by_rep[r["repeat"]] for r in ours
            if r.get(key) is not None and by_rep.get(r["repeat"])]


# the paced cases' extra rows: the hops alone, and ours beyond them (hop_floor, past_floor)
FLOOR_FIELDS = (("hops p50 us", "lat_p50_us", "{:,.0f}"), ("hops p99 us", "lat_p99_us", "{:,.0f}"))
PAST_FIELDS = (("p50-hops us", "lat_p50_us", "{:,.0f}"), ("p99-hops us", "lat_p99_us", "{:,.0f}"))


def print_table(results: list[dict], cases: list[str], repeat: int) -> None:
    print(f"medians of {repeat} alternating run(s); ratio = ours / 1.x "
          f"(msgs/s: higher is better; the others: lower is better); paired = the median of the "
          f"repeats' own ratios [lowest-highest]; paced at 10,000/s: 'hops' = the two ZeroMQ hops "
          f"alone (bench_zmq_hops.py, same rate, same run), '-hops' = ours minus them")
    print(f"{'case':18} {'figure':14} {'ours':>12} {'1.x':>12} {'ratio':>7}  paired")
    for case in cases:
        ours = [r for r in results if r["case"] == case and r["router"] == "ours"]
        other = [r for r in results if r["case"] == case and r["router"] == "1x"]
        floor = [r for r in results if r["case"] == case and r["router"] == "floor"]
        rate = next((r["rate"] for r in ours + other if r["rate"]), None)
        label = case + (f" @{rate:,.0f}/s" if rate else "")
        rows = [(FIELDS, ours)]
        if floor:
            rows += [(FLOOR_FIELDS, floor), (PAST_FIELDS, past_floor(ours, floor))]
        for fields, mine in rows:
            for title, key, f in fields:
                a, b = median(mine, key), median(other, key)
                if a is None and b is None:
                    continue
                ratio = f"{a / b:.2f}" if a is not None and b else "-"
                pairs = paired_ratios(mine, other, key)
                paired = (f"{statistics.median(pairs):.2f} [{min(pairs):.2f}-{max(pairs):.2f}]"
                          if len(pairs) > 1 else "")
                print(f"{label:18} {title:14} {fmt(f, a):>12} {fmt(f, b):>12} {ratio:>7}  "
                      f"{paired}")
                label = ""
        for r in ours + other + floor:
            for e in r["errors"]:
                print(f"    ! {r['router']} run {r['repeat']}: {e}")


def record(results: list[dict], out: Path, row: dict) -> None:
    results.append(row)
    with open(out, "a", encoding="utf-8") as f:
        f.write(json.dumps(row, separators=(",", ":")) + "\n")


def machine() -> str:
    cpus = os.cpu_count()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f
                          if line.startswith("model name")), "")
    except OSError:
        pass
    return f"{cpus} CPUs, {model}, load average {os.getloadavg()[0]:.2f} at start"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--qdrouterd-1x", type=Path, required=True,
                   help="install prefix of a Qpid Dispatch 1.x build (DIR/sbin/qdrouterd)")
    p.add_argument("--cases", default=DEFAULT_CASES, help=f"comma separated, of {', '.join(CASES)}")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--count", type=int, default=200_000, help="messages per sender (unpaced)")
    p.add_argument("--paced-seconds", type=float, default=5.0, help="length of a paced run")
    p.add_argument("--half-rate", type=float, default=80_000.0,
                   help="lat-half rate when 1r-unsettled is not run")
    p.add_argument("--body-size", type=int, default=100)
    p.add_argument("--credit", type=int, default=1000, help="receiver credit")
    p.add_argument("--workers", type=int, default=4, help="workerThreads of every router")
    p.add_argument("--link-capacity", type=int, default=0,
                   help="linkCapacity of the clients' listener of every router (0: not set, "
                        "the default 250; it bounds a sender's unsettled deliveries)")
    p.add_argument("--ours-prefix", default="",
                   help="a command our routers start under (never the 1.x router), whose "
                        "setting every process of the router inherits: 'taskset -c 0' (one "
                        "CPU), 'chrt --batch 0' (SCHED_BATCH)")
    p.add_argument("--timeout", type=float, default=120.0, help="bound per client process")
    p.add_argument("--out", help="JSON lines file")
    return p


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)}", file=sys.stderr)
        return 2
    if not (args.qdrouterd_1x / "sbin" / "qdrouterd").exists():
        print(f"no {args.qdrouterd_1x / 'sbin' / 'qdrouterd'}", file=sys.stderr)
        return 2
    try:
        cloadgen.build()
    except cloadgen.BuildError as e:
        print(f"side_by_side: {e}", file=sys.stderr)
        return 2
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else HERE / "results" / f"side-by-side-{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    from supervisor.sizing import size_for_machine  # noqa: PLC0415 - ours' process count
    print(f"machine: {machine()}; workerThreads {args.workers}, clients' linkCapacity "
          f"{args.link_capacity or 'not set (250)'}; ours: "
          f"{size_for_machine(args.workers).describe()}"
          + (f", started under '{args.ours_prefix}'" if args.ours_prefix else ""), flush=True)
    # lat-half needs the 1.x peak: run 1r-unsettled first when both are asked for
    order = sorted(cases, key=lambda c: (c != "1r-unsettled", c == "lat-half"))
    results: list[dict] = []
    half_rate = args.half_rate
    with tempfile.TemporaryDirectory(prefix="side-by-side-") as tmp:
        workdir = Path(tmp)
        for case in order:
            if case == "lat-half" and "1r-unsettled" in cases:
                peak = median([r for r in results if r["case"] == "1r-unsettled"
                               and r["router"] == "1x"], "msgs_per_s")
                half_rate = round(peak / 2) if peak else args.half_rate
            spec = Spec(case, half_rate)
            for rep in range(args.repeat):
                for kind in ("ours", "1x") if rep % 2 == 0 else ("1x", "ours"):
                    try:
                        row = run_case(kind, spec, args, workdir, rep)
                    except RuntimeError as e:
                        row = {"schema": "side-by-side/1", "router": kind, "case": case,
                               "repeat": rep, "rate": spec.rate or None,
                               "errors": [str(e).splitlines()[0]]}
                    record(results, out, row)
                    print(f"{case} {kind} #{rep}: {row.get('msgs_per_s')} msg/s, "
                          f"{row.get('router_cpu_us_per_msg')} us/msg, p50 "
                          f"{row.get('lat_p50_us')} p99 {row.get('lat_p99_us')}"
                          + (f", errors {row['errors']}" if row["errors"] else ""),
                          file=sys.stderr, flush=True)
                if spec.floor:
                    row = hop_floor(spec, args, rep)
                    record(results, out, row)
                    print(f"{case} hops alone #{rep}: p50 {row.get('lat_p50_us')} p99 "
                          f"{row.get('lat_p99_us')}"
                          + (f", errors {row['errors']}" if row["errors"] else ""),
                          file=sys.stderr, flush=True)
    print_table(results, cases, args.repeat)
    print(f"results: {out}")
    return 0 if all(not r["errors"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
