"""The core process loop: the only place the core meets ZeroMQ and the clock.

Binds one ROUTER socket; every worker and the agent connect a DEALER with identity ``p<index>``.
Each iteration drains every batch that is ready, feeds it to the sans-I/O core with the current
time, then flushes the effects once: one batch per peer per iteration (batch, then flush).
Payload frames pass from the inbound peer's batch to the outbound peer's batch untouched.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import sys
import time
from typing import Any, Optional

import zmq

from router_core import ipc
from router_core.log import RouterLog
from router_core.procutil import run_profiled, core_endpoint, die_with_parent, status_socket
from router_core.select import get_core_class

_MAX_BATCHES_PER_LOOP = 512


class CoreProcess:
    def __init__(self, spec: dict, ipc_dir: str) -> None:
        router = spec["router"]
        self.log = RouterLog(spec.get("logs", []))
        core_cls = get_core_class()
        self.core = core_cls(spec["router_id"],
                             default_distribution=router.get("defaultDistribution", "balanced"),
                             addresses=spec.get("addresses", []))
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.bind(core_endpoint(ipc_dir))
        self.status = status_socket(self.ctx, ipc_dir)
        self.identities: dict[int, bytes] = {}
        self.running = True
        self.log.log("ROUTER_CORE", "info",
                     f"Router core started ({core_cls.__module__}), router id {spec['router_id']}")

    def run(self) -> None:
        self.status.send_multipart(ipc.encode_batch(-1, [
            ipc.ChildStatus("core", 0, os.getpid(), "ready", "")]))
        sock, core = self.sock, self.core
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        while self.running:
            try:
                poller.poll(1000)
            except zmq.ZMQError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            now = time.monotonic()
            for _ in range(_MAX_BATCHES_PER_LOOP):
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    peer, commands = ipc.decode_batch(frames[1:])
                except ipc.IpcError as exc:
                    self.log.log("ROUTER_CORE", "error", f"dropping malformed IPC batch: {exc}")
                    continue
                self.identities[peer] = frames[0]
                core.handle_batch(peer, commands, now)
            core.tick(now)
            self.flush()
        self.sock.close(0)
        self.status.close(0)
        self.ctx.term()

    def flush(self) -> None:
        for peer, effects in self.core.take_effects().items():
            identity = self.identities.get(peer)
            if identity is None or not effects:
                continue
            self.sock.send_multipart([identity, *ipc.encode_batch(-1, effects)])

    def stop(self, *_: Any) -> None:
        self.running = False


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(prog="qdrouterd-core")
    parser.add_argument("--ipc", required=True)
    args = parser.parse_args(argv)
    die_with_parent()
    with open(os.path.join(args.ipc, "spec.json"), encoding="utf-8") as f:
        spec = json.load(f)
    proc = CoreProcess(spec, args.ipc)
    signal.signal(signal.SIGTERM, proc.stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    run_profiled("core", proc.run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
