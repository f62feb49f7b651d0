"""Benchmark of the worker's proton engine adapter alone, in memory: worker-engine CPU µs/message.

A script, not a test: ``python benchmarks/bench_engine.py [--messages N] [--window W] [--out FILE]``.

Two bare proton client engines (a producer and a consumer connection, both served by ONE worker
engine, as in ``run_router_bench.py --pairs 1``) and the real router core, with bytes pumped in
memory (the ``tests/memrouter.py`` harness). The producer sends ``--messages`` 100-byte messages
in windows of ``--window``; the consumer accepts and settles each one (unsettled run) or just
reads them (presettled run). Only the worker engine's own calls are timed (``process_events``,
``take_commands`` and ``apply`` of every effect, with ``time.process_time_ns``); client engines,
byte pumping, IPC codec and the core are outside the timing. Figures: µs per message for the
compiled build (``router_io._engine``, skipped if not built) and the pure-Python reference.
Prints a table and one JSON line per figure (stdout, or appended to ``--out``).

``--message-logging``: ``none`` (the default: connections without messageLoggingComponents),
``off`` (``messageLoggingComponents: all`` but MESSAGE trace off: what that setting costs when
nothing is logged) or ``on`` (MESSAGE trace on, each line formatted and dropped).
Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import proton
from proton import Delivery, Message

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import memrouter  # noqa: E402

from common import ipc  # noqa: E402
from router_io import engine as engine_py  # noqa: E402

try:
    from router_io import _engine as engine_c
except ImportError:
    engine_c = None


class TimedRouter(memrouter.MemRouter):
    """MemRouter whose engine calls are timed (CPU time of this process)."""

    def __init__(self, engine_cls) -> None:
        super().__init__("Router.Bench", engine_cls=engine_cls)
        self.engine_ns = 0

    def run(self, rounds: int = 200) -> None:
        clock = time.process_time_ns
        engine = self.engine
        core = self.core
        for _ in range(rounds):
            moved = self._pump_once()
            t0 = clock()
            engine.process_events()
            commands = engine.take_commands()
            self.engine_ns += clock() - t0
            if commands:
                peer, decoded = ipc.decode_batch(ipc.encode_batch(0, commands))
                core.handle_batch(peer, decoded, self.now)
                moved = True
            for peer, effects in core.take_effects().items():
                _, decoded = ipc.decode_batch(ipc.encode_batch(-1, effects))
                t0 = clock()
                apply = engine.apply
                for fx in decoded:
                    apply(fx)
                self.engine_ns += clock() - t0
                moved = True
            if not moved:
                return


def run_once(engine_cls, messages: int, window: int, presettled: bool, body_size: int,
             message_logging: str = "none") -> float:
    r = TimedRouter(engine_cls)
    if message_logging != "none":
        memrouter.LISTENER["messageLoggingComponents"] = "all"
    if message_logging == "on":
        r.engine.set_message_trace(lambda conn_id, text: None)
    try:
        producer = r.client("producer")
        consumer = r.client("consumer")
    finally:
        memrouter.LISTENER.pop("messageLoggingComponents", None)
    rcv = consumer.receiver("bench", credit=window)
    snd = producer.sender("bench", settled=presettled)
    r.run()
    payload = Message(body="x" * body_size, durable=False, id="m", subject="bench",
                      properties={"k": 1}).encode()
    r.engine_ns = 0
    sent = got = 0
    tag = 0
    outstanding: list = []
    while got < messages:
        n = min(window, messages - sent, snd.credit)
        for _ in range(n):
            tag += 1
            dlv = snd.delivery(b"%d" % tag)
            snd.send(payload)
            snd.advance()
            if presettled:
                dlv.settle()
            else:
                outstanding.append(dlv)
        sent += n
        r.run()
        while True:
            dlv = rcv.current
            if dlv is None or dlv.partial or not dlv.readable:
                break
            rcv.recv(dlv.pending)
            rcv.advance()
            if not presettled:
                dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            got += 1
        rcv.flow(max(0, window - rcv.credit))
        producer.drain_events()
        consumer.drain_events()
        r.run()
        # the producer settles what the router settled, as a client would
        still = []
        for d in outstanding:
            if d.settled:
                d.settle()
            else:
                still.append(d)
        outstanding = still
        if sent and got == 0 and snd.credit == 0:
            raise RuntimeError("no progress")
    return r.engine_ns / 1000.0 / messages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=20000)
    ap.add_argument("--window", type=int, default=100)
    ap.add_argument("--body-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--message-logging", choices=("none", "off", "on"), default="none")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    builds = [("pure", engine_py.WorkerEngine)]
    if engine_c is not None:
        builds.insert(0, ("compiled", engine_c.WorkerEngine))
    lines = []
    results = {}
    for mode in ("unsettled", "presettled"):
        for name, cls in builds:
            runs = [run_once(cls, args.messages, args.window, mode == "presettled",
                             args.body_size, args.message_logging)
                    for _ in range(args.repeat)]
            best = min(runs)
            results[(mode, name)] = best
            print(f"{mode:10s} {name:8s} engine {best:7.2f} us/msg "
                  f"(runs: {', '.join(f'{x:.2f}' for x in runs)})")
            lines.append({"bench": "engine", "mode": mode, "build": name,
                          "messages": args.messages, "window": args.window,
                          "body_size": args.body_size,
                          "message_logging": args.message_logging,
                          "us_per_msg": round(best, 3),
                          "runs": [round(x, 3) for x in runs]})
    for mode in ("unsettled", "presettled"):
        if (mode, "compiled") in results:
            ratio = results[(mode, "compiled")] / results[(mode, "pure")]
            print(f"{mode:10s} compiled/pure = {ratio:.2f}")
            lines.append({"bench": "engine", "mode": mode, "ratio_compiled_pure":
                          round(ratio, 3)})
    text = "\n".join(json.dumps(x) for x in lines) + "\n"
    if args.out:
        with open(args.out, "a") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
