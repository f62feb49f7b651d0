"""Benchmark of the router core alone: µs per message, compiled build vs pure-Python reference.

A script, not a test: ``python benchmarks/bench_core.py [--out FILE] [--messages N] [--batch B]``.

One sender link (peer 0) to an address with 1 (closest), 2 (balanced) or 4 (multicast) receiver
links (peer 1) that always have credit, or (linkroute) a sender link-routed to a route
container (peer 1) whose routed link is the receiver: the same rounds through the routed pair. Each round is what the core process sees per loop:

1. the sender's worker batch: ``batch`` Transfers;
2. the receivers' worker batch: a LinkFlow per receiver (credit topped up) and, unsettled, one
   Disposition(ACCEPTED, settled) per Deliver it got.

Two figures per configuration: ``core`` = handle_batch + take_effects only (commands built
outside the timing), and ``core+ipc`` = also ``ipc.decode_batch`` of the inbound frames and
``ipc.encode_batch`` of every outbound peer batch, exactly as coreproc.py does (the workers'
encoding and decoding are not counted: that is their CPU, not the core's). µs are per inbound
message (for multicast that message has 4 copies): the median round of ``--repeat`` runs, which
shrugs off rounds preempted by other load on a shared box (the mean is in the JSON too).
Prints a table and writes one JSON line per figure (stdout, or appended to ``--out``), plus the
compiled/pure ratio. The compiled build is skipped if not built. Must not be imported by src/.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Tuple

from router_core import core as pure_core
from common import ipc
from common.ipc import (
    DIR_IN, DIR_OUT, STATE_ACCEPTED, ConnOpened, Deliver, Disposition, LinkAttach, LinkAttached,
    LinkFlow, Transfer)

try:
    from router_core import _core as compiled_core
except ImportError:  # not built: only the pure-Python figures
    compiled_core = None

SENDER, RECEIVER = 0, 1        # peer indexes
SENDER_LINK = 10
# "linkroute": the sender's attach is link-routed to a route container (peer 1) whose one
# routed link is the receiver: the same rounds through the routed pair instead of an address
CONFIGS = (("closest", 1), ("balanced", 2), ("multicast", 4), ("linkroute", 1))
PAYLOAD = b"\x00Sp\xc0\x02\x01A" + b"x" * 100


def make_routed_core(cls: Callable[..., Any]) -> Tuple[Any, List[int]]:
    """A core whose sender link is routed (linkRoute q in) to a route container: the
    receiver is the router's mirror link toward it, answered as a container answers."""
    core = cls("R1", seed=1, link_routes=[{"identity": "1", "prefix": "q", "direction": "in",
                                           "connection": "c"}])
    core.handle_batch(SENDER, [ConnOpened(1, "normal", "in", "h:1", "s", "l", "u", "", False,
                                          250)], 0.0)
    core.handle_batch(RECEIVER, [ConnOpened(2, "route-container", "out", "h:2", "r", "c", "",
                                            "", False, 250)], 0.0)
    core.take_effects()
    source, target = ipc.terminus(ipc.TERMINUS_SOURCE, None), ipc.terminus(
        ipc.TERMINUS_TARGET, "q")
    core.handle_batch(SENDER, [LinkAttach(SENDER_LINK, 1, DIR_IN, "s", "q", False, False, 250,
                                          "endpoint", source, target, [0, 0])], 0.0)
    (out,) = core.take_effects()[RECEIVER]
    core.handle_batch(RECEIVER, [LinkAttached(out.link_id, out.source, out.target, [0, 0])],
                      0.0)
    core.take_effects()
    return core, [out.link_id]


def make_core(cls: Callable[..., Any], dist: str, consumers: int) -> Tuple[Any, List[int]]:
    if dist == "linkroute":
        return make_routed_core(cls)
    core = cls("R1", default_distribution=dist, seed=1)
    core.handle_batch(SENDER, [ConnOpened(1, "normal", "in", "h:1", "s", "l", "u", "", False,
                                          250)], 0.0)
    core.handle_batch(RECEIVER, [ConnOpened(2, "normal", "in", "h:2", "r", "l", "u", "", False,
                                            250)], 0.0)
    receivers = [100 + n for n in range(consumers)]
    core.handle_batch(RECEIVER, [LinkAttach(link, 2, DIR_OUT, f"r{link}", "q", False, False, 250)
                                 for link in receivers], 0.0)
    core.handle_batch(SENDER, [LinkAttach(SENDER_LINK, 1, DIR_IN, "s", "q", False, False, 250)],
                      0.0)
    core.take_effects()
    return core, receivers


def run_one(cls: Callable[..., Any], dist: str, consumers: int, settled: bool, with_ipc: bool,
            messages: int, batch: int) -> List[float]:
    """Seconds of core time per inbound message, one figure per round."""
    core, receivers = make_core(cls, dist, consumers)
    limits = {link: 0 for link in receivers}
    dlv_id = 0
    rounds: List[float] = []
    clock = time.perf_counter
    encode, decode = ipc.encode_batch, ipc.decode_batch
    pending_disp: List[Any] = []
    for _ in range(messages // batch):
        # The receivers' worker: credit for the next round, dispositions for the last one.
        flows = []
        for link in receivers:
            limits[link] += batch
            flows.append(LinkFlow(link, limits[link], False))
        recv_cmds = flows + pending_disp
        sends = []
        for _ in range(batch):
            dlv_id += 1
            sends.append(Transfer(dlv_id, SENDER_LINK, None, settled, 4, PAYLOAD))
        if with_ipc:
            recv_frames = encode(RECEIVER, recv_cmds)
            send_frames = encode(SENDER, sends)
            t0 = clock()
            for frames in (recv_frames, send_frames):
                peer, cmds = decode(frames)
                core.handle_batch(peer, cmds, 0.0)
            effects = core.take_effects()
            out = [encode(-1, eff) for eff in effects.values()]
            rounds.append((clock() - t0) / batch)
        else:
            t0 = clock()
            core.handle_batch(RECEIVER, recv_cmds, 0.0)
            core.handle_batch(SENDER, sends, 0.0)
            effects = core.take_effects()
            rounds.append((clock() - t0) / batch)
        delivered = [e for e in effects.get(RECEIVER, ()) if type(e) is Deliver]
        copies = consumers if dist == "multicast" else 1
        assert len(delivered) == batch * copies, (dist, len(delivered))
        pending_disp = [] if settled else [Disposition(d.dlv_id, STATE_ACCEPTED, True, None)
                                           for d in delivered]
    return rounds[1:]  # the first round grows the dicts


def run(messages: int, batch: int, repeat: int) -> List[dict]:
    builds = [("pure", pure_core.RouterCore)]
    if compiled_core is not None:
        builds.insert(0, ("compiled", compiled_core.RouterCore))
    figures = []
    for dist, consumers in CONFIGS:
        for settled in (True, False):
            for with_ipc in (False, True):
                for build, cls in builds:
                    rounds = [t for _ in range(repeat) for t in run_one(
                        cls, dist, consumers, settled, with_ipc, messages, batch)]
                    best = statistics.median(rounds)
                    figures.append({
                        "bench": "core", "build": build, "distribution": dist,
                        "consumers": consumers,
                        "settlement": "presettled" if settled else "unsettled",
                        "scope": "core+ipc" if with_ipc else "core", "batch": batch,
                        "us_per_msg": round(best * 1e6, 3),
                        "us_per_msg_mean": round(statistics.fmean(rounds) * 1e6, 3),
                        "msgs_per_s": round(1 / best)})
    by_key = {(f["distribution"], f["settlement"], f["scope"], f["build"]): f["us_per_msg"]
              for f in figures}
    for (dist, settlement, scope, build), us in list(by_key.items()):
        pure = by_key.get((dist, settlement, scope, "pure"))
        if build == "compiled" and pure:
            figures.append({"bench": "core", "ratio": "pure/compiled", "distribution": dist,
                            "settlement": settlement, "scope": scope,
                            "speedup": round(pure / us, 2)})
    return figures


def main(argv: Any = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", help="append JSON lines to this file instead of stdout")
    args = parser.parse_args(argv)
    figures = run(args.messages, args.batch, args.repeat)
    rows: Dict[Tuple[str, int, str, str], Dict[str, float]] = {}
    for f in figures:
        if "us_per_msg" in f:
            key = (f["distribution"], f["consumers"], f["settlement"], f["scope"])
            rows.setdefault(key, {})[f["build"]] = f["us_per_msg"]
    print(f"{'distribution':<13}{'settlement':<12}{'scope':<10}{'compiled µs':>12}"
          f"{'pure µs':>10}{'speedup':>9}", file=sys.stderr)
    for (dist, n, settlement, scope), by_build in rows.items():
        comp, pure = by_build.get("compiled"), by_build.get("pure")
        ratio = f"{pure / comp:8.2f}x" if comp and pure else ""
        print(f"{dist + f'({n})':<13}{settlement:<12}{scope:<10}"
              f"{comp if comp is not None else float('nan'):>12.2f}{pure:>10.2f}{ratio:>9}",
              file=sys.stderr)
    lines = "".join(json.dumps(f) + "\n" for f in figures)
    if args.out:
        with open(args.out, "a", encoding="utf-8") as fh:
            fh.write(lines)
    else:
        sys.stdout.write(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
