"""Link-routed versus message-routed: router CPU per message and msgs/s for the same clients.

Two variants on one router (ours, or ``--router-cmd`` for another binary), the same
``loadgen``/``cloadgen`` sender and receiver, ``--count`` messages of ``--body-size`` bytes:

* ``message``: the receiver attaches to the router, the sender too; every message is routed by
  its address (run_router_bench.run_once).
* ``linkroute``: the receiver listens (``--listen``) and stands for the broker: the router's
  ``route-container`` connector connects to it and a ``linkRoute { prefix: bench direction:
  in }`` routes the sender's attach there, so every message passes the routed link pair (no
  address lookup per transfer, credit from the receiver).

The two differ in pipeline depth, not only in the router's work per message: a link route
passes the receiver's credit on exactly (the sender has at most ``--credit`` in flight end to
end), while message routing adds the router's own window (``linkCapacity``) in front of the
receiver's. Fewer deliveries in flight make smaller batches per loop in the worker and the
core (router syscalls per message were ~18-38% higher for ``linkroute``), so per-loop costs
weigh more per message. ``--window N`` bounds the sender's unsettled deliveries in both
variants alike: that compares the per-message work at the same depth.

Router CPU is every router process's user+system time from /proc, sampled around each run
(run_router_bench.RouterCpu), divided by the messages received. Prints a table, the ratios
linkroute / message, and appends the ``bench/1`` lines (``variant`` is the name above) and
the clients' ``loadgen/1`` lines to ``--out`` (default
``benchmarks/results/linkroute-<UTC time>.jsonl``). A fresh router per run; every process is
stopped here, every wait bounded.

    python benchmarks/bench_link_route.py --count 20000 --repeat 3 --both
    python benchmarks/bench_link_route.py --client c --count 200000 --repeat 3 --unsettled
    python benchmarks/bench_link_route.py --client c --count 50000 --repeat 3 --both --window 100
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run_router_bench as rb  # noqa: E402

HERE = Path(__file__).resolve().parent
CONNECT_TIMEOUT = 30.0


def link_route_conf(port: int, container_port: int, workers: int) -> str:
    return (f"router {{\n    mode: standalone\n    id: Bench\n    workerThreads: {workers}\n}}\n"
            f"listener {{\n    host: 127.0.0.1\n    port: {port}\n    authenticatePeer: no\n"
            f"    saslMechanisms: ANONYMOUS\n}}\n"
            f"connector {{\n    name: sink\n    host: 127.0.0.1\n    port: {container_port}\n"
            f"    role: route-container\n}}\n"
            f"linkRoute {{\n    prefix: bench\n    direction: in\n    connection: sink\n}}\n")


def wait_connected(router: rb.Router, timeout: float = CONNECT_TIMEOUT) -> None:
    """Until the router's connector reached the listening receiver (the link route active)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if "Connection to 127.0.0.1" in router.log_path.read_text(errors="replace"):
            return
        if not router.alive():
            raise RuntimeError(f"router exited:\n{router.log_tail()}")
        time.sleep(0.1)
    raise RuntimeError(f"the route container was not reached:\n{router.log_tail()}")


def run_link_routed(args: argparse.Namespace, workdir: Path, run_id: str, presettled: bool,
                    env: dict) -> tuple[dict, list[dict]]:
    """One run of the ``linkroute`` variant (one pair): receiver listens, router, sender."""
    mode = "presettled" if presettled else "unsettled"
    rundir = workdir / run_id
    rundir.mkdir()
    container_port = rb.free_port()
    address = f"bench/{run_id}/0"
    ready = rundir / "receiver.ready"
    receiver = rb.spawn_client(
        rb.client_cmd("receiver", f"127.0.0.1:{container_port}", address, args,
                      rundir / "receiver.jsonl", ready, run_id, presettled, listen=True),
        rundir / "receiver.err")
    procs = [receiver]
    router = None
    errors: list[str] = []
    t0 = time.time()
    try:
        rb.wait_files([ready], procs, rb.READY_TIMEOUT)
        port = rb.free_port()
        router = rb.Router(workdir, port, args.workers, args.router_cmd, env,
                           conf_text=link_route_conf(port, container_port, args.workers),
                           name=f"lr-{run_id}")
        router.wait_ready()
        if not args.router_cmd:
            wait_connected(router)
        meter = router.cpu_meter()
        meter.start()
        sender = rb.spawn_client(
            rb.client_cmd("sender", f"127.0.0.1:{port}", address, args,
                          rundir / "sender.jsonl", rundir / "sender.ready", run_id, presettled),
            rundir / "sender.err")
        procs.append(sender)
        errors += rb.wait_all(procs, args.timeout + 15)
        router_cpu, by_proc = meter.stop()
        if not router.alive():
            errors.append(router.exit_error())
    finally:
        for p in procs:
            rb.stop_process(p, 2)
        if router is not None:
            router.stop()
    clients = [json.loads(line) for path in sorted(rundir.glob("*.jsonl"))
               for line in path.read_text().splitlines() if line.strip()]
    errors += [f"{c['role']}: {c['error']}" for c in clients if c.get("error")]
    summary = rb.summarize(args, clients, run_id, mode, "linkroute", router, router_cpu,
                           by_proc, None, errors, t0)
    return summary, clients


def run_message_routed(args: argparse.Namespace, workdir: Path, run_id: str, presettled: bool,
                       env: dict) -> tuple[dict, list[dict]]:
    router = rb.Router(workdir, rb.free_port(), args.workers, args.router_cmd, env,
                       name=f"msg-{run_id}")
    try:
        router.wait_ready()
        return rb.run_once(args, workdir, router, run_id, presettled, "message", None)
    finally:
        router.stop()


def median(rows: list[dict], key: str) -> Optional[float]:
    values = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(values) if values else None


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = rb.add_load_options(p)
    mode.add_argument("--both", dest="modes", action="store_const",
                      const=["presettled", "unsettled"])
    p.set_defaults(modes=["unsettled"], pairs=1, receivers=1, shared_address=False,
                   distribution=None)
    p.add_argument("--repeat", type=int, default=3, help="runs per variant and mode")
    p.add_argument("--workers", type=int, default=1, help="router workerThreads")
    p.add_argument("--router-cmd", help="another router binary: 'qdrouterd -c {conf}'")
    p.add_argument("--timeout", type=float, default=120.0, help="bound per client process")
    p.add_argument("--out", help="JSON lines file")
    args = p.parse_args(argv)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = Path(args.out) if args.out else HERE / "results" / f"linkroute-{stamp}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-lr-") as tmp, open(out, "a") as sink:
        workdir = Path(tmp)
        n = 0
        for mode_name in args.modes:
            presettled = mode_name == "presettled"
            for _ in range(args.repeat):
                for variant, run in (("message", run_message_routed),
                                     ("linkroute", run_link_routed)):
                    n += 1
                    run_id = f"{variant}-{mode_name}-{n}"
                    summary, clients = run(args, workdir, run_id, presettled, {})
                    for line in clients + [summary]:
                        sink.write(json.dumps(line) + "\n")
                    rows.append(summary)
                    if summary["errors"]:
                        print(f"{run_id}: {summary['errors']}", file=sys.stderr)
    rb.print_table(rows)
    print()
    print("medians      mode  msgs/s(msg)  msgs/s(lr)  router us/msg(msg)  router us/msg(lr)"
          "  ratio lr/msg")
    for mode_name in args.modes:
        by = {v: [r for r in rows if r["variant"] == v and r["mode"] == mode_name]
              for v in ("message", "linkroute")}
        rate = {v: median(by[v], "msgs_per_s") for v in by}
        cpu = {v: median(by[v], "router_cpu_us_per_msg") for v in by}
        ratio = (round(cpu["linkroute"] / cpu["message"], 3)
                 if cpu["linkroute"] and cpu["message"] else None)
        print(f"{mode_name:>16}  {rate['message']!s:>11}  {rate['linkroute']!s:>10}  "
              f"{cpu['message']!s:>18}  {cpu['linkroute']!s:>17}  {ratio!s:>12}")
    print(f"\nJSON lines: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
