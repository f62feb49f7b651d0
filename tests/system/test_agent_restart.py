"""A killed agent in the middle of a network resumes the routing protocol without an outage.

    A --1-> B <-1-- C        (interior routers on loopback; B's agent is killed with SIGKILL)

The supervisor restarts B's agent; the new agent restores the routing state its predecessor
saved in the router's runtime directory (same instance, link-state database, mobile addresses):
A and C never see B restart, never lose a route or an address, and traffic from a sender on A to
a receiver on C carries on through B's core while B's agent is down and after it is back.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time

from proton import Delivery, Message
from proton.handlers import MessagingHandler
from proton.utils import BlockingConnection, SyncRequestResponse

from clients import CountingReceiver, Loop
from test_network import Net, remote_seen, valid_origin

TIMEOUT = 10
NODE = "org.apache.qpid.dispatch.router.node"


def agent_pid(router) -> int:
    """The pid of the router's agent process (a child of its supervisor)."""
    out = subprocess.run(["ps", "-ww", "-o", "pid=,args=", "--ppid", str(router.proc.proc.pid)],
                         capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        pid, _, args = line.strip().partition(" ")
        if "agent.controlplane" in args.split():
            return int(pid)
    raise AssertionError(f"no agent process under {router.id}: {out!r}")


class Mgmt:
    def __init__(self, url: str) -> None:
        self.conn = BlockingConnection(url, timeout=TIMEOUT)
        self.rr = SyncRequestResponse(self.conn, "$management")

    def nodes(self) -> dict:
        """router id -> {nextHop, cost} from router.node."""
        reply = self.rr.call(Message(properties={"operation": "QUERY", "entityType": NODE},
                                     body={"attributeNames": ["id", "nextHop", "cost"]}))
        assert reply.properties["statusCode"] == 200, reply.properties
        return {row[0]: {"nextHop": row[1], "cost": row[2]} for row in reply.body["results"]}

    def close(self) -> None:
        self.conn.close()


class PacedSender(MessagingHandler):
    """Sends an unsettled message every ``interval`` seconds (when it has credit)."""

    def __init__(self, address: str, interval: float = 0.01) -> None:
        super().__init__(auto_settle=True)
        self.address = address
        self.interval = interval
        self.sent = 0
        self.outcomes: dict = {}
        self.running = True
        self.sender = None

    def on_connection_opened(self, event):
        self.sender = event.container.create_sender(event.connection, self.address)
        event.container.schedule(self.interval, self)

    def on_timer_task(self, event):
        if self.running and self.sender is not None and self.sender.credit > 0:
            self.sender.send(Message(body=f"m{self.sent}"))
            self.sent += 1
        if self.running:
            event.container.schedule(self.interval, self)

    def _outcome(self, state) -> None:
        self.outcomes[state] = self.outcomes.get(state, 0) + 1

    def on_accepted(self, event):
        self._outcome(Delivery.ACCEPTED)

    def on_rejected(self, event):
        self._outcome(Delivery.REJECTED)

    def on_released(self, event):  # proton reports MODIFIED here too
        self._outcome(event.delivery.remote_state)

    @property
    def settled(self) -> int:
        return sum(self.outcomes.values())


def test_killed_agent_in_the_middle_resumes_routing_without_an_outage(router_factory):
    net = Net(router_factory)
    net.line("A", "B", "C")                      # B connects to A, C connects to B
    a, b, c = net["A"], net["B"], net["C"]
    loop = Loop()
    mgmt_a = Mgmt(a.url)
    try:
        receiver = CountingReceiver("resume.q", keep=False)
        loop.connect(c.url, receiver)
        assert loop.run_until(lambda: receiver.opened, TIMEOUT)
        remote_seen(a, "resume.q")
        # B forwards A's messages to C: A's agent can take C's MAU (flooded through B's core)
        # before B's agent does, and B releases what comes before that
        remote_seen(b, "resume.q")
        valid_origin(b, "Router.A", "Router.C")  # B's own core takes A's deliveries toward C
        sender = PacedSender("resume.q")
        loop.connect(a.url, sender)
        assert loop.run_until(lambda: receiver.count >= 20, TIMEOUT), receiver.count
        everyone = {"Router.A", "Router.B", "Router.C"}
        before = mgmt_a.nodes()
        assert set(before) == everyone and before["Router.C"]["nextHop"] == "Router.B"

        old_pid = agent_pid(b)
        os.kill(old_pid, signal.SIGKILL)
        killed_at = time.monotonic()
        received_at_kill = receiver.count
        # A's node table, every ~0.2 s for 5 s: all three routers, C always reachable via B
        while time.monotonic() < killed_at + 5.0:
            loop.run_for(0.2)
            seen = mgmt_a.nodes()
            assert set(seen) == everyone, seen
            assert seen["Router.C"]["nextHop"] == "Router.B", seen
            assert seen["Router.B"]["cost"] == 1, seen
        line = b.proc.wait_for_line("is running again", timeout=TIMEOUT)
        assert "agent process" in line, line
        assert agent_pid(b) != old_pid
        b.proc.wait_for_line("Routing state restored", timeout=TIMEOUT)
        # the receiver kept receiving while B's agent was down and after it came back
        received_at_5s = receiver.count
        assert received_at_5s > received_at_kill + 50, (received_at_kill, received_at_5s)
        assert loop.run_until(lambda: receiver.count > received_at_5s + 50, TIMEOUT)
        # every message sent got an outcome, all of them accepted
        sender.running = False
        assert loop.run_until(lambda: sender.settled == sender.sent, TIMEOUT), \
            (sender.sent, sender.outcomes)
        assert sender.outcomes == {Delivery.ACCEPTED: sender.sent}
        assert receiver.count == sender.sent
        # nobody saw B restart
        for r in (a, c):
            assert "Detected Restart of Router Node" not in r.proc.output(), r.id
        # management on B answers again, and B still knows everyone
        mgmt_b = Mgmt(b.url)
        try:
            assert set(mgmt_b.nodes()) == everyone
        finally:
            mgmt_b.close()
        assert set(mgmt_a.nodes()) == everyone
    except AssertionError:
        for r in (a, b, c):
            print(f"==== {r.id}\n{r.proc.output()}")
        raise
    finally:
        mgmt_a.close()
        loop.close()
