"""deliveriesDelayed1Sec: a real proton receiver holds a delivery unsettled for more than a
second; the router counts it on both links of its path and router-wide, shows it in the link
entity and ``qdstat -l`` (``delay``), and logs it in the link's ROUTER_CORE detach line. Run
against our router and, when ``QDROUTERD_1X`` names one, a real 1.x router (the same assertions
hold for both)."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

from test_no_path_drain import _one_x_router

TIMEOUT = 10
# more than the 1 s deliveriesDelayed1Sec is about, also in whole seconds of 1.19's uptime
# ticks (it counts a delay of more than one tick)
HOLD = 2.2
LOG = """
    log {
        module: DEFAULT
        enable: info+
    }
    """


@pytest.fixture(params=["ours", "1.x"])
def router(request, router_factory, tmp_path):
    if request.param == "ours":
        yield router_factory()
        return
    proc, r = _one_x_router(tmp_path, extra=LOG)
    try:
        yield r
    finally:
        proc.stop()


def query(url: str, entity_type: str) -> list[dict]:
    conn = BlockingConnection(url, timeout=TIMEOUT)
    try:
        reply = SyncRequestResponse(conn, "$management").call(Message(
            properties={"operation": "QUERY", "type": "org.amqp.management",
                        "entityType": f"org.apache.qpid.dispatch.{entity_type}"},
            body={"attributeNames": []}))
        names = reply.body["attributeNames"]
        return [dict(zip(names, row)) for row in reply.body["results"]]
    finally:
        conn.close()


def closed_line(proc, tag: str) -> str:
    """The ROUTER_CORE line of link ``tag`` (``[Cn][Lm] ``) being closed (bounded wait)."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        found = [line for line in proc.output().splitlines() if tag in line and " del=" in line]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no line of {tag} closing:\n{proc.output()}"
        time.sleep(0.05)


def test_delivery_held_unsettled_over_a_second_is_counted(router):
    conn = BlockingConnection(router.url, timeout=TIMEOUT, container_id="delaycli")
    try:
        receiver = conn.create_receiver("delay.q", credit=2)
        sender = conn.create_sender("delay.q")
        prompt = sender.link.send(Message(body="prompt"))
        assert receiver.receive(timeout=TIMEOUT).body == "prompt"
        receiver.accept()
        conn.wait(lambda: prompt.settled, timeout=TIMEOUT)
        held = sender.link.send(Message(body="held"))
        assert receiver.receive(timeout=TIMEOUT).body == "held"
        time.sleep(HOLD)  # the receiver holds it unsettled
        receiver.accept()
        conn.wait(lambda: held.settled, timeout=TIMEOUT)

        links = [lk for lk in query(router.url, "router.link") if lk.get("owningAddr") == "M0delay.q"]
        assert sorted(lk["linkDir"] for lk in links) == ["in", "out"]
        for link in links:
            assert link["acceptedCount"] == 2
            assert (link["deliveriesDelayed1Sec"], link["deliveriesDelayed10Sec"]) == (1, 0)
        [stats] = query(router.url, "router")
        assert stats["deliveriesDelayed1Sec"] == 1 and stats["deliveriesDelayed10Sec"] == 0

        out = subprocess.run([sys.executable, "-m", "tools.qdstat", "-b",
                              f"127.0.0.1:{router.port}", "-t", "5", "-l"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        heads = lines[lines.index("Router Links") + 1].split()
        delay = heads.index("delay") - len(heads)  # from the end: leading cells can be empty
        rows = [line.split() for line in lines if "delay.q" in line]
        assert len(rows) == 2 and all(row[delay] == "1" for row in rows), out.stdout
        [inbound] = [lk for lk in links if lk["linkDir"] == "in"]
        sender.close()
        # 1.19 says "Link cleanup deferred after IO processing" instead of "Link detached"
        # when its I/O thread happened to be busy with the link
        line = closed_line(router.proc, f"[C{inbound['connectionId']}][L{inbound['identity']}] ")
        assert line.endswith(": del=2 presett=0 psdrop=0 acc=2 rej=0 rel=0 mod=0 delay1=1 "
                             "delay10=0 blocked=no")
    finally:
        conn.close()
