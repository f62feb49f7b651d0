"""linkCapacity bounds a client sender's unsettled deliveries, as Qpid Dispatch 1.19 does.

What 1.19 does (observed on a real 1.19 router, and what these tests check on ours;
``QDROUTERD_1X`` runs them against the 1.x router too): a sender on a normal connection gets
the listener's ``linkCapacity`` (250 by default) as credit, and the credit for an unsettled
delivery comes back when that delivery is settled (by the receiver's outcome, or by the
router releasing it), not when the router sends it on. So a receiver that holds its
deliveries unsettled stops the sender after ``linkCapacity`` of them, however much credit the
receiver gave; a pre-settled delivery's credit comes back as soon as it is sent on.

Every router and client is real (loopback); every wait is bounded.
"""
from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest
from proton import Delivery, Message
from proton.reactor import AtMostOnce
from proton.utils import BlockingConnection

from clients import pump_for, pump_until
from conftest import free_port

TIMEOUT = 10.0
WINDOW = 250  # linkCapacity's default
SMALL = 20    # the second listener's linkCapacity
ONE_X = os.environ.get("QDROUTERD_1X", "")


def _small_listener(port: int) -> str:
    return f"""
        listener {{
            host: 127.0.0.1
            port: {port}
            authenticatePeer: no
            saslMechanisms: ANONYMOUS
            linkCapacity: {SMALL}
        }}
        """


@pytest.fixture(params=["ours", "1.x"])
def urls(request, router_factory, tmp_path):
    """(url, url of the listener with linkCapacity SMALL) of a fresh router."""
    port = free_port()
    if request.param == "ours":
        r = router_factory(extra=_small_listener(port))
        yield r.url, f"amqp://127.0.0.1:{port}"
        return
    if not ONE_X or not os.access(os.path.join(ONE_X, "sbin", "qdrouterd"), os.X_OK):
        pytest.skip("set QDROUTERD_1X to a Qpid Dispatch 1.x install prefix to compare")
    from test_autolinks_1x import start_1x
    router = start_1x(tmp_path, f"X{free_port()}", _small_listener(port))
    try:
        yield router.url, f"amqp://127.0.0.1:{port}"
    finally:
        router.proc.stop()


class Pair:
    """A sender and a receiver (credit 1000, never settling by itself) on one address."""

    def __init__(self, snd_url: str, rcv_url: str, address: str, presettled: bool = False):
        self.sc = BlockingConnection(snd_url, timeout=TIMEOUT)
        self.rc = BlockingConnection(rcv_url, timeout=TIMEOUT)
        self.rcv = self.rc.create_receiver(address, credit=1000)
        self.snd = self.sc.create_sender(address, options=AtMostOnce() if presettled else None)
        self.sent: list = []

    def pump(self, condition, what: str) -> None:
        pump_until([self.sc, self.rc], condition, TIMEOUT, what)

    def send_while_credit(self, limit: int) -> bool:
        """Send as far as the sender's credit goes (at most ``limit`` in all); False (a pump
        condition that never holds by itself)."""
        link = self.snd.link
        while link.credit > 0 and len(self.sent) < limit:
            self.sent.append(link.send(Message(body=f"m{len(self.sent)}")))
        return False

    def arrived(self) -> int:
        return len(self.rcv.fetcher.incoming)

    def run_until_stalled(self, limit: int) -> None:
        """Send what credit allows until nothing more moves for half a second (bounded)."""
        last, idle = -1, 0
        deadline = time.monotonic() + 3 * TIMEOUT
        while idle < 5:
            assert time.monotonic() < deadline, f"still moving after {3 * TIMEOUT}s"
            self.pump(lambda: self.send_while_credit(limit) or True, "a pump")
            pump_for([self.sc, self.rc], 0.1)
            moved = (len(self.sent), self.arrived())
            idle = idle + 1 if moved == last else 0
            last = moved

    def settle(self, n: int) -> None:
        """The receiver accepts and settles its ``n`` oldest deliveries."""
        for _ in range(n):
            self.rcv.receive(timeout=TIMEOUT)
            self.rcv.accept()

    def close(self) -> None:
        self.sc.close()
        self.rc.close()


@pytest.mark.parametrize("listener, capacity", [("default", WINDOW), ("small", SMALL)])
def test_a_receiver_holding_deliveries_unsettled_stops_the_sender(urls, listener, capacity):
    url, small_url = urls
    p = Pair(small_url if listener == "small" else url, url, f"cap.{listener}")
    try:
        p.pump(lambda: p.snd.link.credit == capacity, "the sender gets its window")
        p.run_until_stalled(limit=1000)
        # the receiver has 1000 credit, but the sender stops at its link's capacity
        assert (len(p.sent), p.arrived(), p.snd.link.credit) == (capacity, capacity, 0)
        p.settle(5)
        p.pump(lambda: p.snd.link.credit == 5, "five credits back for five settled")
        pump_for([p.sc, p.rc], 0.3)
        assert p.snd.link.credit == 5
        p.run_until_stalled(limit=1000)
        assert (len(p.sent), p.snd.link.credit) == (capacity + 5, 0)
        p.pump(lambda: p.sent[0].remote_state == Delivery.ACCEPTED, "the outcome back")
    finally:
        p.close()


def test_presettled_deliveries_give_their_credit_back_when_sent_on(urls):
    url, small_url = urls
    p = Pair(small_url, url, "cap.presettled", presettled=True)
    try:
        p.pump(lambda: p.snd.link.credit == SMALL, "the sender gets its window")
        p.run_until_stalled(limit=5 * SMALL)
        assert len(p.sent) == p.arrived() == 5 * SMALL
    finally:
        p.close()


def test_released_deliveries_give_their_credit_back(urls):
    """A receiver's RELEASED settles a delivery: its credit comes back as for an outcome."""
    url, small_url = urls
    p = Pair(small_url, url, "cap.released")
    try:
        p.pump(lambda: p.snd.link.credit == SMALL, "the sender gets its window")
        p.run_until_stalled(limit=SMALL)
        assert p.snd.link.credit == 0
        for _ in range(3):
            p.rcv.receive(timeout=TIMEOUT)
            p.rcv.release(delivered=False)
        p.pump(lambda: p.snd.link.credit == 3, "three credits back for three released")
        assert [d.remote_state for d in p.sent[:3]] == [Delivery.RELEASED] * 3
    finally:
        p.close()


# ---- deliveries waiting for a receiver's credit (what 1.19 counts on the receiver's link) ------
def _link_rows(url: str, address: str) -> dict:
    """linkDir -> the router.link row of the endpoint link on ``address``."""
    from test_mixed_1x import _mgmt_query
    rows = _mgmt_query(SimpleNamespace(url=url), "org.apache.qpid.dispatch.router.link",
                       ["linkType", "linkDir", "owningAddr", "undeliveredCount",
                        "unsettledCount", "droppedPresettledCount", "presettledCount",
                        "deliveryCount"])
    return {row["linkDir"]: row for row in rows
            if row["linkType"] == "endpoint" and row["owningAddr"] == "M0" + address}


def _router_dropped(url: str) -> int:
    from test_mixed_1x import _mgmt_query
    return int(_mgmt_query(SimpleNamespace(url=url), "org.apache.qpid.dispatch.router",
                           ["droppedPresettledDeliveries"])[0]["droppedPresettledDeliveries"])


def test_presettled_deliveries_waiting_for_a_receiver_are_bounded_by_its_capacity(urls):
    """linkCapacity 20 on both links, the receiver grants 10: the sender gets its credit back
    for every pre-settled delivery and sends all 40; 10 arrive, the others wait on the
    receiver's link up to its capacity, where the waiting ones but the next are dropped and
    counted (the receiver's link and the router). More credit brings what waited, in order."""
    url, small_url = urls
    address = "cap.held.presettled"
    rc = BlockingConnection(small_url, timeout=TIMEOUT)
    sc = BlockingConnection(small_url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver(address, credit=0)  # (no prefetch: it grants 10, no more)
        rcv.link.flow(10)
        snd = sc.create_sender(address, options=AtMostOnce())
        pump_until([sc, rc], lambda: snd.link.credit == SMALL, TIMEOUT, "the sender's window")
        sent = 0
        deadline = time.monotonic() + TIMEOUT
        while sent < 2 * SMALL:
            assert time.monotonic() < deadline, f"the sender stalled after {sent}"
            while snd.link.credit > 0 and sent < 2 * SMALL:
                snd.link.send(Message(body=f"m{sent}")).settle()
                sent += 1
            pump_for([sc, rc], 0.05)
        pump_until([sc, rc], lambda: len(rcv.fetcher.incoming) == 10, TIMEOUT, "10 arrive")
        pump_for([sc, rc], 0.5)
        links = {}

        def counted():
            links.update(_link_rows(url, address))
            return "out" in links and links["out"]["undeliveredCount"] + links["out"][
                "droppedPresettledCount"] == 30
        pump_until([sc, rc], counted, TIMEOUT, "the waiting and dropped ones counted")
        out = links["out"]
        assert (out["undeliveredCount"], out["droppedPresettledCount"]) == (11, 19)
        assert (out["deliveryCount"], out["presettledCount"]) == (10, 29)  # dropped: counted
        assert links["in"]["undeliveredCount"] == links["in"]["droppedPresettledCount"] == 0
        assert _router_dropped(url) == 19
        rcv.link.flow(100)
        pump_until([sc, rc], lambda: len(rcv.fetcher.incoming) == 21, TIMEOUT, "11 more")
        bodies = [m.body for m, _ in rcv.fetcher.incoming]
        assert bodies == [f"m{i}" for i in range(11)] + [f"m{i}" for i in range(30, 40)]
    finally:
        sc.close()
        rc.close()


def test_unsettled_deliveries_waiting_for_a_receivers_credit_are_its_undelivered(urls):
    url, small_url = urls
    address = "cap.held.unsettled"
    rc = BlockingConnection(url, timeout=TIMEOUT)
    sc = BlockingConnection(small_url, timeout=TIMEOUT)
    try:
        rcv = rc.create_receiver(address, credit=0)
        rcv.link.flow(10)
        snd = sc.create_sender(address)
        pump_until([sc, rc], lambda: snd.link.credit == SMALL, TIMEOUT, "the sender's window")
        while snd.link.credit > 0:
            snd.link.send(Message(body="u"))
        pump_until([sc, rc], lambda: len(rcv.fetcher.incoming) == 10, TIMEOUT, "10 arrive")
        links = {}

        def counted():
            links.update(_link_rows(url, address))
            return "out" in links and links["out"]["undeliveredCount"] == 10
        pump_until([sc, rc], counted, TIMEOUT, "10 waiting on the receiver's link")
        assert links["out"]["unsettledCount"] == 10
        assert (links["in"]["undeliveredCount"], links["in"]["unsettledCount"]) == (0, 20)
        assert snd.link.credit == 0
    finally:
        sc.close()
        rc.close()
