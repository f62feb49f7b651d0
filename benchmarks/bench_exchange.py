"""Per-message cost of routing through an exchange with 1, 10 and 1,000 bindings.

Two measurements, both next to the same traffic sent to an ordinary address (``plain``), so the
exchange's own cost shows as the difference:

* **core** (no processes): the router core alone, compiled (``router_core._core``) and pure, fed
  Transfer batches as a worker would send them; µs of core CPU per message. A message's subject
  matches exactly one binding key (``k.<i>``); every key leads to the same next hop, which has
  one consumer with credit.
* **router** (real processes, ``--router``): a router with the same exchange, one proton client
  pair (sender to the exchange, receiver on the next hop, unsettled, accepted); router CPU
  (every process of the router, from /proc) per message received. With ``--qdrouterd-1x DIR``
  (or ``QDROUTERD_1X``) a Qpid Dispatch 1.x router runs the same cases, alternating with ours,
  and the table shows both and the ratio.

    python benchmarks/bench_exchange.py                      # core only
    python benchmarks/bench_exchange.py --router --count 5000
    QDROUTERD_1X=/opt/qpid-dispatch-1.19.0 python benchmarks/bench_exchange.py --router

Output: the tables on stdout, one ``bench-exchange/1`` JSON line per measurement appended to
``--out`` (default ``benchmarks/results/exchange-<UTC time>.jsonl``). Every process started
here is stopped here; every wait is bounded; only 127.0.0.1 is used.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE))

from proton import Message  # noqa: E402

from common.ipc import DIR_IN, DIR_OUT, ConnOpened, LinkAttach, LinkFlow, Transfer  # noqa: E402

BINDINGS = (1, 10, 1000)
CASES = ("plain",) + tuple(f"exchange-{n}" for n in BINDINGS)


def exchange_conf(bindings: int) -> str:
    """Configuration sections of an exchange ``Address1`` with ``bindings`` keys k.0 ... all
    leading to ``out``."""
    text = "exchange {\n    address: Address1\n    name: Exchange1\n}\n"
    for i in range(bindings):
        text += (f"binding {{\n    name: b{i}\n    exchangeName: Exchange1\n"
                 f"    bindingKey: k.{i}\n    nextHopAddress: out\n}}\n")
    return text


def case_bindings(case: str) -> int:
    return 0 if case == "plain" else int(case.split("-")[1])


# --------------------------------------------------------------------------- core
def core_run(cls: Any, case: str, messages: int, batch: int) -> float:
    """µs of core CPU per message for ``case`` on the core class ``cls``."""
    n = case_bindings(case)
    exchanges = [{"identity": "exchange/0", "name": "E", "address": "Address1"}] if n else []
    bindings = [{"identity": f"binding/{i}", "name": f"b{i}", "exchangeName": "E",
                 "bindingKey": f"k.{i}", "nextHopAddress": "out"} for i in range(n)]
    core = cls("R", exchanges=exchanges, bindings=bindings)
    target = "Address1" if n else "out"
    core.handle_batch(0, [ConnOpened(1, "normal", "in", "h:1", "c", "l", "", "", False, 250, 1),
                          LinkAttach(1, 1, DIR_IN, "s", target, False, False, 250),
                          LinkAttach(2, 1, DIR_OUT, "r", "out", False, False, 250),
                          LinkFlow(2, 1 << 40, False)], 0.0)
    core.take_effects()
    payloads = [Message(subject=f"k.{i % max(n, 1)}", body="x" * 100).encode()
                for i in range(max(n, 1))]
    batches = []
    dlv = 0
    for start in range(0, messages, batch):
        cmds = []
        for _ in range(min(batch, messages - start)):
            dlv += 1
            cmds.append(Transfer(dlv, 1, None, True, 4, payloads[dlv % len(payloads)]))
        batches.append(cmds)
    began = time.process_time()
    for cmds in batches:
        core.handle_batch(0, cmds, 0.0)
        core.take_effects()
    spent = time.process_time() - began
    snap = core.snapshot()
    if n:
        ex = snap["exchanges"]["exchange/0"]
        assert ex["forwardedCount"] == messages, ex  # every message went through the exchange
    return spent / messages * 1e6


def run_core(args: argparse.Namespace, out) -> None:
    from router_core import core as pure
    builds = [("pure", pure.RouterCore)]
    try:
        from router_core import _core
        builds.insert(0, ("compiled", _core.RouterCore))
    except ImportError:
        print("(router_core._core is not built: pure core only)")
    print(f"\ncore: µs of core CPU per message (median of {args.repeat}, "
          f"{args.core_messages} messages, batches of {args.batch})")
    print(f"{'case':<16}" + "".join(f"{name:>12}" for name, _ in builds))
    for case in CASES:
        row = []
        for name, cls in builds:
            costs = [core_run(cls, case, args.core_messages, args.batch)
                     for _ in range(args.repeat)]
            cost = statistics.median(costs)
            row.append(cost)
            out.write(json.dumps({"kind": "bench-exchange/1", "part": "core", "build": name,
                                  "case": case, "us_per_msg": round(cost, 3)}) + "\n")
        print(f"{case:<16}" + "".join(f"{c:>12.2f}" for c in row))


# --------------------------------------------------------------------------- routers
def clients(url: str, count: int, bindings: int, timeout: float) -> int:
    """Send ``count`` unsettled messages to the exchange (or to ``out`` for plain) and receive
    them on ``out``; the number received (bounded by ``timeout``)."""
    from proton.handlers import MessagingHandler
    from proton.reactor import Container

    class Pair(MessagingHandler):
        def __init__(self) -> None:
            super().__init__(prefetch=500)
            self.sent = self.received = self.settled = 0
            self.deadline = time.monotonic() + timeout
            self.sender = None

        def on_start(self, event) -> None:
            conn = event.container.connect(url)
            event.container.create_receiver(conn, "out")
            self.sender = event.container.create_sender(conn, "Address1" if bindings else "out")
            event.container.schedule(timeout, self)

        def on_timer_task(self, event) -> None:
            event.container.stop()

        def on_sendable(self, event) -> None:
            while event.sender.credit and self.sent < count:
                event.sender.send(Message(subject=f"k.{self.sent % max(bindings, 1)}",
                                          body="x" * 100))
                self.sent += 1

        def on_message(self, event) -> None:
            self.received += 1

        def on_settled(self, event) -> None:
            self.settled += 1
            if self.settled >= count and self.received >= count:
                event.connection.close()
                event.container.stop()

    pair = Pair()
    Container(pair).run()
    return pair.received


def run_routers(args: argparse.Namespace, out) -> None:
    import run_router_bench as rb
    import side_by_side as sbs
    kinds = ["ours"] + (["1x"] if args.qdrouterd_1x else [])
    workdir = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-exchange-{os.getpid()}"
    workdir.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    for rep in range(args.repeat):
        for case in CASES:
            for kind in kinds:
                port = rb.free_port()
                conf = ("router {\n    mode: standalone\n    id: Bench\n"
                        f"    workerThreads: {args.workers}\n}}\n"
                        f"listener {{\n    host: 127.0.0.1\n    port: {port}\n"
                        "    authenticatePeer: no\n    saslMechanisms: ANONYMOUS\n}\n"
                        + (exchange_conf(case_bindings(case)) if case != "plain" else ""))
                cmd = (None if kind == "ours"
                       else f"{Path(args.qdrouterd_1x) / 'sbin' / 'qdrouterd'} -c {{conf}}")
                env = {} if kind == "ours" else sbs.env_1x(Path(args.qdrouterd_1x))
                router = rb.Router(workdir, port, args.workers, cmd, env, conf_text=conf,
                                   name=f"{kind}-{case}-{rep}", new_session=True)
                try:
                    router.wait_ready()
                    meter = router.cpu_meter()
                    meter.start()
                    got = clients(f"127.0.0.1:{port}", args.count, case_bindings(case),
                                  args.timeout)
                    cpu, _ = meter.stop()
                finally:
                    router.stop()
                cost = cpu / got * 1e6 if got else float("nan")
                results.setdefault((case, kind), []).append(cost)
                out.write(json.dumps({"kind": "bench-exchange/1", "part": "router",
                                      "router": kind, "case": case, "rep": rep,
                                      "received": got, "sent": args.count,
                                      "router_us_per_msg": round(cost, 2)}) + "\n")
    print(f"\nrouters: router CPU µs per message (median of {args.repeat}, {args.count} "
          f"unsettled messages, {args.workers} worker(s))")
    print(f"{'case':<16}" + "".join(f"{k:>10}" for k in kinds)
          + ("   ours/1x" if len(kinds) == 2 else ""))
    for case in CASES:
        meds = [statistics.median(results[(case, k)]) for k in kinds]
        line = f"{case:<16}" + "".join(f"{m:>10.1f}" for m in meds)
        if len(meds) == 2:
            line += f"{meds[0] / meds[1]:>10.2f}"
        print(line)


def main(argv: Optional[list] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--core-messages", type=int, default=20000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--router", action="store_true", help="also run real router processes")
    p.add_argument("--count", type=int, default=20000,
                   help="messages per router run (router CPU is read in 10 ms ticks)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--qdrouterd-1x", default=os.environ.get("QDROUTERD_1X") or None,
                   help="a Qpid Dispatch 1.x install prefix to run side by side")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    out_path = args.out or HERE / "results" / time.strftime(
        "exchange-%Y%m%dT%H%M%SZ.jsonl", time.gmtime())
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "a", encoding="utf-8") as out:
        run_core(args, out)
        if args.router:
            run_routers(args, out)
    print(f"\nJSON lines: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
