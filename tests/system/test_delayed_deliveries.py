"""deliveriesDelayed1Sec: a real proton receiver holds a delivery unsettled for more than a
second; the router counts it on both links of its path and router-wide, shows it in the link
entity and ``qdstat -l`` (``delay``), and logs it in the link's ROUTER_CORE detach line."""
from __future__ import annotations

import subprocess
import sys
import time

from proton import Message
from proton.utils import BlockingConnection, SyncRequestResponse

TIMEOUT = 10
HOLD = 1.3  # more than the 1 s deliveriesDelayed1Sec is about


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
        sender.close()
        line = router.proc.wait_for_line("Link detached: del=2 ", timeout=TIMEOUT)
        assert line.endswith(" acc=2 rej=0 rel=0 mod=0 delay1=1 delay10=0 blocked=no")
    finally:
        conn.close()
