#!/usr/bin/env python3
"""Record the routing-protocol messages a running Qpid Dispatch 1.x router sends, byte for byte.

Connects to an already running 1.x router's ``role: inter-router`` listener as a router of its
own (``--id``), takes part in the protocol just enough to be answered (HELLO, RA, LSU for its
LSR, an absolute MAU for its MAR), asks for an LSU (LSR) and an absolute MAU (MAR), and, when
``--normal-port`` is given, attaches a receiver on the 1.x router's normal listener so that it
announces a mobile address (a differential MAU). Every control message received is written, as
the raw AMQP message bytes (hex) the 1.x router put on the wire, to a JSON file::

    python scripts/capture_1x_routing.py --port 34101 --normal-port 34100 \
        --out tests/data/routing_1_19.json

Nothing here starts or builds a router. The capture in tests/data is replayed against our
routing engine by tests/unit/test_routing_1x_frames.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from proton import Message, symbol, int32
from proton import Handler
from proton.reactor import Container

HELLO_TO = "amqp:/_local/qdhello"
RA_TO = "amqp:/_topo/0/all/qdrouter"
MAU_ALL_TO = "amqp:/_topo/0/all/qdrouter.ma"


def _router_to(rid: str, ma: bool = False) -> str:
    return f"amqp:/_topo/0/{rid}/qdrouter" + (".ma" if ma else "")


class Capture(Handler):
    def __init__(self, args) -> None:
        super().__init__()
        self.args = args
        self.frames: list = []
        self.peer = None                   # the 1.x router's id, from its HELLO
        self.instance = int(time.time())
        self.started = time.monotonic()
        self.asked = False
        self.asked_ma = False
        self.client_done = False
        self.ctl_out = None

    # ---- set-up --------------------------------------------------------------------------------
    def on_reactor_init(self, event):
        c = event.container
        self.conn = c.connect(f"amqp://{self.args.host}:{self.args.port}",
                              allowed_mechs="ANONYMOUS")
        self.conn.container = self.args.id
        self.conn.offered_capabilities = [symbol("ANONYMOUS-RELAY")]
        self.conn.desired_capabilities = [symbol("ANONYMOUS-RELAY")]
        self.conn.properties = {symbol("product"): "capture", symbol("version"): "1.19.0",
                                symbol("qd.conn-id"): int32(1)}
        ssn = self.conn.session()
        ssn.open()
        control = [symbol("qd.router")]
        data = [symbol("qd.router-data")]
        self.ctl_in = ssn.receiver("qdlink.capture-control-in")
        self._caps(self.ctl_in, control)
        self.ctl_out = ssn.sender("qdlink.capture-control-out")
        self._caps(self.ctl_out, control)
        for link in (self.ctl_in, self.ctl_out):
            link.open()
        self.ctl_in.flow(1000)
        self.data = []
        for priority in range(10):
            rcv = ssn.receiver(f"qdlink.capture-data-in-{priority}")
            snd = ssn.sender(f"qdlink.capture-data-out-{priority}")
            for link in (rcv, snd):
                self._caps(link, data)
                link.open()
            rcv.flow(10)
            self.data.append(rcv)
        event.container.schedule(0.0, self)

    @staticmethod
    def _caps(link, caps) -> None:
        for terminus in (link.source, link.target):
            for cap in caps:
                terminus.capabilities.put_symbol(cap)

    # ---- protocol ------------------------------------------------------------------------------
    def send(self, opcode: str, to: str, body: dict) -> None:
        if self.ctl_out is None or self.ctl_out.credit <= 0:
            return
        msg = Message(address=to, properties={"opcode": opcode}, body=body, priority=9)
        dlv = self.ctl_out.send(msg)
        dlv.settle()

    def on_timer_task(self, event):
        elapsed = time.monotonic() - self.started
        seen = [self.peer] if self.peer else []
        self.send("HELLO", HELLO_TO, {"id": self.args.id, "pv": 1, "area": "0",
                                      "instance": self.instance, "seen": seen})
        if self.peer:
            self.send("RA", RA_TO, {"id": self.args.id, "pv": 1, "area": "0",
                                    "instance": self.instance, "ls_seq": 1, "mobile_seq": 1})
            if not self.asked and elapsed > 2:
                self.asked = True
                self.send("LSR", _router_to(self.peer), {"id": self.args.id, "pv": 1, "area": "0"})
            if not self.asked_ma and elapsed > 5:   # after its mobile_seq moved (the client)
                self.asked_ma = True
                self.send("MAR", _router_to(self.peer, True),
                          {symbol("id"): self.args.id, symbol("pv"): 1, symbol("area"): "0",
                           symbol("have_seq"): 0})
            if self.args.normal_port and not self.client_done and elapsed > 3:
                self.client_done = True
                c = event.container.connect(f"amqp://{self.args.host}:{self.args.normal_port}")
                ssn = c.session()
                ssn.open()
                rcv = ssn.receiver("capture-client")
                rcv.source.address = "capture.address"
                rcv.open()
                rcv.flow(1)
                c.open()
        if elapsed < self.args.seconds:
            event.container.schedule(1.0, self)
        else:
            event.container.stop()

    def on_delivery(self, event):
        dlv = event.delivery
        link = event.link
        if not link.is_receiver or not dlv.readable or dlv.partial:
            return
        raw = link.recv(dlv.pending)
        link.advance()
        dlv.update(0x24)
        dlv.settle()
        if link.name != self.ctl_in.name:
            return
        msg = Message()
        msg.decode(raw)
        opcode = None
        for k, v in (msg.properties or {}).items():
            if str(k) == "opcode":
                opcode = str(v)
        body = msg.body if isinstance(msg.body, dict) else {}
        fields = {str(k): v for k, v in body.items()}
        self.frames.append({"opcode": opcode, "to": msg.address, "hex": raw.hex(),
                            "at": round(time.monotonic() - self.started, 3)})
        if opcode == "HELLO" and self.peer is None:
            self.peer = str(fields.get("id"))
        if opcode == "LSR":
            self.send("LSU", _router_to(str(fields.get("id"))),
                      {"id": self.args.id, "pv": 1, "area": "0", "instance": self.instance,
                       "ls_seq": 1, "ls": {"id": self.args.id, "area": "0", "ls_seq": 1,
                                           "peers": {str(fields.get("id")): 1}}})
        elif opcode == "MAR":
            self.send("MAU", _router_to(str(fields.get("id")), True),
                      {symbol("id"): self.args.id, symbol("pv"): 1, symbol("area"): "0",
                       symbol("mobile_seq"): 1, symbol("exist"): ["M0capture.ours"],
                       symbol("hints"): [int32(0)]})
        if link.credit < 100:
            link.flow(1000)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True, help="the 1.x inter-router listener")
    parser.add_argument("--normal-port", type=int, help="the 1.x normal listener (for a MAU)")
    parser.add_argument("--id", default="Router.Capture", help="the id to take part as")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    handler = Capture(args)
    Container(handler).run()
    kinds = sorted({f["opcode"] for f in handler.frames if f["opcode"]})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"peer": handler.peer, "us": args.id, "frames": handler.frames}, f, indent=1)
        f.write("\n")
    print(f"{len(handler.frames)} frames from {handler.peer}: {', '.join(kinds)}")
    return 0 if handler.peer else 1


if __name__ == "__main__":
    sys.exit(main())
